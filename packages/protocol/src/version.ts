/**
 * The wire protocol's major version. Both ends send it in the handshake (`hello`, `welcome`); a
 * different major is refused with `PROTOCOL_VERSION_MISMATCH` naming both versions. Within a
 * major, either end may add methods, optional params, result and event fields, and events:
 * answers, events and the handshake are read tolerantly (unknown fields dropped, unknown events
 * ignored, see `tolerant` and `parseEvent`), so a client of 1.x talks to a server of 1.y.
 */
export const PROTOCOL_VERSION = 1;
/**
 * What this build adds within the major. Both ends send theirs in the handshake and speak the
 * lower one: a feature of minor N is used only when both ends are at N or later.
 * 2: line ranges are `startLine`/`endLine` everywhere and anchored lines are `fs.readAnchored`.
 * 3: streamed transfers of any size (`fs.uploadOpen` / `fs.uploadChunk` / `fs.uploadCommit` /
 *    `fs.uploadAbort`, `fs.downloadStream`), file watching (`fs.watch`), port tunnels
 *    (`port.open`, `port.write`), the controller's egress relay (`egress.serve`, `egress.send`)
 *    and the code interpreter (`code.*`, `KERNEL_DIED`); an older daemon answers them `UNKNOWN_METHOD`.
 * 4: the sandbox's own usage read from its cgroup (`system.usage`), which the controller asks for
 *    where the engine gives it no stats (Kubernetes); an older daemon answers it `UNKNOWN_METHOD`.
 */
export const PROTOCOL_MINOR = 4;

/**
 * The minor both ends of a connection speak: the lower of the two (a peer that sent none is at 0).
 *
 * @example
 * negotiatedMinor(undefined); // 0: a client from before minors were sent
 */
export function negotiatedMinor(peerMinor: number | undefined): number {
  return Math.min(PROTOCOL_MINOR, peerMinor ?? 0);
}

/** The largest frame (header + payload) a peer accepts and answers; bigger ones get `FRAME_TOO_LARGE`. */
export const MAX_FRAME_BYTES = 32 * 1024 * 1024;

/**
 * The WebSocket message cap. Frames between {@link MAX_FRAME_BYTES} and this still get a typed
 * error and the connection lives on; past it the socket closes with 1009, because buffering an
 * unbounded message is how a hostile client takes the process's memory.
 */
export const WS_MAX_PAYLOAD_BYTES = 64 * 1024 * 1024;

/**
 * The largest JSON header a frame may carry. A header over it is refused with `FRAME_TOO_LARGE`
 * carrying the request's id (read from the header's start), by the sender for an answer and by
 * the receiver for a request.
 */
export const MAX_HEADER_BYTES = 16 * 1024 * 1024;

/**
 * How much JSON one page of a paged answer (`fs.list`, `audit.list`) holds at most before it
 * stops and hands back a cursor for the rest: below {@link MAX_HEADER_BYTES}, so a page always
 * fits in a frame whatever its entries are.
 */
export const MAX_PAGE_BYTES = 12 * 1024 * 1024;
