import {
  CodedError,
  GRANT_HEADER,
  METHODS,
  PROTOCOL_MINOR,
  PROTOCOL_VERSION,
  decodeFrame,
  encodeFrame,
  encodeGrant,
  parseResult,
  type ConnectionGrant,
  type MethodName,
  type ParamsIn,
  type Result,
} from '@warren/protocol';
import type { WebSocket } from 'ws';
import { openAgentSocket } from '../agent-link.js';
import { refusalFor, type Caller } from '../grants.js';
import type { Metrics } from '../metrics.js';
import type { SandboxService } from '../sandboxes.js';

/** One answer of the daemon: the checked result and the frame's binary payload (file bytes, output). */
export interface DaemonAnswer<M extends MethodName> {
  result: Result<M>;
  payload?: Buffer | undefined;
}

/** Options of one {@link DaemonSession.call}. */
export interface CallOptions {
  /** The request frame's binary payload (file content, stdin bytes). */
  payload?: Uint8Array | undefined;
  /** Each `evt` frame of the call: its name, data and payload. */
  onEvent?: ((event: string, data: unknown, payload: Buffer | undefined) => void) | undefined;
  /** Cancels the call (a `cancel` frame); the promise then rejects. */
  signal?: AbortSignal | undefined;
}

interface Pending {
  method: MethodName;
  resolve(answer: DaemonAnswer<MethodName>): void;
  reject(err: Error): void;
  onEvent?: CallOptions['onEvent'];
}

/**
 * A connection to one sandbox's daemon for the E2B gateway, opened exactly as the relay opens one
 * for Warren's own clients: over the sandbox's unix socket with its secret, carrying the caller's
 * grant in the same header, and with every call checked against the same rule table
 * (`refusalFor`) before it is sent. The daemon then applies the file policy, limits and audit log
 * as it does for any other client, so this door reaches nothing Warren's own API would not.
 *
 * @example
 * await using session = await DaemonSession.open(sandboxes, id, caller, grant);
 * const { result } = await session.call('fs.stat', { path: '/workspace/a.txt' });
 */
export class DaemonSession implements AsyncDisposable {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private closedError: Error | undefined;

  private constructor(
    private readonly ws: WebSocket,
    private readonly caller: Caller,
    private readonly grant: ConnectionGrant,
    private readonly metrics: Metrics | undefined,
    /** Holds the sandbox awake while a call is in flight (the idle freezer); a hold on a frozen sandbox thaws it. */
    private readonly awake: () => () => void,
  ) {
    ws.on('message', (data: Buffer) => this.onMessage(data));
    ws.on('error', () => ws.terminate());
    ws.once('close', () => {
      this.closedError ??= new CodedError('SANDBOX_NOT_READY', 'The sandbox daemon closed the connection.');
      for (const call of this.pending.values()) call.reject(this.closedError);
      this.pending.clear();
    });
  }

  /**
   * Opens a session to sandbox `id` for `caller`, whose grant the daemon will enforce. Resolves
   * after the handshake. Calls are counted in `metrics` as the relay counts them.
   */
  static async open(sandboxes: SandboxService, id: string, caller: Caller, grant: ConnectionGrant, metrics?: Metrics): Promise<DaemonSession> {
    // A hibernated sandbox starts again and one frozen for being idle thaws (a paused container
    // takes no new exec bridge); the call waits. Then each call holds it awake while in flight,
    // and an open session without calls does not.
    await sandboxes.wake(id);
    sandboxes.touch(id);
    const ws = await openAgentSocket(sandboxes.daemonEndpoint(id), sandboxes.agentSecret(id), 5000, { [GRANT_HEADER]: encodeGrant(grant) });
    const session = new DaemonSession(ws, caller, grant, metrics, () => sandboxes.freezer.hold(id));
    await session.handshake();
    return session;
  }

  private handshake(): Promise<void> {
    return new Promise((resolve, reject) => {
      const onMessage = (data: Buffer) => {
        this.ws.off('message', onMessage);
        try {
          const { header } = decodeFrame(data);
          if (header.type === 'welcome') resolve();
          else reject(new CodedError('UPSTREAM_UNAVAILABLE', `The sandbox daemon answered the handshake with '${header.type}'.`));
        } catch (err) {
          reject(err instanceof Error ? err : new Error(String(err)));
        }
      };
      this.ws.on('message', onMessage);
      this.ws.once('close', () => reject(new CodedError('SANDBOX_NOT_READY', 'The sandbox daemon closed the connection during the handshake.')));
      this.ws.send(encodeFrame({ type: 'hello', protocolVersion: PROTOCOL_VERSION, protocolMinor: PROTOCOL_MINOR, client: 'warren-e2b-gateway' }));
    });
  }

