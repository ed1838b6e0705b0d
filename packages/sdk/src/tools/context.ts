import type { CharSlice, LineSlice as FilesLineSlice } from '../files.js';
import { toolError, type ToolError } from './tool.js';

/** Cancellation for one primitive call. */
export interface PrimitiveOptions {
  signal?: AbortSignal | undefined;
}

/**
 * Lines `startLine..endLine` (1-based, inclusive) of a text file, with their terminators, and the
 * file's line count. Asked for as `start`..`end` (clamped: below 1 is 1, past the end is the end)
 * and at most `maxLines` lines.
 */
export type LineSlice = Omit<FilesLineSlice, 'truncated'>;

/** A line range as the line read takes it; absent ends mean the file's first or last line. */
export interface LineRange {
  start?: number | undefined;
  end?: number | undefined;
  maxLines?: number | undefined;
}

/** Characters `offset..offset + charsRead` of a text file (seed 001's `ReadResult`, camel-cased). */
export type { CharSlice };

/** One entry of a folder listing, its path relative to the folder listed. */
export interface ListedEntry {
  path: string;
  type: 'file' | 'directory' | 'symlink' | 'other';
}

/** One hash-anchored edit (seed 004), anchors as `LINE#ID`. */
export interface AnchoredEdit {
  op: 'replace' | 'append' | 'prepend';
  pos: string;
  end?: string | undefined;
  lines: string[];
}

/**
 * The file primitives the tool sets run on. `readText` and `write` are required; a tool whose
 * primitive is absent answers with a `NOT_AVAILABLE` error result rather than emulating it.
 * {@link toolContext} fills this from a `Sandbox`; unit tests pass fakes.
 */
export interface ToolFiles {
  readText(path: string, options?: PrimitiveOptions): Promise<string>;
  write(path: string, content: string, options?: PrimitiveOptions): Promise<{ bytesWritten: number }>;
  readLines?(path: string, range: LineRange, options?: PrimitiveOptions): Promise<LineSlice>;
  readChars?(path: string, range: { offset: number; length: number }, options?: PrimitiveOptions): Promise<CharSlice>;
  /** Replaces `oldText`, which must occur exactly once (`EDIT_NOT_FOUND` / `EDIT_NOT_UNIQUE` otherwise). */
  edit?(path: string, oldText: string, newText: string, options?: PrimitiveOptions): Promise<void>;
  /** Every line with its seed-004 anchor (`LINE#ID`), computed by the same code that checks anchors on edit. */
  readAnchored?(path: string, options?: PrimitiveOptions): Promise<{ lines: { anchor: string; text: string }[]; truncated: boolean; totalLines: number }>;
  /** Applies hash-anchored edits atomically; a stale anchor fails with `STALE_ANCHOR` and changes nothing. */
  editLines?(path: string, edits: AnchoredEdit[], options?: PrimitiveOptions): Promise<void>;
  list?(
    path: string,
    options: { recursive: boolean; limit: number; signal?: AbortSignal | undefined },
  ): Promise<{ entries: ListedEntry[]; truncated: boolean }>;
  /** Files below `path` matching a glob pattern, relative to `path`. */
  glob?(path: string, pattern: string, options?: PrimitiveOptions): Promise<string[]>;
  delete?(path: string, options?: PrimitiveOptions): Promise<void>;
  move?(source: string, destination: string, options?: PrimitiveOptions): Promise<void>;
  copy?(source: string, destination: string, options?: PrimitiveOptions): Promise<void>;
}

/** What a finished command reports to a tool. */
export interface ToolCommandResult {
  exitCode: number | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  truncated: boolean;
}

/** The command primitive the tool sets run on. */
export interface ToolCommands {
  run(
    cmd: string | string[],
    options?: {
      cwd?: string | undefined;
      env?: Record<string, string> | undefined;
      timeoutMs?: number | undefined;
      stdin?: string | undefined;
      signal?: AbortSignal | undefined;
    },
  ): Promise<ToolCommandResult>;
}

/** The primitives a tool set is built on. */
export interface ToolContext {
  files: ToolFiles;
  commands: ToolCommands;
}

/**
 * The error result of a tool whose primitive this sandbox does not offer.
 *
 * @example
 * return notAvailable('glob', 'list_files'); // { isError: true, code: 'NOT_AVAILABLE', ... }
 */
export function notAvailable(operation: string, tool: string): ToolError {
  return toolError(
    'NOT_AVAILABLE',
    `${tool} cannot run: this sandbox does not offer the ${operation} operation yet.`,
    'Use another tool of this set for now (for example read the whole file, or run a command).',
  );
}

/**
 * Returns the primitive, or throws the `NOT_AVAILABLE` error result naming it (caught by the tool's run).
 *
 * @example
 * const glob = need(files.glob?.bind(files), 'glob', 'list_files');
 */
export function need<F>(primitive: F | undefined, operation: string, tool: string): F {
  if (primitive === undefined) throw notAvailable(operation, tool);
  return primitive;
}
