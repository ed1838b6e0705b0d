import type { Commands } from '../commands.js';
import type { Files } from '../files.js';
import type { CharSlice, LineRange, LineSlice, ToolContext, ToolFiles } from './context.js';
import { splitLines } from './text.js';

/** Anything with Warren's `files` and `commands` namespaces: a `Sandbox`, or a test agent. */
export interface SandboxLike {
  files: Files;
  commands: Commands;
}

/**
 * The primitives of a sandbox, as the tool sets use them.
 *
 * @example
 * await using sandbox = await Sandbox.create();
 * const tools = builtinTools(toolContext(sandbox));
 */
export function toolContext(sandbox: SandboxLike): ToolContext {
  const { files, commands } = sandbox;
  const readText = (path: string, options: { signal?: AbortSignal | undefined } = {}) => files.read(path, { signal: options.signal });
  const toolFiles: ToolFiles = {
    readText,
    write: async (path, content, options = {}) => {
      const { bytesWritten } = await files.write(path, content, { signal: options.signal });
      return { bytesWritten };
    },
    readLines: async (path, range, options = {}) => sliceLines(await readText(path, options), range),
    readChars: async (path, range, options = {}) => sliceChars(await readText(path, options), range.offset, range.length),
  };
  return {
    files: toolFiles,
    commands: {
      run: (cmd, options = {}) => commands.run(cmd, options),
    },
  };
}

/** Lines of a text as the line read returns them (same clamping); for sandboxes without the line read. */
export function sliceLines(text: string, range: LineRange): LineSlice {
  const lines = splitLines(text);
  const startLine = Math.max(1, range.start ?? 1);
  let endLine = Math.min(lines.length, range.end === undefined ? lines.length : Math.max(1, range.end));
  if (range.maxLines !== undefined) endLine = Math.min(endLine, startLine + range.maxLines - 1);
  if (endLine < startLine) endLine = startLine - 1;
  return { content: lines.slice(startLine - 1, endLine).join(''), startLine, endLine, totalLines: lines.length };
}

/** `length` characters (Unicode code points, as Python counts them) of a text from `offset`, clamped to its end. */
export function sliceChars(text: string, offset: number, length: number): CharSlice {
  const chars = Array.from(text);
  const picked = chars.slice(offset, offset + length);
  return { content: picked.join(''), offset, charsRead: picked.length, totalChars: chars.length, truncated: offset + picked.length < chars.length };
}
