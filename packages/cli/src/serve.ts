import { writeFile } from 'node:fs/promises';
import {
  API_KEY_HASH_FILE,
  collectRuntime,
  runtimeImageName,
  runtimeImageTar,
  loadConfig,
  readConfigFile,
  readFlags,
  redactConfig,
  startController,
  type Controller,
  type ControllerConfig,
} from '@warren/controller';

/**
 * The SDK example the README and `warren serve` print: plain JavaScript that Node 20 runs as
 * `node hello.mjs` from the repository (TypeScript users can write `await using` instead of
 * try/finally).
 */
export function sdkExample(url: string): string {
  return [
    `import { Sandbox } from '@warren/sdk';`,
    `const sandbox = await Sandbox.create({ baseUrl: '${url}', apiKey: process.env.WARREN_API_KEY });`,
    `try {`,
    `  await sandbox.files.write('hello.py', 'print("hello from the sandbox")');`,
    `  const { stdout, exitCode } = await sandbox.commands.run('python3 hello.py');`,
    `  console.log(exitCode, stdout);`,
    `} finally {`,
    `  await sandbox.kill();`,
    `}`,
  ].join('\n');
}

/** The options of `warren serve`. */
export interface ServeOptions {
  host?: string;
  port?: number;
  config?: string;
  printConfig?: boolean;
}

/**
 * The configuration `warren serve` runs with: defaults, then the file (`--config`, else
 * `WARREN_CONFIG`), then the environment, then the flags, each checked by the controller's one
 * schema. A bad setting throws the error a start would, naming the file key, variable or flag.
 */
function serveSettings(options: ServeOptions, env: NodeJS.ProcessEnv): { flags: Partial<ControllerConfig>; configFile: string | undefined } {
  const configFile = options.config ?? (env.WARREN_CONFIG || undefined);
  if (configFile !== undefined) readConfigFile(configFile); // a bad file fails here, naming the setting
  return { flags: readFlags({ host: options.host, port: options.port }), configFile };
}

/**
 * `warren serve --print-config`: the effective configuration as JSON, with the API key and its
 * digests redacted, without starting anything. Throws, as a start would, when a setting is invalid.
 *
 * @example
 * process.stdout.write(effectiveConfigText({ port: 8080 }, process.env));
 */
export function effectiveConfigText(options: ServeOptions, env: NodeJS.ProcessEnv = process.env): string {
  const { flags, configFile } = serveSettings(options, env);
  return `${JSON.stringify(redactConfig(loadConfig(env, flags, configFile)), null, 2)}\n`;
}

/**
 * `warren serve`: starts the controller in the foreground and prints how to use it. Stopping it
 * (Ctrl-C, SIGTERM) leaves the sandboxes running; the next start picks them up again. With
 * `printConfig`, prints the effective configuration instead (see {@link effectiveConfigText}).
 */
export async function serve(options: ServeOptions): Promise<Controller | undefined> {
  if (options.printConfig) {
    process.stdout.write(effectiveConfigText(options));
    return undefined;
  }
  const { flags, configFile } = serveSettings(options, process.env);
  if (configFile !== undefined) process.env.WARREN_CONFIG = configFile;
  const controller = await startController({ config: flags });
  const hashFile = `${controller.config.stateDir}/${API_KEY_HASH_FILE}`;
  const keyLines = controller.generatedApiKey
    ? [`API key:    ${controller.generatedApiKey}`, `            shown this once: only its SHA-256 digest is kept (${hashFile}). Save it now.`]
    : process.env.WARREN_API_KEY
      ? ['API key:    the value of WARREN_API_KEY']
      : [
          'API key:    the one printed when Warren first started (only its digest is kept).',
          `            Lost it? Stop Warren, delete ${hashFile}, and start again for a new one, or set WARREN_API_KEY.`,
        ];
  process.stdout.write(
    [
      '',
      `Warren is listening on ${controller.url}`,
      ...keyLines,
      ...(controller.config.console.enabled ? [`Web console: ${controller.url}${controller.config.console.path}/ (log in with the API key)`] : []),
      '',
      'Try it: save this as hello.mjs in the repository, set WARREN_API_KEY to the key above, run node hello.mjs',
      '',
      sdkExample(controller.url),
      '',
    ].join('\n') + '\n',
  );
  const stop = () => void controller.close().then(() => process.exit(0));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  return controller;
}

/**
 * Writes this controller's runtime as an image archive and returns the image's name: the name the
 * Kubernetes provider asks for by default, so the archive must come from the same installation
 * (the controller image) that serves.
 *
 * @example
 * await writeRuntimeImage('runtime.tar'); // 'warren/runtime:0123abcd...'
 */
export async function writeRuntimeImage(output: string, repository = 'warren/runtime'): Promise<string> {
  const runtime = await collectRuntime(loadConfig().agentBundlePath);
  const name = runtimeImageName(runtime, repository);
  await writeFile(output, await runtimeImageTar(runtime, name));
  return name;
}
