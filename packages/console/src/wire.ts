/**
 * The console's connection to one sandbox's daemon: the controller's WebSocket relay
 * (`/v1/sandboxes/:id/connect`), authenticated by the session cookie, with the CSRF token offered
 * as a subprotocol (a browser cannot set headers on an upgrade). The protocol's own
 * {@link WireClient} speaks over it; this module words its failures for the page.
 */
import { webSocket, WireClient, type MethodName, type WireErrors } from '@warren/protocol';
import { ApiError, csrf } from './api.js';

export interface CallAnswer<R> {
  result: R;
  payload?: Uint8Array | undefined;
}

/** Failures as the page shows them: the daemon's code, and the message it sent. */
const CONSOLE_ERRORS: WireErrors = {
  fromWire: (error) => new ApiError(0, error.code, error.message),
  local: (code, message) => new ApiError(0, code, message),
};

export class Wire {
  private closeReason: string | undefined;

  private constructor(private readonly client: WireClient) {
    client.onClose((code, reason) => this.closed(`connection closed (${code}${reason ? `: ${reason}` : ''})`));
  }

  /** Opens the relay to a sandbox and completes the handshake. */
  static async open(sandboxId: string): Promise<Wire> {
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    const ws = new WebSocket(`${scheme}://${location.host}/v1/sandboxes/${encodeURIComponent(sandboxId)}/connect`, ['warren.console', `warren-csrf.${csrf()}`]);
    const unreachable = () => new Error('Could not connect to the sandbox (it may be paused, gone, or the session ended).');
    await new Promise<void>((resolve, reject) => {
      ws.addEventListener('open', () => resolve(), { once: true });
      ws.addEventListener('error', () => reject(unreachable()), { once: true });
    });
    const client = await WireClient.connect(webSocket(ws), {
      client: 'warren-console',
      errors: CONSOLE_ERRORS,
      // The page sends what its own forms built and reads answers as they come: the daemon checks both.
      checkParams: false,
      checkResults: false,
      checkEvents: false,
      handshakeClosedError: unreachable,
    }).catch((err: unknown) => {
      throw err instanceof ApiError && err.code !== 'UNAUTHORIZED' ? new Error(`The sandbox refused the connection: ${err.message.slice(0, 300)}`) : err;
    });
    return new Wire(client);
  }

  /** Calls a method; events of the call go to `onEvent`, the final answer resolves. */
  async call<R = unknown>(
    method: string,
    params: Record<string, unknown>,
    options: { payload?: Uint8Array; onEvent?: (event: string, data: unknown, payload?: Uint8Array) => void; signal?: AbortSignal } = {},
  ): Promise<CallAnswer<R>> {
    if (this.closeReason !== undefined) throw new Error('The connection to the sandbox is closed.');
    try {
      // The client checks nothing on the page's behalf (see open), so any name goes out as written.
      const answer = await this.client.call(method as MethodName, params, {
        payload: options.payload,
        signal: options.signal,
        onEvent: options.onEvent && ((event, payload) => options.onEvent!(event.event, event.data, payload ? new Uint8Array(payload) : undefined)),
      });
      return { result: answer.result as R, payload: answer.payload ? new Uint8Array(answer.payload) : undefined };
    } catch (err) {
      // Read again: the connection may have closed while the call was in flight.
      const closed = this.closeReason as string | undefined;
      if (closed !== undefined) throw new Error(`${method}: ${closed}`, { cause: err });
      throw err instanceof ApiError ? new ApiError(0, err.code, `${method}: ${err.message}`) : err;
    }
  }

  onClose(fn: (reason: string) => void): void {
    this.closeListeners.add(fn);
  }

  close(): void {
    this.closed('closed');
    this.client.close();
  }

  private readonly closeListeners = new Set<(reason: string) => void>();

  private closed(reason: string): void {
    if (this.closeReason !== undefined) return;
    this.closeReason = reason;
    for (const fn of this.closeListeners) fn(reason);
  }
}
