import { z } from 'zod';
import { SandboxPath, type MethodSpec } from '../method-spec.js';
import { Command, CommandEnv, Signal } from './process.js';

/** A terminal's size in character cells. */
export const PtyCols = z.number().int().min(1).max(1000);
export const PtyRows = z.number().int().min(1).max(1000);

/** An opaque terminal handle, given by the `started` event of `pty.open`. */
export const PtyHandle = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9_-]+$/, 'a terminal handle has letters, digits, _ and - only');

/**
 * Opens a pseudo-terminal running `cmd` (the image's bash, else /bin/sh, when absent). The call
 * stays open while the program runs: a `started` event ({@link PtyStartedEvent}) comes first,
 * then `output` events whose binary payload is what the program wrote to the terminal, and the
 * final answer is the exit status. Cancelling the call (or closing the connection) hangs up the
 * terminal and kills everything started in it.
 */
export const PtyOpenParams = z.strictObject({
  cols: PtyCols,
  rows: PtyRows,
  cmd: Command.optional(),
  /** Working folder, resolved through the sandbox policy; the sandbox root when absent. */
  cwd: SandboxPath.optional(),
  /** Laid over the clean base environment (with TERM=xterm-256color). */
  env: CommandEnv.optional(),
});
export const PtyStartedEvent = z.strictObject({ handle: PtyHandle, pid: z.number().int() });
export type PtyStartedEvent = z.infer<typeof PtyStartedEvent>;
/** The data of an `output` event; the bytes are the frame's payload, starting at `offset` of everything the terminal printed. */
export const PtyOutputEvent = z.strictObject({ offset: z.number().int().nonnegative() });
export type PtyOutputEvent = z.infer<typeof PtyOutputEvent>;
export const PtyExit = z.strictObject({
  exitCode: z.number().int().nullable(),
  signal: z.string().nullable(),
  durationMs: z.number().nonnegative(),
});
export type PtyExit = z.infer<typeof PtyExit>;

/** Raw input for the terminal: the request frame's binary payload, or `data` text. */
export const PtyWriteParams = z.strictObject({
  handle: PtyHandle,
  data: z
    .string()
    .max(1024 * 1024)
    .optional(),
});
export const PtyWriteResult = z.strictObject({ bytesWritten: z.number().int().nonnegative() });
export const PtyResizeParams = z.strictObject({ handle: PtyHandle, cols: PtyCols, rows: PtyRows });
export const PtyResizeResult = z.strictObject({ cols: PtyCols, rows: PtyRows });
export const PtyKillParams = z.strictObject({
  handle: PtyHandle,
  /** SIGHUP (the default: a hang-up, as when a terminal closes) or any other; SIGKILL ends the whole tree. */
  signal: Signal.optional(),
});
export const PtyKillResult = z.strictObject({ signalled: z.number().int().nonnegative() });

export const PTY_METHODS = {
  'pty.open': { params: PtyOpenParams, result: PtyExit, access: 'exec', idempotent: false, events: { started: PtyStartedEvent, output: PtyOutputEvent } },
  'pty.write': { params: PtyWriteParams, result: PtyWriteResult, access: 'exec', payload: 'request', idempotent: false },
  'pty.resize': { params: PtyResizeParams, result: PtyResizeResult, access: 'exec', idempotent: true },
  'pty.kill': { params: PtyKillParams, result: PtyKillResult, access: 'exec', idempotent: true },
} as const satisfies Record<string, MethodSpec>;
