import type { LineEdit } from '@warren/protocol';
import type { FileOperations } from '../files.js';
import { toolError, type ToolError } from './tool.js';

/** One hash-anchored edit (seed 004), anchors as `LINE#ID`: the protocol's `LineEdit`. */
export type AnchoredEdit = LineEdit;

/**
 * The file operations a tool set runs on: {@link FileOperations}, of which `readText` and `write`
 * are required. A tool whose operation the target lacks answers with a `NOT_AVAILABLE` error result
 * rather than emulating it. A `Sandbox`'s `files` has them all; unit tests pass in-memory ones.
 */
export type ToolFiles = Pick<FileOperations, 'readText' | 'write'> & Partial<Omit<FileOperations, 'readText' | 'write'>>;

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
