import type { WireSocket, WireSocketHandlers } from './wire-client.js';

/** The part of a WHATWG `WebSocket` (browsers, Deno, Node's global one) that {@link webSocket} uses. */
export interface StandardWebSocket {
  readonly readyState: number;
  binaryType: string;
  send(data: Uint8Array): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: 'message', listener: (event: { data: unknown }) => void): void;
  addEventListener(type: 'close', listener: (event: { code: number; reason: string }) => void): void;
}

/** `WebSocket.OPEN` of the standard. */
const OPEN = 1;

/**
 * A standard `WebSocket` (a browser's), open, as a {@link WireSocket}: messages read as
 * `ArrayBuffer`s, the close with its code and reason. A browser cannot pause a socket's reading,
 * so this one has no `pause`: a slow consumer there holds frames in memory.
 *
 * @example
 * const ws = new WebSocket(url, ['warren.console']);
 * await new Promise((resolve) => ws.addEventListener('open', resolve, { once: true }));
 * const client = await WireClient.connect(webSocket(ws), { client: 'my-page' });
 */
export function webSocket(ws: StandardWebSocket): WireSocket {
  ws.binaryType = 'arraybuffer';
  return {
    send(frame) {
      ws.send(frame);
    },
    close(code, reason) {
      ws.close(code, reason);
    },
    get isOpen() {
      return ws.readyState === OPEN;
    },
    listen(handlers: WireSocketHandlers) {
      ws.addEventListener('message', (event) => handlers.message(event.data as ArrayBuffer | string));
      ws.addEventListener('close', (event) => handlers.close(event.code, event.reason));
    },
  };
}
