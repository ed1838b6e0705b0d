/**
 * The console's connection to one sandbox's daemon: the controller's WebSocket relay
 * (`/v1/sandboxes/:id/connect`), authenticated by the session cookie, with the CSRF token offered
 * as a subprotocol (a browser cannot set headers on an upgrade). Frames use the protocol's own
 * codec; one pending map keyed by request id, everything rejected on close.
 */
import { decodeFrame, encodeFrame } from '../../protocol/src/frame.js';
import { PROTOCOL_MINOR, PROTOCOL_VERSION } from '../../protocol/src/version.js';
import { ApiError, csrf } from './api.js';

export interface CallAnswer<R> {
  result: R;
  payload?: Uint8Array | undefined;
}

interface Pending {
  method: string;
  resolve(answer: CallAnswer<unknown>): void;
  reject(err: Error): void;
  onEvent?: ((event: string, data: unknown, payload?: Uint8Array) => void) | undefined;
}

export class Wire {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private closed = false;
  private readonly closeListeners = new Set<(reason: string) => void>();

  private constructor(private readonly ws: WebSocket) {}

  /** Opens the relay to a sandbox and completes the handshake. */
  static open(sandboxId: string): Promise<Wire> {
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    const ws = new WebSocket(`${scheme}://${location.host}/v1/sandboxes/${encodeURIComponent(sandboxId)}/connect`, ['warren.console', `warren-csrf.${csrf()}`]);
    ws.binaryType = 'arraybuffer';
    return new Promise((resolve, reject) => {
      const wire = new Wire(ws);
      let welcomed = false;
      ws.onopen = () => ws.send(encodeFrame({ type: 'hello', protocolVersion: PROTOCOL_VERSION, protocolMinor: PROTOCOL_MINOR, client: 'warren-console' }));
      ws.onmessage = (event) => {
        if (!welcomed) {
          const { header } = decodeFrame(event.data as ArrayBuffer);
          if (header.type === 'welcome') {
            welcomed = true;
            ws.onmessage = (e) => wire.receive(e.data as ArrayBuffer);
            resolve(wire);
          } else reject(new Error(`The sandbox refused the connection: ${JSON.stringify(header).slice(0, 300)}`));
        }
      };
      ws.onerror = () => {
        if (!welcomed) reject(new Error('Could not connect to the sandbox (it may be paused, gone, or the session ended).'));
      };
      ws.onclose = (event) => wire.fail(`connection closed (${event.code}${event.reason ? `: ${event.reason}` : ''})`);
    });
  }

  /** Calls a method; events of the call go to `onEvent`, the final answer resolves. */
  call<R = unknown>(
    method: string,
    params: Record<string, unknown>,
    options: { payload?: Uint8Array; onEvent?: (event: string, data: unknown, payload?: Uint8Array) => void } = {},
  ): Promise<CallAnswer<R>> {
    if (this.closed) return Promise.reject(new Error('The connection to the sandbox is closed.'));
    const id = this.nextId++;
    return new Promise<CallAnswer<R>>((resolve, reject) => {
      this.pending.set(id, { method, resolve: resolve as Pending['resolve'], reject, onEvent: options.onEvent });
      this.ws.send(encodeFrame({ type: 'req', id, method, params } as never, options.payload));
    });
  }

  /** Sends a cancel for a call in flight (a terminal's `pty.open`, an attach). */
  cancel(id: number): void {
    if (!this.closed) this.ws.send(encodeFrame({ type: 'cancel', id } as never));
  }

  get lastId(): number {
    return this.nextId - 1;
  }

  onClose(fn: (reason: string) => void): void {
    this.closeListeners.add(fn);
  }

  close(): void {
    this.ws.close();
    this.fail('closed');
  }

  private receive(data: ArrayBuffer): void {
    let frame;
    try {
      frame = decodeFrame(data);
    } catch {
      return;
    }
    const header = frame.header as { type: string; id?: number; event?: string; data?: unknown; result?: unknown; error?: { code: string; message: string } };
    const pending = typeof header.id === 'number' ? this.pending.get(header.id) : undefined;
    if (!pending) return;
    const payload = frame.payload ? new Uint8Array(frame.payload) : undefined;
    if (header.type === 'evt') pending.onEvent?.(header.event ?? '', header.data, payload);
    else if (header.type === 'res') {
      this.pending.delete(header.id!);
      pending.resolve({ result: header.result, payload });
    } else if (header.type === 'err') {
      this.pending.delete(header.id!);
      pending.reject(new ApiError(0, header.error?.code ?? 'INTERNAL', `${pending.method}: ${header.error?.message ?? 'failed'}`));
    }
  }

  private fail(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    for (const p of this.pending.values()) p.reject(new Error(`${p.method}: ${reason}`));
    this.pending.clear();
    for (const fn of this.closeListeners) fn(reason);
  }
}
