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

/**
 * The most entries one `audit.list` answers. A page also ends before its JSON passes
 * `MAX_PAGE_BYTES`, so it always fits in a frame; `nextCursor` says where the rest starts.
 */
export const AUDIT_PAGE_MAX = AUDIT_RING_SIZE;

export const AuditListParams = z.strictObject({
  /** Only entries with a larger `seq`: the page before's `nextCursor` (or the last `seq` seen). */
  since: z.number().int().nonnegative().optional(),
  limit: z.number().int().positive().max(AUDIT_PAGE_MAX).default(1000),
});
export const AuditListResult = z.strictObject({
  entries: z.array(AuditEntry),
  /** True when entries after `since` were already dropped from the ring. */
  dropped: z.boolean(),
  /** The newest `seq` so far (-1 when nothing was served). */
  lastSeq: z.number().int(),
  /**
   * Present when entries after this page exist (the page ended at `limit` or at the page size):
   * pass it as `since` to read on. Absent on the last page.
   */
  nextCursor: z.number().int().nonnegative().optional(),
});

export const AUDIT_METHODS = {
  'audit.list': { params: AuditListParams, result: AuditListResult, access: 'audit', idempotent: true },
} as const satisfies Record<string, MethodSpec>;
