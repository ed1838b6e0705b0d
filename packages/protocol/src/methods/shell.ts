import { z } from 'zod';
import { SandboxPath, type MethodSpec } from '../method-spec.js';
import { CommandEnv, OutputCapBytes, ProcessExecResult } from './process.js';

/** A shell session's name, chosen by the caller. */
export const ShellSessionName = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9_.-]+$/, 'a session name has letters, digits, _ . and - only');

export const ShellOpenParams = z.strictObject({
  session: ShellSessionName,
  /** The folder the session starts in (resolved through the sandbox policy). */
  cwd: SandboxPath.optional(),
  env: CommandEnv.optional(),
});
export const ShellSessionInfo = z.strictObject({
  session: ShellSessionName,
  pid: z.number().int(),
  /** False when a session of that name was already open and is returned as it is. */
  created: z.boolean(),
  busy: z.boolean(),
});

export const ShellRunParams = z.strictObject({
  session: ShellSessionName,
  /** Bash source, run in the session's shell: `cd`, `export`, functions and aliases carry over. */
  cmd: z
    .string()
    .min(1)
    .max(1024 * 1024),
  /** On expiry the command is interrupted (SIGINT, then SIGKILL); the session stays usable. */
  timeoutMs: z
    .number()
    .int()
    .positive()
    .max(24 * 60 * 60 * 1000)
    .optional(),
  outputCapBytes: OutputCapBytes.optional(),
});
export const ShellRunResult = z.strictObject({
  ...ProcessExecResult.shape,
  /** True when the command could not be interrupted and the session was started afresh (its state is lost). */
  sessionRestarted: z.boolean(),
});

export const ShellCloseParams = z.strictObject({ session: ShellSessionName });
export const ShellCloseResult = z.strictObject({ closed: z.boolean() });
export const ShellListResult = z.strictObject({ sessions: z.array(ShellSessionInfo.omit({ created: true })) });

export const SHELL_METHODS = {
  'shell.open': { params: ShellOpenParams, result: ShellSessionInfo, access: 'exec', idempotent: true },
  'shell.run': { params: ShellRunParams, result: ShellRunResult, access: 'exec', idempotent: false },
  'shell.close': { params: ShellCloseParams, result: ShellCloseResult, access: 'exec', idempotent: true },
  'shell.list': { params: z.strictObject({}), result: ShellListResult, access: 'exec', idempotent: true },
} as const satisfies Record<string, MethodSpec>;
