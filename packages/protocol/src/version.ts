/**
 * The wire protocol's major version. Both ends send it in the handshake; a different major is
 * refused with `PROTOCOL_VERSION_MISMATCH` naming both. Within a major, either end may add
 * methods, optional params and result or event fields: answers are read tolerantly (unknown fields
 * dropped, see `tolerant`), so a client of 1.x talks to a server of 1.y.
 */
export const PROTOCOL_VERSION = 1;
/** What this build adds within the major; sent alongside it, informational. */
export const PROTOCOL_MINOR = 1;

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
