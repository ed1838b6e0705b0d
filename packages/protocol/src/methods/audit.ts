import { z } from 'zod';
import type { MethodSpec } from '../method-spec.js';

/** How many calls the agent's audit ring keeps; older entries are dropped first. */
export const AUDIT_RING_SIZE = 10_000;

/** The most characters of a command line the daemon's in-memory ring keeps. */
export const AUDIT_RING_COMMAND_CHARS = 200;
/** The most characters of a command line the controller's durable trail keeps (docs/security.md#audit-trail). */
export const AUDIT_TRAIL_COMMAND_CHARS = 8192;
/** The most characters of one path an audit entry keeps. */
export const AUDIT_PATH_CHARS = 512;

/** Who made a call, as the controller's durable trail records it: the kind of credential it came with. */
export const AuditCallerKind = z.enum(['operator', 'sandbox', 'derived']);
export type AuditCallerKind = z.infer<typeof AuditCallerKind>;

/**
 * One call on a sandbox (seed 002: every operation is logged). The daemon's ring
 * (`audit.list`) fills the call's own fields; the controller's durable trail
 * (`GET /v1/sandboxes/:id/audit`) adds who made it.
 */
export const AuditEntry = z.strictObject({
  /**
   * Increases by one per call: since the agent started in the daemon's ring, over the sandbox's
   * whole life in the controller's trail. Pass the last one seen as `since`.
   */
  seq: z.number().int().nonnegative(),
  /** When the call arrived, ISO 8601. */
  time: z.string(),
  method: z.string(),
  /** The paths the call named (`path`, `from`, `to`, `cwd`), as the caller wrote them. */
  paths: z.array(z.string()),
  /** The command of an exec call, cut to 200 characters in the daemon's ring, to 8 KiB in the controller's trail. */
  command: z.string().optional(),
  /** `ok`, or the error code the call failed with. */
  outcome: z.string(),
  /** Payload bytes received and sent. */
  bytesIn: z.number().int().nonnegative(),
  bytesOut: z.number().int().nonnegative(),
  durationMs: z.number().nonnegative(),
  /** The kind of credential the call came with (the controller's trail only). */
  callerKind: AuditCallerKind.optional(),
  /** The API key that made the call, or that minted the derived token it came with (the controller's trail only; never the secret). */
  keyId: z.string().optional(),
  /** The tenant the sandbox belongs to (the controller's trail only). */
  tenant: z.string().optional(),
  /** The id of the derived token the call came with (the controller's trail only). */
  tokenId: z.string().optional(),
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

/** One line of `GET /v1/audit` (`warren audit export`): a trail entry and the sandbox it was made on. */
export const AuditExportLine = AuditEntry.extend({ sandboxId: z.string() });
export type AuditExportLine = z.infer<typeof AuditExportLine>;

/**
 * The paths a call's params name (`path`, `from`, `to`, `cwd`), each cut to
 * {@link AUDIT_PATH_CHARS}, for its audit entry. Params are read as untrusted: anything that is
 * not a string is left out.
 *
 * @example
 * auditPaths({ from: 'a.txt', to: 'b.txt' }); // ['a.txt', 'b.txt']
 */
export function auditPaths(params: unknown): string[] {
  if (params === null || typeof params !== 'object') return [];
  const out: string[] = [];
  for (const key of ['path', 'from', 'to', 'cwd']) {
    const value = (params as Record<string, unknown>)[key];
    if (typeof value === 'string') out.push(cut(value, AUDIT_PATH_CHARS));
  }
  return out;
}

/**
 * The command line of an exec-like call (`cmd` or `command`, a string or an argument list joined
 * by spaces), cut to `maxChars`; undefined for a call without one.
 *
 * @example
 * auditCommand({ cmd: ['ls', '-la'] }, AUDIT_TRAIL_COMMAND_CHARS); // 'ls -la'
 */
export function auditCommand(params: unknown, maxChars: number): string | undefined {
  if (params === null || typeof params !== 'object') return undefined;
  const cmd = (params as Record<string, unknown>).cmd ?? (params as Record<string, unknown>).command;
  const text = typeof cmd === 'string' ? cmd : Array.isArray(cmd) ? cmd.map(String).join(' ') : undefined;
  return text === undefined ? undefined : cut(text, maxChars);
}

function cut(text: string, maxChars: number): string {
  return text.length > maxChars ? `${text.slice(0, maxChars)}...` : text;
}

export const AUDIT_METHODS = {
  'audit.list': { params: AuditListParams, result: AuditListResult, access: 'audit', idempotent: true },
} as const satisfies Record<string, MethodSpec>;
