import { z } from 'zod';
import { CodedError } from './errors.js';
import { issueText } from './frame.js';

/** A path as a caller names it; the agent resolves it through the sandbox's policy. */
export const SandboxPath = z
  .string()
  .min(1)
  .max(4096)
  .refine((p) => !p.includes('\0'), 'path must not contain a NUL byte');

// ---- system -------------------------------------------------------------------------------

export const SystemInfoParams = z.strictObject({});
export const SystemInfoResult = z.strictObject({
  agentVersion: z.string(),
  protocolVersion: z.number().int(),
  pid: z.number().int(),
  uid: z.number().int(),
  rssBytes: z.number().int().nonnegative(),
  uptimeMs: z.number().nonnegative(),
});

// ---- files --------------------------------------------------------------------------------

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

// ---- processes ----------------------------------------------------------------------------

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

// ---- the registry -------------------------------------------------------------------------

/**
 * What a method needs from its caller's credential: `read` and `write` are governed by the file
 * policy too; `exec` is not (a shell is not bound by the file policy), so a derived handle gets
 * it only when asked for.
 */
export type MethodAccess = 'read' | 'write' | 'exec' | 'info';

/** One method's contract; both ends import the same entry. */
export interface MethodSpec {
  params: z.ZodType;
  result: z.ZodType;
  access: MethodAccess;
  /** Which frame carries binary bytes: the request (uploads) or the response (downloads). */
  payload?: 'request' | 'response';
  /** Safe to send again after a dropped connection. */
  idempotent: boolean;
}

/**
 * The method registry: the one place a method exists. The agent dispatches on it, the controller
 * checks access with it, the SDK types its calls from it.
 */
export const METHODS = {
  'system.info': { params: SystemInfoParams, result: SystemInfoResult, access: 'info', idempotent: true },
  'fs.read': { params: FsReadParams, result: FsReadResult, access: 'read', payload: 'response', idempotent: true },
  'fs.write': { params: FsWriteParams, result: FsWriteResult, access: 'write', payload: 'request', idempotent: true },
  'process.exec': { params: ProcessExecParams, result: ProcessExecResult, access: 'exec', idempotent: false },
} as const satisfies Record<string, MethodSpec>;

export type MethodName = keyof typeof METHODS;
/** What a caller passes (defaults not yet applied). */
export type ParamsIn<M extends MethodName> = z.input<(typeof METHODS)[M]['params']>;
/** What a handler receives (defaults applied). */
export type Params<M extends MethodName> = z.output<(typeof METHODS)[M]['params']>;
export type Result<M extends MethodName> = z.output<(typeof METHODS)[M]['result']>;

export function isMethodName(name: string): name is MethodName {
  return Object.hasOwn(METHODS, name);
}

/** Checks a request's params; throws `INVALID_PARAMS` naming each bad field. */
export function parseParams<M extends MethodName>(method: M, params: unknown): Params<M> {
  const parsed = METHODS[method].params.safeParse(params ?? {});
  if (!parsed.success) {
    throw new CodedError('INVALID_PARAMS', `Invalid params for ${method}: ${parsed.error.issues.map(issueText).join('; ')}`, {
      method,
      issues: parsed.error.issues.map((i) => ({ path: i.path.map(String), message: i.message })),
    });
  }
  return parsed.data as Params<M>;
}

/** Checks a result on the receiving side; a peer that answers off-contract is an internal error. */
export function parseResult<M extends MethodName>(method: M, result: unknown): Result<M> {
  const parsed = METHODS[method].result.safeParse(result);
  if (!parsed.success) {
    throw new CodedError('INTERNAL', `The server answered ${method} off-contract: ${parsed.error.issues.map(issueText).join('; ')}`);
  }
  return parsed.data as Result<M>;
}
