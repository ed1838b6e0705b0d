import { posix } from 'node:path';
import type { Commands } from '../commands.js';
import { Files } from '../files.js';
import type { ToolContext, ToolFiles } from './context.js';

/** Anything with Warren's `files` and `commands` namespaces: a `Sandbox`, or a test agent. */
export interface SandboxLike {
  files: Files;
  commands: Commands;
}

/** What a tool set is built on: a sandbox (or anything with its `files` and `commands`), or a {@link ToolContext}. */
export type ToolTarget = SandboxLike | ToolContext;

/**
 * The tool context of a target: a sandbox is wrapped with {@link toolContext}, a context is used as it is.
 *
 * @example
 * const { files, commands } = asToolContext(sandbox);
 */
export function asToolContext(target: ToolTarget): ToolContext {
  return target.files instanceof Files ? toolContext(target as SandboxLike) : (target as ToolContext);
}

/**
 * The primitives of a sandbox, as the tool sets use them: a thin mapping onto `sandbox.files`
 * and `sandbox.commands`, so every check (policy, clamping, anchors) happens in the sandbox.
 *
 * @example
 * await using sandbox = await Sandbox.create();
 * const tools = builtinTools(toolContext(sandbox));
 */
export function toolContext(sandbox: SandboxLike): ToolContext {
  const { files, commands } = sandbox;
  const toolFiles: ToolFiles = {
    readText: (path, options = {}) => files.readText(path, options),
    write: async (path, content, options = {}) => ({ bytesWritten: (await files.write(path, content, options)).bytesWritten }),
    readLines: (path, range, options = {}) => files.readLines(path, { startLine: range.start, endLine: range.end, maxLines: range.maxLines }, options),
    readChars: (path, range, options = {}) => files.readChars(path, range, options),
    readAnchored: (path, options = {}) => files.readAnchored(path, {}, options),
    edit: async (path, oldText, newText, options = {}) => {
      await files.edit(path, oldText, newText, options);
    },
    editLines: async (path, edits, options = {}) => {
      await files.editLines(path, edits, options);
    },
    list: async (path, options) => {
      const { entries, truncated } = await files.list(path, { recursive: options.recursive, limit: options.limit, signal: options.signal });
      return { entries: entries.map(({ path: entry, type }) => ({ path: entry, type })), truncated };
    },
    glob: (path, pattern, options = {}) => files.glob(path, pattern, options),
    delete: async (path, options = {}) => {
      await files.delete(path, options);
    },
    // Seed 001 (like Python's shutil) replaces an existing destination and creates its parent folders.
    move: async (source, destination, options = {}) => {
      await ensureParent(files, destination, options.signal);
      await files.move(source, destination, { ...options, overwrite: true });
    },
    copy: async (source, destination, options = {}) => {
      await ensureParent(files, destination, options.signal);
      await files.copy(source, destination, { ...options, overwrite: true });
    },
  };
  return {
    files: toolFiles,
    commands: {
      run: (cmd, options = {}) => commands.run(cmd, options),
    },
  };
}

async function ensureParent(files: Files, path: string, signal: AbortSignal | undefined): Promise<void> {
  const parent = posix.dirname(path);
  if (parent !== '.' && parent !== '/') await files.mkdir(parent, { parents: true, signal });
}
