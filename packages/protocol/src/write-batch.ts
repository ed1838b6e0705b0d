/** Frames up to this size after the first of a turn wait for the turn's end and go out in one write together; larger ones go at once. */
export const BATCH_FRAME_MAX_BYTES = 16 * 1024;

/** The part of a Node socket (or any writable stream) a {@link WriteBatch} uses. */
interface Corkable {
  cork(): void;
  uncork(): void;
}

/**
 * Gathers the small frames sent on one WebSocket during one turn of the event loop into as few
 * writes as it can without making any frame wait for the next. Each frame sent alone costs a
 * system call and wakes the reader once; a burst of calls (many requests sent at once, their
 * answers, the relay passing both on) then costs two of each per burst instead of one per frame.
 *
 * The first small frame of a turn goes out at once, so a lone call is never delayed. A second one
 * in the same turn shows a burst: the socket under the WebSocket (`ws`'s `_socket`, read at each
 * send because it exists only once the connection is open) is corked, and uncorked by
 * `setImmediate`, right after the turn's I/O callbacks, with every frame of the burst after the
 * first in one write. Frames keep their order.
 *
 * A frame larger than {@link BATCH_FRAME_MAX_BYTES} first lets out what is waiting, then goes as
 * before, so large transfers and their backpressure (`bufferedAmount`) behave as without batching.
 * Where the socket cannot be corked (no `_socket`, or a stream without `cork`), nothing changes.
 *
 * @example
 * const batch = new WriteBatch(ws);
 * const frame = encodeFrame({ type: 'req', id: 1, method: 'fs.stat', params: { path: 'a' } });
 * batch.add(frame.length);
 * ws.send(frame);
 */
export class WriteBatch {
  private corked: Corkable | undefined;
  /** True from a turn's first small frame until that turn's end. */
  private inTurn = false;
  private readonly endTurn = () => {
    this.inTurn = false;
    this.flush();
  };

  constructor(private readonly ws: object) {}

  /** To call right before sending a frame of `bytes` bytes on the WebSocket. */
  add(bytes: number): void {
    if (bytes > BATCH_FRAME_MAX_BYTES) {
      this.flush();
      return;
    }
    if (this.corked) return;
    if (!this.inTurn) {
      // The turn's first frame: sent at once; a second one in this turn starts the batch.
      this.inTurn = true;
      setImmediate(this.endTurn);
      return;
    }
    const socket = (this.ws as { _socket?: Partial<Corkable> | null })._socket;
    if (!socket || typeof socket.cork !== 'function' || typeof socket.uncork !== 'function') return;
    socket.cork();
    this.corked = socket as Corkable;
  }

  /** Lets out the frames waiting, now. */
  flush(): void {
    const socket = this.corked;
    if (!socket) return;
    this.corked = undefined;
    socket.uncork();
  }
}
