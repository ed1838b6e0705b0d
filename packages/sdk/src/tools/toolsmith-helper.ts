import { readFile } from 'node:fs/promises';
import { toolError } from './tool.js';

/** The helper beside this module: in src/tools for the sources, in dist/tools for the built and published package. */
const HELPER = new URL('./toolsmith-helper.py', import.meta.url);

let helperText: Promise<string> | undefined;

/**
 * The Python side of the Toolsmith tools (toolsmith-helper.py), read once from the package. It runs
 * inside the sandbox as `python3 -c <text> <operation> [args...]` (argv, no shell, nothing written
 * to the workspace). Source code to analyse arrives on stdin (the SDK reads it through the file
 * policy first); the answer is one JSON object on the last line of stdout.
 *
 * @example
 * await commands.run(['python3', '-c', await toolsmithHelper(), 'syntax'], { stdin: 'x = 1\n' });
 */
export function toolsmithHelper(): Promise<string> {
  helperText ??= readFile(HELPER, 'utf8').catch((err: unknown) => {
    helperText = undefined;
    throw toolError(
      'INTERNAL',
      `The Toolsmith helper ${HELPER.pathname} could not be read: ${err instanceof Error ? err.message : String(err)}.`,
      'The @warren/sdk install is incomplete: reinstall it (in a checkout, run pnpm build).',
    );
  });
  return helperText;
}
