import { posix } from 'node:path';
import { MAX_READ_CHARS } from '@warren/protocol';
import { z } from 'zod';
import { need, type ToolFiles } from './context.js';
import { asToolContext, type ToolTarget } from './sandbox-context.js';
import { defineTool, type ToolError, type ToolErrorCode, type ToolSet } from './tool.js';

/** Seed 001's `read` default for `max_chars`. */
export const FILESYSTEM_DEFAULT_MAX_CHARS = 20_000;

/** Seed 001's `ReadResult`, field for field. */
export interface ReadResult {
  /** The file content read. */
  content: string;
  /** True if more content exists. */
  truncated: boolean;
  /** Total file size in characters. */
  total_chars: number;
  /** Starting position used. */
  offset: number;
  /** Characters actually returned. */
  chars_read: number;
}

/**
 * The seed 001 error class a Warren error code corresponds to (`SandboxError` for the rest).
 *
 * @example
 * filesystemErrorClass('SUFFIX_NOT_ALLOWED'); // 'SuffixNotAllowedError'
 */
export function filesystemErrorClass(code: ToolErrorCode): string {
  switch (code) {
    case 'PATH_NOT_IN_SANDBOX':
      return 'PathNotInSandboxError';
    case 'PATH_NOT_WRITABLE':
      return 'PathNotWritableError';
    case 'PERMISSION_ESCALATION':
      return 'SandboxPermissionEscalationError';
    case 'SUFFIX_NOT_ALLOWED':
      return 'SuffixNotAllowedError';
    case 'FILE_TOO_LARGE':
      return 'FileTooLargeError';
    case 'EDIT_NOT_FOUND':
    case 'EDIT_NOT_UNIQUE':
      return 'EditError';
    default:
      return 'SandboxError';
  }
}

/**
 * An error as seed 001 shows it to a model: `{ErrorClass}: {message}` and what to do instead.
 *
 * @example
 * filesystemErrorText(toolError('PATH_NOT_WRITABLE', "'a.txt' is read-only.", 'Write only below /workspace/out.'));
 * // "PathNotWritableError: 'a.txt' is read-only.\nWrite only below /workspace/out."
 */
export function filesystemErrorText(error: ToolError): string {
  const name = (error['error_class'] as string | undefined) ?? filesystemErrorClass(error.code);
  return error.suggestion ? `${name}: ${error.error}\n${error.suggestion}` : `${name}: ${error.error}`;
}

const onError = (error: ToolError): ToolError => ({ ...error, error_class: filesystemErrorClass(error.code) });
// A credential that may not write at all (a read-only sandbox or derived handle) is, to a model, a path it cannot write.
const onWriteError = (error: ToolError): ToolError => ({
  ...error,
  error_class: error.code === 'FORBIDDEN' ? 'PathNotWritableError' : filesystemErrorClass(error.code),
});
const toText = (result: unknown): string => {
  if (typeof result === 'object' && result !== null && (result as ToolError).isError === true) return filesystemErrorText(result as ToolError);
  return typeof result === 'string' ? result : JSON.stringify(result, null, 2);
};

const PathArg = z.string().min(1);

/**
 * Seed 001's `FileSystemToolset`: `read` (a `ReadResult`), `write`, `edit`, `delete`, `move`,
 * `copy`, `list_files`. The permission model (root or named paths, `ro`/`rw`, suffixes,
 * `max_file_bytes`, approvals) is the sandbox's file policy, checked in the sandbox; hand this
 * function a narrowed handle (`sandbox.derive(...)`) to give a model less. Errors name the seed's
 * error class (`PathNotWritableError: ...`) and say what is allowed.
 *
 * @example
 * const tools = filesystemTools(sandbox);
 * const { content, truncated } = (await tools[0].run({ path: 'notes.md' })) as ReadResult;
 */
