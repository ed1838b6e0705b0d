import { z } from 'zod';
import { SandboxPath, type MethodSpec } from '../method-spec.js';

export const FsReadParams = z.strictObject({ path: SandboxPath });
/** The file's bytes travel as the response frame's binary payload. */
export const FsReadResult = z.strictObject({
  path: z.string(),
  size: z.number().int().nonnegative(),
  mtimeMs: z.number(),
});

/** The content travels as the request frame's binary payload; none means an empty file. */
export const FsWriteParams = z.strictObject({
  path: SandboxPath,
  /** Permission bits for a new file; an existing file keeps its own. */
  mode: z.number().int().min(0).max(0o7777).optional(),
});
export const FsWriteResult = z.strictObject({
  path: z.string(),
  bytesWritten: z.number().int().nonnegative(),
});

export const FS_METHODS = {
  'fs.read': { params: FsReadParams, result: FsReadResult, access: 'read', payload: 'response', idempotent: true },
  'fs.write': { params: FsWriteParams, result: FsWriteResult, access: 'write', payload: 'request', idempotent: true },
} as const satisfies Record<string, MethodSpec>;
