import { z } from 'zod';
import { SandboxPath, type MethodSpec } from '../method-spec.js';

export const ProcessExecParams = z.strictObject({
  /** A string runs through `/bin/sh -c`; an array is an argv run with no shell. */
  cmd: z.union([z.string().min(1).max(1024 * 1024), z.array(z.string().max(1024 * 1024)).min(1).max(10_000)]),
  cwd: SandboxPath.optional(),
  env: z.record(z.string().min(1).max(4096).regex(/^[^=\0]+$/, 'env names must not contain = or NUL'), z.string().max(1024 * 1024)).optional(),
  /** Text given to the child's stdin; without it the child sees EOF at once. */
  stdin: z.string().max(16 * 1024 * 1024).optional(),
  timeoutMs: z.number().int().positive().max(24 * 60 * 60 * 1000).optional(),
});
export const ProcessExecResult = z.strictObject({
  exitCode: z.number().int().nullable(),
  signal: z.string().nullable(),
  stdout: z.string(),
  stderr: z.string(),
  durationMs: z.number().nonnegative(),
  timedOut: z.boolean(),
  truncated: z.boolean(),
  stdoutBytes: z.number().int().nonnegative(),
  stderrBytes: z.number().int().nonnegative(),
});

export const PROCESS_METHODS = {
  'process.exec': { params: ProcessExecParams, result: ProcessExecResult, access: 'exec', idempotent: false },
} as const satisfies Record<string, MethodSpec>;