export function filesystemTools(target: ToolTarget): ToolSet {
  const { files } = asToolContext(target);
  return [
    defineTool({
      name: 'read',
      description:
        'Read a text file from the sandbox. Returns a ReadResult: {content, truncated, total_chars, offset, chars_read}. ' +
        'At most max_chars characters (default 20000) from offset (default 0); when truncated is true, read again with offset = offset + chars_read.',
      input: z.strictObject({
        path: PathArg.describe('Path of the file in the sandbox.'),
        max_chars: z.number().int().min(1).max(MAX_READ_CHARS).default(FILESYSTEM_DEFAULT_MAX_CHARS).describe('Maximum characters to return (default 20000).'),
        offset: z.number().int().min(0).default(0).describe('Character position to start from (default 0).'),
      }),
      output: 'json',
      onError,
      toText,
      execute: async ({ path, max_chars, offset }, { signal }): Promise<ReadResult> => {
        const readChars = need(files.readChars?.bind(files), 'character-range read', 'read');
        const slice = await readChars(path, { offset, length: max_chars }, { signal });
        return { content: slice.content, truncated: slice.truncated, total_chars: slice.totalChars, offset: slice.offset, chars_read: slice.charsRead };
      },
    }),
    defineTool({
      name: 'write',
      description: 'Write a text file. Parent directories are created automatically; an existing file is replaced.',
      input: z.strictObject({ path: PathArg.describe('Path of the file in the sandbox.'), content: z.string().describe('The full content to write.') }),
      onError: onWriteError,
      toText,
      execute: async ({ path, content }, { signal }) => {
        await files.write(path, content, { signal });
        return `Wrote ${content.length} characters to ${path}`;
      },
    }),
    defineTool({
      name: 'edit',
      description: 'Edit a file by replacing exact text. old_text must match exactly (whitespace included) and appear only once in the file.',
      input: z.strictObject({
        path: PathArg.describe('Path of the file in the sandbox.'),
        old_text: z.string().min(1).describe('The exact text to replace; it must occur exactly once.'),
        new_text: z.string().describe('The replacement text.'),
      }),
      onError: onWriteError,
      toText,
      execute: async ({ path, old_text, new_text }, { signal }) => {
        const edit = need(files.edit?.bind(files), 'exact-text edit', 'edit');
        await edit(path, old_text, new_text, { signal });
        return `Edited ${path}: replaced 1 occurrence`;
      },
    }),
    defineTool({
      name: 'delete',
      description: 'Delete a file from the sandbox.',
      input: z.strictObject({ path: PathArg.describe('Path of the file to delete.') }),
      onError: onWriteError,
      toText,
      execute: async ({ path }, { signal }) => {
        await need(files.delete?.bind(files), 'delete', 'delete')(path, { signal });
        return `Deleted ${path}`;
      },
    }),
    defineTool({
      name: 'move',
      description: 'Move or rename a file. Parent directories of destination are created automatically.',
      input: z.strictObject({ source: PathArg.describe('Path of the file to move.'), destination: PathArg.describe('Its new path.') }),
      onError: onWriteError,
      toText,
      execute: async ({ source, destination }, { signal }) => {
        const move = need(files.move?.bind(files), 'move', 'move');
        await makeParent(files, destination, signal);
        await move(source, destination, { overwrite: true, signal });
        return `Moved ${source} to ${destination}`;
      },
    }),
    defineTool({
      name: 'copy',
      description: 'Copy a file. Source can be read-only, destination must be writable.',
      input: z.strictObject({ source: PathArg.describe('Path of the file to copy.'), destination: PathArg.describe('Path of the copy.') }),
      onError: onWriteError,
      toText,
      execute: async ({ source, destination }, { signal }) => {
        const copy = need(files.copy?.bind(files), 'copy', 'copy');
        await makeParent(files, destination, signal);
        await copy(source, destination, { overwrite: true, signal });
        return `Copied ${source} to ${destination}`;
      },
    }),
    defineTool({
      name: 'list_files',
      description: 'List files matching a glob pattern (default "**/*": every file below path). Returns a JSON array of paths relative to path.',
      input: z.strictObject({
        path: PathArg.default('.').describe('Folder to search from (default ".").'),
        pattern: z.string().min(1).default('**/*').describe('Glob pattern, e.g. "**/*.py" (default "**/*").'),
      }),
      output: 'json',
      onError,
      toText,
      execute: async ({ path, pattern }, { signal }) => need(files.glob?.bind(files), 'glob', 'list_files')(path, pattern, { signal }),
    }),
  ];
}

/** Seed 001 (like Python's shutil) replaces an existing destination and creates its parent folders. */
async function makeParent(files: ToolFiles, path: string, signal: AbortSignal | undefined): Promise<void> {
  const parent = posix.dirname(path);
  if (parent !== '.' && parent !== '/' && files.mkdir) await files.mkdir(parent, { parents: true, signal });
}