  /**
   * Calls one method of the registry. Refused with FORBIDDEN, before anything is sent, when the
   * caller's grant does not allow the method's kind of access (the relay's per-frame rule).
   */
  call<M extends MethodName>(method: M, params: ParamsIn<M>, options: CallOptions = {}): Promise<DaemonAnswer<M>> {
    const refusal = refusalFor({ caller: this.caller, grant: () => this.grant }, METHODS[method].access, method);
    if (refusal !== undefined) {
      this.metrics?.calls.inc({ method, outcome: 'refused' });
      this.metrics?.errors.inc({ code: 'FORBIDDEN', source: 'call' });
      return Promise.reject(new CodedError('FORBIDDEN', refusal, { method }));
    }
    if (this.closedError) return Promise.reject(this.closedError);
    const id = this.nextId++;
    const started = performance.now();
    const count = (outcome: 'ok' | 'error', code?: string) => {
      this.metrics?.calls.inc({ method, outcome });
      this.metrics?.callSeconds.observe({ method }, (performance.now() - started) / 1000);
      if (code !== undefined) this.metrics?.errors.inc({ code, source: 'call' });
    };
    return new Promise<DaemonAnswer<M>>((resolve, reject) => {
      // Cancelled before it was sent: nothing to tell the daemon.
      if (options.signal?.aborted) return reject(new CodedError('CANCELLED', `${method} was cancelled.`));
      // Frames sent to a frozen sandbox wait in its socket; the hold thaws it, so they are read.
      const release = this.awake();
      const onAbort = () => {
        if (!this.pending.delete(id)) return;
        release();
        if (this.ws.readyState === this.ws.OPEN) this.ws.send(encodeFrame({ type: 'cancel', id }));
        reject(new CodedError('CANCELLED', `${method} was cancelled.`));
      };
      options.signal?.addEventListener('abort', onAbort, { once: true });
      const done = () => {
        release();
        options.signal?.removeEventListener('abort', onAbort);
      };
      this.pending.set(id, {
        method,
        resolve: (answer) => {
          done();
          count('ok');
          resolve(answer);
        },
        reject: (err) => {
          done();
          count('error', err instanceof CodedError ? err.code : 'INTERNAL');
          reject(err);
        },
        onEvent: options.onEvent,
      });
      this.ws.send(encodeFrame({ type: 'req', id, method, params }, options.payload));
    });
  }

  private onMessage(data: Buffer): void {
    let frame;
    try {
      frame = decodeFrame(data);
    } catch {
      return;
    }
    const { header, payload } = frame;
    if (header.type !== 'res' && header.type !== 'err' && header.type !== 'evt') return;
    if (typeof header.id !== 'number') return;
    const call = this.pending.get(header.id);
    if (!call) return;
    if (header.type === 'evt') return call.onEvent?.(header.event, header.data, payload);
    this.pending.delete(header.id);
    if (header.type === 'err') return call.reject(new CodedError(header.error.code, header.error.message, header.error.details));
    try {
      call.resolve({ result: parseResult(call.method, header.result), payload });
    } catch (err) {
      call.reject(err as Error);
    }
  }

  /**
   * Stops reading the daemon's frames until {@link resumeReading}: the daemon's send buffer then
   * fills and a streaming call (a port tunnel) stops producing, so a slow reader costs no memory here.
   */
  pauseReading(): void {
    this.ws.pause();
  }

  resumeReading(): void {
    this.ws.resume();
  }

  /** Whether calls can still be sent: the connection is open and was not closed. */
  get open(): boolean {
    return this.closedError === undefined && this.ws.readyState === this.ws.OPEN;
  }

  /** Open, with no call in flight and reading: fit to be handed to the next user (ports/tunnel.ts pools such sessions). */
  get idle(): boolean {
    return this.open && this.pending.size === 0 && !this.ws.isPaused;
  }

  /** Closes the connection; calls still in flight are cancelled by the daemon (background processes live on). */
  close(): void {
    this.closedError ??= new CodedError('CANCELLED', 'The gateway closed its connection to the sandbox daemon.');
    // A paused connection would never read the daemon's close frame behind the data it still has.
    if (this.ws.isPaused) this.ws.resume();
    if (this.ws.readyState !== this.ws.CLOSED) this.ws.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }
}
