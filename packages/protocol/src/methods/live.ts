import { z } from 'zod';
import { SandboxPath, type MethodSpec } from '../method-spec.js';

/**
 * The live methods: watching folders for changes (`fs.watch`) and reaching a server that listens
 * on a port inside the sandbox (`port.open`, `port.write`). Both are long calls whose events carry
 * what happens; cancelling the call (or closing the connection) ends them.
 */

/**
 * The most folders one recursive watch follows; past it (or past the sandbox's share of the host's
 * inotify watches, 8,192 folders across all its watches by default, half of them for derived
 * handles together) the watch reports an `overflow` with reason `watch-limit`.
 */
export const MAX_WATCHED_FOLDERS = 8192;
/** The most changes one watch holds between two `changes` events; past it the rest is dropped and an `overflow` says so. */
export const MAX_PENDING_WATCH_EVENTS = 4096;
/**
 * The most watches one daemon serves at once, across every connection; derived handles run at most
 * half of them together, so the API key and the sandbox token always have the other half. Past
 * either, `fs.watch` is refused with `RESOURCE_EXHAUSTED`.
 */
export const MAX_WATCHES = 64;

/**
 * Watches a folder (and, with `recursive`, every folder below it that the caller may read) for
 * changes. The call stays open: a `ready` event once the watch is armed, then `changes` events
 * (batches of {@link WatchChange}, writes to one file coalesced within `coalesceMs`), and an
 * `overflow` event whenever changes were dropped, after which a client should rescan. Symbolic
 * links are reported, never followed, so nothing outside the watched tree is seen. The answer
 * comes when the watched folder itself is removed; cancelling the call ends the watch.
 */
export const FsWatchParams = z.strictObject({
  path: SandboxPath,
  /** Watch every folder below too (default true), up to {@link MAX_WATCHED_FOLDERS}. */
  recursive: z.boolean().default(true),
  /** How long changes are gathered before they are sent as one `changes` event (default 50 ms). */
  coalesceMs: z.number().int().min(0).max(5000).default(50),
});
/** What happened to a path: made, written to, removed, or renamed (`rename` carries the old name in `from` when both are known). */
export const WatchChangeType = z.enum(['create', 'write', 'remove', 'rename']);
export type WatchChangeType = z.infer<typeof WatchChangeType>;
export const WatchChange = z.strictObject({
  type: WatchChangeType,
  /** As the caller names paths (the policy's display form). */
  path: z.string(),
  /** The old name of a `rename`, when the kernel gave both in the same batch. */
  from: z.string().optional(),
  /** True when the path is a folder (as it was when the change was seen). */
  directory: z.boolean().optional(),
});
export type WatchChange = z.infer<typeof WatchChange>;
export const WatchReadyEvent = z.strictObject({ path: z.string(), watchedFolders: z.number().int().nonnegative() });
export const WatchChangesEvent = z.strictObject({ changes: z.array(WatchChange) });
/**
 * Changes were lost: `queue` (more than {@link MAX_PENDING_WATCH_EVENTS} between two batches, or
 * the client read too slowly), `watch-limit` (more folders than the watch may follow), or `kernel`
 * (the kernel's own queue overflowed: changes came faster than the daemon reads them). Rescan the
 * folder to catch up; the watch goes on.
 */
export const WatchOverflowEvent = z.strictObject({
  reason: z.enum(['queue', 'watch-limit', 'kernel']),
  dropped: z.number().int().nonnegative(),
});
export const FsWatchResult = z.strictObject({
  /** Why the watch ended on its own: the watched folder was removed or replaced. */
  ended: z.enum(['removed']),
});

/** A TCP port inside the sandbox. */
export const PortNumber = z.number().int().min(1).max(65535);
/** An opaque tunnel handle, given by the `connected` event of `port.open`. */
export const PortHandle = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9_-]+$/, 'a tunnel handle has letters, digits, _ and - only');
/** The most tunnels one daemon holds open at once. */
export const MAX_PORT_TUNNELS = 256;

/**
 * Opens a TCP connection from the daemon to a port on the sandbox's own loopback (`127.0.0.1`
 * or `::1`, never another address: the tunnel reaches only what listens inside the sandbox). A
 * `connected` event gives the handle for `port.write`; `data` events carry what the server sends
 * as their payload, with backpressure (the daemon stops reading the server while the client's
 * connection is congested). The answer comes when the connection closes; cancelling the call
 * closes it.
 */
export const PortOpenParams = z.strictObject({
  port: PortNumber,
  host: z.enum(['127.0.0.1', '::1']).default('127.0.0.1'),
  /** How long connecting may take (default 5 s). */
  connectTimeoutMs: z.number().int().min(100).max(60_000).default(5000),
});
export const PortConnectedEvent = z.strictObject({ handle: PortHandle });
export const PortDataEvent = z.strictObject({});
export const PortOpenResult = z.strictObject({
  /** Bytes written to the server and read from it. */
  bytesIn: z.number().int().nonnegative(),
  bytesOut: z.number().int().nonnegative(),
});
/** Bytes for the server: the request frame's payload. `end` half-closes the connection after them. */
export const PortWriteParams = z.strictObject({ handle: PortHandle, end: z.boolean().default(false) });
export const PortWriteResult = z.strictObject({ bytesWritten: z.number().int().nonnegative() });

export const LIVE_METHODS = {
  'fs.watch': {
    params: FsWatchParams,
    result: FsWatchResult,
    access: 'read',
    // Not repeated after a dropped connection: changes in the gap would be lost without a word.
    idempotent: false,
    events: { ready: WatchReadyEvent, changes: WatchChangesEvent, overflow: WatchOverflowEvent },
  },
  'port.open': {
    params: PortOpenParams,
    result: PortOpenResult,
    access: 'exec',
    idempotent: false,
    events: { connected: PortConnectedEvent, data: PortDataEvent },
  },
  'port.write': { params: PortWriteParams, result: PortWriteResult, access: 'exec', payload: 'request', idempotent: false },
} as const satisfies Record<string, MethodSpec>;
