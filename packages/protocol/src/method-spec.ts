import { z } from 'zod';

/** A path as a caller names it; the agent resolves it through the sandbox's policy. */
export const SandboxPath = z
  .string()
  .min(1)
  .max(4096)
  .refine((p) => !p.includes('\0'), 'path must not contain a NUL byte');

/**
 * What a method needs from its caller's credential: `read` and `write` are governed by the file
 * policy too; `exec` is not (a shell is not bound by the file policy), so a derived handle gets
 * it only when asked for; `audit` is the sandbox's whole record of calls (every path and command
 * line), so only the API key and the sandbox's own token have it, never a derived handle;
 * `controller` is the controller's own channel to the daemon (the egress relay), which no
 * credential may call through the relay. The
 * controller checks these with one rule table for every door (`RULES` in its `grants.ts`): WebSocket
 * methods and the REST routes that do the same thing.
 */
export type MethodAccess = 'read' | 'write' | 'exec' | 'info' | 'audit' | 'controller';

/** One method's contract; both ends import the same entry. */
export interface MethodSpec {
  params: z.ZodType;
  result: z.ZodType;
  access: MethodAccess;
  /** Which frame carries binary bytes: the request (uploads) or the response (downloads). */
  payload?: 'request' | 'response';
  /** Safe to send again after a dropped connection. */
  idempotent: boolean;
  /**
   * The events a streaming request sends before its answer, each name with its `data` schema
   * (bytes travel as the event frame's payload). Any request may also carry the events in
   * `COMMON_EVENTS`.
   */
  events?: Readonly<Record<string, z.ZodType>>;
}
