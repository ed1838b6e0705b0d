import type { WireSocket, WireSocketHandlers } from './wire-client.js';
import { WriteBatch } from './write-batch.js';

/** The part of a `ws` WebSocket that {@link wsSocket} uses (the `ws` package's class has it all). */
export interface NodeWebSocket {
  readonly readyState: number;
  readonly OPEN: number;
  readonly isPaused: boolean;
  send(data: Uint8Array): void;
  close(code?: number, reason?: string): void;
  pause(): void;
  resume(): void;
  on(event: 'message', listener: (data: Buffer, isBinary: boolean) => void): unknown;
  on(event: 'close', listener: (code: number, reason: Buffer) => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
}

/** Options of {@link wsSocket}. */
export interface WsSocketOptions {
  /** Gather the small frames of one turn of the event loop into one write ({@link WriteBatch}); default true. */
  batch?: boolean;
}

/**
 * A `ws` WebSocket (Node), open, as a {@link WireSocket}: binary messages as they arrive, a close
 * with its code and reason, socket pausing for backpressure, and the small frames of one turn of
 * the event loop written together. Errors end in the close that follows, which reports them.
 *
 * @example
 * const ws = new WebSocket(url, { perMessageDeflate: false });
 * await once(ws, 'open');
 * const client = await WireClient.connect(wsSocket(ws), { client: 'my-tool' });
 */
export function wsSocket(ws: NodeWebSocket, options: WsSocketOptions = {}): WireSocket {
  const batch = options.batch === false ? undefined : new WriteBatch(ws);
  return {
    send(frame) {
      batch?.add(frame.length);
      ws.send(frame);
    },
    close(code, reason) {
      ws.close(code, reason);
    },
    get isOpen() {
      return ws.readyState === ws.OPEN;
    },
    listen(handlers: WireSocketHandlers) {
      ws.on('message', (data) => handlers.message(data));
      ws.on('close', (code, reason) => handlers.close(code, reason.toString('utf8')));
      ws.on('error', () => undefined);
    },
    pause() {
      ws.pause();
    },
    resume() {
      ws.resume();
    },
  };
}
