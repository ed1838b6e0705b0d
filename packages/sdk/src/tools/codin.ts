import { MAX_READ_LINES } from '@warren/protocol';
import { z } from 'zod';
import type { LineSlice } from '../files.js';
import { need, type ToolCommandResult } from './context.js';
import { asToolContext, type ToolTarget } from './sandbox-context.js';
import { joinShown } from './text.js';
import { defineTool, type ToolSet } from './tool.js';

/** Seed 000's `max_lines` default. */
export const CODIN_DEFAULT_MAX_LINES = 1000;
/** Seed 000's `max_files` default. */
export const CODIN_DEFAULT_MAX_FILES = 100;
/** `sandbox_exec`'s timeout when the call names none (seed 000 leaves it open). */
export const CODIN_DEFAULT_EXEC_TIMEOUT_SECONDS = 60;

/** The arguments of `sandbox_read_file` that shape its output. */
export interface CodinReadRange {
  start_line?: number | undefined;
  end_line?: number | undefined;
  max_lines?: number | undefined;
}

/**
 * Seed 000's `sandbox_read_file` output from a line read of the file (`slice`, asked for with
 * `start`/`end` = `start_line`/`end_line` and `maxLines` = `max_lines`). A call without a line range on
 * a file of at most `max_lines` lines returns the content as it is. Otherwise the output starts with
 * `# File: {path}` and `# Lines {a}-{b} of {N} total`, then `# Output truncated to {max_lines} lines`
 * when the range held more than `max_lines` lines, then an empty line and the lines themselves.
 * Line numbers below 1 are clamped to 1, an `end_line` past the end to the last line; a range whose
 * start lies after its end (after clamping) gives the headers, with that range, and no content.
 *
 * @example
 * formatCodinRead('example.py', await files.readLines('example.py', { startLine: 10, endLine: 20, maxLines: 1000 }), { start_line: 10, end_line: 20 });
 * // '# File: example.py\n# Lines 10-20 of 100 total\n\n...lines 10 to 20...'
 */
export function formatCodinRead(path: string, slice: Omit<LineSlice, 'truncated'>, range: CodinReadRange = {}): string {
  const maxLines = range.max_lines ?? CODIN_DEFAULT_MAX_LINES;
  const total = slice.totalLines;
  if (range.start_line === undefined && range.end_line === undefined && total <= maxLines) return slice.content;
  const start = Math.max(1, range.start_line ?? 1);
  const wantedEnd = Math.min(total, range.end_line === undefined ? total : Math.max(1, range.end_line));
  const truncated = wantedEnd - start + 1 > maxLines;
  const end = truncated ? start + maxLines - 1 : wantedEnd;
  const header = [`# File: ${path}`, `# Lines ${start}-${end} of ${total} total`];
  if (truncated) header.push(`# Output truncated to ${maxLines} lines`);
  return `${header.join('\n')}\n\n${start > end ? '' : slice.content}`;
}

/**
 * `sandbox_exec`'s text: `Exit code: N` (or a timeout line), then `STDOUT:` and `STDERR:` sections
 * for the streams that printed anything, then a note when the output was cut.
 *
 * @example
 * formatCodinExec({ exitCode: 0, stdout: 'hi\n', stderr: '', timedOut: false, truncated: false }, 60);
 * // 'Exit code: 0\nSTDOUT:\nhi\n'
 */
export function formatCodinExec(result: ToolCommandResult, timeoutSeconds: number): string {
  const parts = [
    result.timedOut ? `Command timed out after ${timeoutSeconds} seconds (killed)` : `Exit code: ${result.exitCode ?? 'none (killed by a signal)'}`,
  ];
  if (result.stdout !== '') parts.push(`STDOUT:\n${result.stdout}`);
  if (result.stderr !== '') parts.push(`STDERR:\n${result.stderr}`);
  if (result.stdout === '' && result.stderr === '') parts.push('(no output)');
  if (result.truncated) parts.push('(output truncated: the command printed more than the sandbox keeps)');
  return parts.map((part) => (part.endsWith('\n') ? part.slice(0, -1) : part)).join('\n') + '\n';
}

/**
 * `sandbox_list_files`'s text: one path per line (folders end in `/`), shown under the listed
 * path, then `# Output truncated to {max_files} files` when there were more.
 *
 * @example
 * formatCodinList('src', [{ path: 'a.py', type: 'file' }, { path: 'pkg', type: 'directory' }], false, 100);
 * // 'src/a.py\nsrc/pkg/'
 */
export function formatCodinList(path: string, entries: { path: string; type: string }[], truncated: boolean, maxFiles: number): string {
  if (entries.length === 0) return `# No files in ${path}`;
  const lines = entries.map((entry) => joinShown(path, entry.path) + (entry.type === 'directory' ? '/' : ''));
  if (truncated) lines.push(`# Output truncated to ${maxFiles} files`);
  return lines.join('\n');
}

