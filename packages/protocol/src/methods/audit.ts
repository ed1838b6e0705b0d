import { z } from 'zod';
import type { MethodSpec } from '../method-spec.js';

/** How many calls the agent's audit ring keeps; older entries are dropped first. */
export const AUDIT_RING_SIZE = 10_000;

/** One call the agent served (seed 002: every operation is logged). */
export const AuditEntry = z.strictObject({
  /** Increases by one per call since the agent started; pass the last one seen as `since`. */
  seq: z.number().int().nonnegative(),
  /** When the call arrived, ISO 8601. */
  time: z.string(),
  method: z.string(),
  /** The paths the call named (`path`, `from`, `to`, `cwd`), as the caller wrote them. */
  paths: z.array(z.string()),
  /** The command of an exec call, cut to 200 characters. */
  command: z.string().optional(),
  /** `ok`, or the error code the call failed with. */
  outcome: z.string(),
  /** Payload bytes received and sent. */
  bytesIn: z.number().int().nonnegative(),
  bytesOut: z.number().int().nonnegative(),
  durationMs: z.number().nonnegative(),
});
export type AuditEntry = z.infer<typeof AuditEntry>;

export const AuditListParams = z.strictObject({
  /** Only entries with a larger `seq`. */
  since: z.number().int().nonnegative().optional(),
  limit: z.number().int().positive().max(AUDIT_RING_SIZE).default(1000),
});
export const AuditListResult = z.strictObject({
  entries: z.array(AuditEntry),
  /** True when entries after `since` were already dropped from the ring. */
  dropped: z.boolean(),
  /** The newest `seq` so far (-1 when nothing was served). */
  lastSeq: z.number().int(),
});

export const AUDIT_METHODS = {
  'audit.list': { params: AuditListParams, result: AuditListResult, access: 'info', idempotent: true },
} as const satisfies Record<string, MethodSpec>;
