import { CODE_LANGUAGES } from '@warren/protocol';
import { z } from 'zod';
import { displayImage, type Code, type CodeRunResult } from '../code.js';
import { KernelDiedError } from '../errors.js';
import { defineTool, errorText, isToolError, toolError, type ToolContent, type ToolError, type ToolSet } from './tool.js';

/** `run_code`'s timeout default, in seconds. */
export const RUN_CODE_DEFAULT_TIMEOUT_SECONDS = 60;

const IMAGE_TYPES = ['image/png', 'image/jpeg'] as const;

const RunCodeInput = z.strictObject({
  code: z.string().min(1).describe('The code to run, as one notebook cell. The value of the last line is returned.'),
  language: z.enum(CODE_LANGUAGES).default('python').describe('python (default), javascript or typescript.'),
  timeout: z.number().positive().max(3600).default(RUN_CODE_DEFAULT_TIMEOUT_SECONDS).describe('Seconds before the cell is interrupted (default 60).'),
});

/** Something with Warren's `code` namespace: a `Sandbox`. */
export interface CodeInterpreterTarget {
  code: Code;
}

/**
 * `run_code`'s text for a model: stdout and stderr as printed, each rich output (the last value,
 * tables as text, a note per image), the error with its traceback, and notes on a timeout or
 * cut output.
 *
 * @example
 * formatCodeResult(result); // 'hello\n[result] 42'
 */
export function formatCodeResult(result: CodeRunResult): string {
  const parts: string[] = [];
  if (result.stdout) parts.push(result.stdout.replace(/\n$/, ''));
  if (result.stderr) parts.push(`[stderr]\n${result.stderr.replace(/\n$/, '')}`);
  for (const output of result.results) {
    const image = displayImage(output);
    const claimed = IMAGE_TYPES.find((type) => output.data[type] !== undefined);
    const label = output.isMainResult ? '[result]' : '[display]';
    if (image) {
      parts.push(`${label} ${image.mimeType} image (${image.bytes.length} bytes; shown as an image where the API allows)`);
      continue;
    }
    // A value under an image type that is not that image: said, never passed on as one.
    if (claimed) parts.push(`${label} ${claimed} output that is not a valid ${claimed.slice(6).toUpperCase()} image (left out)`);
    if (typeof output.data['image/svg+xml'] === 'string') parts.push(`${label} image/svg+xml image (${output.data['image/svg+xml'].length} characters)`);
    else if (typeof output.data['text/plain'] === 'string') parts.push(`${label} ${output.data['text/plain']}`);
    else if (typeof output.data['text/markdown'] === 'string') parts.push(`${label} ${output.data['text/markdown']}`);
    else if (output.data['application/json'] !== undefined) parts.push(`${label} ${JSON.stringify(output.data['application/json'])}`);
  }
  if (result.error) parts.push(`[error] ${result.error.name}: ${result.error.value}\n${result.error.traceback}`);
  if (result.timedOut) parts.push(`[interrupted at the timeout after ${Math.round(result.durationMs / 1000)} seconds; variables defined before are kept]`);
  if (result.truncated) parts.push('[output truncated: print less, or summarise (df.head(), len(x))]');
  return parts.length === 0 ? '[no output]' : parts.join('\n');
}

/**
 * The code interpreter as a tool set: `run_code` runs a cell in the sandbox's default context of
 * its language, so variables and imports carry over between calls. Charts come back as images to
 * APIs whose tool results carry them (`dispatchAnthropicToolUse(..., { images: true })`,
 * `callMCPTool`); the text says what they are. A kernel that died is restarted and the result says
 * that its state is gone.
 *
 * @example
 * const tools = codeInterpreterTools(sandbox);
 * const message = await anthropic.messages.create({ model, max_tokens: 4096, messages, tools: toAnthropicTools(tools) });
 */
export function codeInterpreterTools(target: CodeInterpreterTarget): ToolSet {
  return [
    defineTool({
      name: 'run_code',
      description:
        'Run code in a persistent interpreter in the sandbox, like a notebook cell: variables, imports and functions stay for the next call. ' +
        'Python has numpy, pandas and matplotlib; a matplotlib chart is returned as an image without calling savefig. ' +
        'Returns printed output, the value of the last line, and an error with its traceback. Default timeout: 60 seconds.',
      input: RunCodeInput,
      execute: async ({ code, language, timeout }, { signal }): Promise<CodeRunResult | ToolError> => {
        try {
          return await target.code.run(code, { language, timeoutMs: Math.ceil(timeout * 1000), signal });
        } catch (err) {
          if (!(err instanceof KernelDiedError)) throw err;
          await target.code.restartContext(`default-${language}`, { signal }).catch(() => undefined);
          return toolError(
            'KERNEL_DIED',
            `The ${language} interpreter died while running this code (${err.message}). It has been restarted: every variable and import is gone.`,
            'Run your imports and setup again; if the code used too much memory, work on a smaller piece of the data.',
          );
        }
      },
      toText: (result) => (isToolError(result) ? errorText(result) : formatCodeResult(result)),
      toContent: codeResultContent,
    }),
  ];
}

/** The text of a result, then each PNG or JPEG it holds as an image: only real ones, checked by {@link displayImage}. */
function codeResultContent(result: CodeRunResult): ToolContent[] {
  const content: ToolContent[] = [{ type: 'text', text: formatCodeResult(result) }];
  for (const output of result.results) {
    const image = displayImage(output);
    if (image) content.push({ type: 'image', mimeType: image.mimeType, data: image.base64 });
  }
  return content;
}