const ReadInput = z.strictObject({
  path: z.string().min(1).describe('Path to the file to read'),
  start_line: z.number().int().optional().describe('Starting line number (1-indexed, inclusive). If not provided, reads from beginning'),
  end_line: z.number().int().optional().describe('Ending line number (1-indexed, inclusive). If not provided, reads to end'),
  max_lines: z
    .number()
    .int()
    .min(1)
    .max(MAX_READ_LINES)
    .default(CODIN_DEFAULT_MAX_LINES)
    .describe('Maximum number of lines to return (default: 1000, to prevent token overflow)'),
});

const WriteInput = z.strictObject({
  path: z.string().min(1).describe('Path to write the file to'),
  content: z.string().describe('Content to write to the file'),
});

const ExecInput = z.strictObject({
  cmd: z.string().min(1).describe('The command to execute'),
  cwd: z.string().min(1).optional().describe('Working directory for the command'),
  timeout: z.number().positive().optional().describe(`Command timeout in seconds (default: ${CODIN_DEFAULT_EXEC_TIMEOUT_SECONDS})`),
  env: z.record(z.string(), z.string()).optional().describe('Environment variables'),
});

const ListInput = z.strictObject({
  path: z.string().min(1).default('.').describe('Directory path to list files from (default: ".")'),
  recursive: z.boolean().default(false).describe('Whether to list files recursively in subdirectories (default: false)'),
  max_files: z.number().int().min(1).default(CODIN_DEFAULT_MAX_FILES).describe('Maximum number of files to return (default: 100)'),
});

/**
 * Seed 000 ("Codin"): `sandbox_read_file`, `sandbox_write_file`, `sandbox_exec`, `sandbox_list_files`.
 *
 * @example
 * const tools = codinTools(sandbox);
 * const reply = await openai.chat.completions.create({ model, messages, tools: toOpenAITools(tools) });
 */
export function codinTools(target: ToolTarget): ToolSet {
  const { files, commands } = asToolContext(target);
  return [
    defineTool({
      name: 'sandbox_read_file',
      description:
        'Read a file from the sandbox environment. Supports reading specific line ranges to avoid token overflow. ' +
        'Without start_line/end_line, a file of at most max_lines lines is returned as it is; otherwise the output starts with ' +
        '"# File: {path}" and "# Lines {start}-{end} of {total} total" headers (plus "# Output truncated to {max_lines} lines" when cut), ' +
        'an empty line, then the lines. Line numbers are 1-indexed and inclusive; numbers below 1 are clamped to 1.',
      input: ReadInput,
      execute: async (args, { signal }) => {
        const readLines = need(files.readLines?.bind(files), 'line-range read', 'sandbox_read_file');
        const slice = await readLines(args.path, { startLine: args.start_line, endLine: args.end_line, maxLines: args.max_lines }, { signal });
        return formatCodinRead(args.path, slice, args);
      },
    }),
    defineTool({
      name: 'sandbox_write_file',
      description:
        'Write content to a file in the sandbox environment. Replaces the file if it exists and creates missing parent folders. Answers "Wrote {n} bytes to {path}".',
      input: WriteInput,
      execute: async (args, { signal }) => {
        const { bytesWritten } = await files.write(args.path, args.content, { signal });
        return `Wrote ${bytesWritten} bytes to ${args.path}`;
      },
    }),
    defineTool({
      name: 'sandbox_exec',
      description:
        'Execute a command in the sandbox environment (through /bin/sh -c). ' +
        `The answer starts with "Exit code: N", followed by "STDOUT:" and "STDERR:" sections. Default timeout: ${CODIN_DEFAULT_EXEC_TIMEOUT_SECONDS} seconds.`,
      input: ExecInput,
      execute: async (args, { signal }) => {
        const timeout = args.timeout ?? CODIN_DEFAULT_EXEC_TIMEOUT_SECONDS;
        const result = await commands.run(args.cmd, { cwd: args.cwd, env: args.env, timeoutMs: Math.ceil(timeout * 1000), signal });
        return formatCodinExec(result, timeout);
      },
    }),
    defineTool({
      name: 'sandbox_list_files',
      description:
        'List files in a directory in the sandbox environment (non-recursive by default to avoid large outputs). ' +
        'One path per line, folders end in "/"; at most max_files entries (default 100), then "# Output truncated to {max_files} files".',
      input: ListInput,
      execute: async (args, { signal }) => {
        const list = need(files.list?.bind(files), 'list', 'sandbox_list_files');
        const { entries, truncated } = await list(args.path, { recursive: args.recursive, limit: args.max_files, signal });
        return formatCodinList(args.path, entries.slice(0, args.max_files), truncated || entries.length > args.max_files, args.max_files);
      },
    }),
  ];
}
