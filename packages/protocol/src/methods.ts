import { CodedError } from './errors.js';
import { issueText } from './frame.js';
import type { z } from 'zod';
import { AUDIT_METHODS } from './methods/audit.js';
import { FS_METHODS } from './methods/fs.js';
import { PROCESS_METHODS } from './methods/process.js';
import { PTY_METHODS } from './methods/pty.js';
import { SHELL_METHODS } from './methods/shell.js';
import { SYSTEM_METHODS } from './methods/system.js';

export * from './method-spec.js';
export * from './methods/system.js';
export * from './methods/fs.js';
export * from './methods/audit.js';
export * from './methods/process.js';
export * from './methods/pty.js';
export * from './methods/shell.js';

/**
 * The method registry: the one place a method exists. Each domain keeps its schemas in its own
 * module under `methods/`; the agent dispatches on this table, the controller checks access with
 * it, the SDK types its calls from it.
 */
export const METHODS = { ...SYSTEM_METHODS, ...FS_METHODS, ...PROCESS_METHODS, ...SHELL_METHODS, ...AUDIT_METHODS, ...PTY_METHODS } as const;

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
