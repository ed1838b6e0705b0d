import { Sandbox, toolContext, type SandboxCreateOptions, type ToolContext } from '@warren/sdk';
import { startTestController, type TestController } from './fixtures.js';

/** One controller and one sandbox for a tool-set e2e file, with the tool context over it. */
export interface ToolsetSandbox extends AsyncDisposable {
  warren: TestController;
  sandbox: Sandbox;
  context: ToolContext;
}

/**
 * Starts a controller and one sandbox (the default image) for a file's scripted loop.
 *
 * @example
 * const env = await startToolsetSandbox();
 * const tools = codinTools(env.context);
 */
export async function startToolsetSandbox(options: Omit<SandboxCreateOptions, 'baseUrl' | 'apiKey'> = {}): Promise<ToolsetSandbox> {
  const warren = await startTestController();
  try {
    const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, ...options });
    return {
      warren,
      sandbox,
      context: toolContext(sandbox),
      [Symbol.asyncDispose]: async () => {
        await sandbox.kill().catch(() => undefined);
        await warren[Symbol.asyncDispose]();
      },
    };
  } catch (err) {
    await warren[Symbol.asyncDispose]();
    throw err;
  }
}

/** `print(1)\n` .. `print(N)\n`: a Python file whose line N prints N. */
export function printLines(count: number): string {
  return Array.from({ length: count }, (_, i) => `print(${i + 1})\n`).join('');
}
