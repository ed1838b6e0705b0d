import {
  CodedError,
  GRANT_HEADER,
  METHODS,
  WireClient,
  encodeGrant,
  type ConnectionGrant,
  type MethodName,
  type ParamsIn,
  type Result,
} from '@warren/protocol';
import { wsSocket } from '@warren/protocol/node';
import type { WebSocket } from 'ws';
import { openAgentSocket } from './agent-link.js';
import type { CallAudit } from './audit/call-audit.js';
import { refusalFor, type Caller } from './grants.js';
import type { Metrics } from './metrics.js';
import type { DaemonEndpoint } from './provider.js';

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

/**
 * What opening a daemon connection for a caller needs of the sandbox service (`SandboxService`
 * has it all): written out here so the daemon's connections sit below the service that uses them.
 */
export interface DaemonDoor {
  /** Starts a hibernated sandbox again and thaws one frozen for being idle; resolves once its daemon can answer. */
  wake(id: string): Promise<void>;
  /** Notes a use of the sandbox (its idle time starts again). */
  touch(id: string): void;
  /** How to reach the sandbox's daemon. */
  daemonEndpoint(id: string): DaemonEndpoint;
  /** The secret the daemon checks. */
  agentSecret(id: string): string;
  /** The idle freezer: a hold keeps the sandbox awake (and thaws it) until released. */
  freezer: { hold(id: string): () => void };
  /** The durable audit trail's recorder of `caller`'s calls on sandbox `id`; absent or undefined, calls are not recorded. */
  auditFor?(id: string, caller: Caller): CallAudit | undefined;
}

/**
 * Opens a WebSocket to sandbox `id`'s daemon carrying `grant`, which the daemon then enforces:
 * a hibernated sandbox starts again and one frozen for being idle thaws first (a paused
 * container takes no new exec bridge), so the caller waits rather than fails. The one way the
 * controller connects to a daemon on a caller's behalf: the relay's upgrade passes the socket's
 * frames on as they are, a {@link DaemonSession} speaks on it.
 *
 * @example
 * const agent = await openDaemonSocket(sandboxes, id, grantFor(record, caller));
 */
export async function openDaemonSocket(door: DaemonDoor, id: string, grant: ConnectionGrant): Promise<WebSocket> {
  await door.wake(id);
  return openAgentSocket(door.daemonEndpoint(id), door.agentSecret(id), 5000, { [GRANT_HEADER]: encodeGrant(grant) });
}

/**
 * A connection to one sandbox's daemon for the controller's own doors (the E2B gateway, port
 * tunnels), opened exactly as the relay opens one for Warren's own clients
 * ({@link openDaemonSocket}: the caller's grant in the same header), spoken by the protocol's
 * {@link WireClient}, and with every call checked against the same rule table (`refusalFor`)
 * before it is sent. The daemon then applies the file policy, limits and audit log as it does for
 * any other client, so these doors reach nothing Warren's own API would not; and each call goes to
 * the controller's durable audit trail as the relay's do.
 *
 * @example
 * await using session = await DaemonSession.open(sandboxes, id, caller, grant);
 * const { result } = await session.call('fs.stat', { path: '/workspace/a.txt' });
 */
export class DaemonSession implements AsyncDisposable {
  private constructor(
    private readonly client: WireClient,
    private readonly caller: Caller,
    private readonly grant: ConnectionGrant,
    private readonly metrics: Metrics | undefined,
    /** Holds the sandbox awake while a call is in flight (the idle freezer); a hold on a frozen sandbox thaws it. */
    private readonly awake: () => () => void,
    private readonly audit: CallAudit | undefined,
  ) {}

  /**
   * Opens a session to sandbox `id` for `caller`, whose grant the daemon will enforce. Resolves
   * after the handshake. Calls are counted in `metrics` as the relay counts them.
   */
  static async open(sandboxes: DaemonDoor, id: string, caller: Caller, grant: ConnectionGrant, metrics?: Metrics): Promise<DaemonSession> {
    // Each call holds the sandbox awake while in flight; an open session without calls does not.
    await sandboxes.wake(id);
    sandboxes.touch(id);
    const ws = await openDaemonSocket(sandboxes, id, grant);
    // Set by `end`: the calls in flight then fail with why the session was ended.
    let ended: CodedError | undefined;
    const client = await WireClient.connect(wsSocket(ws), {
      client: 'warren-e2b-gateway',
      // The door's callers built the params; results are read tolerantly, events passed on as sent.
      checkParams: false,
      checkEvents: false,
      handshakeClosedError: () => new CodedError('SANDBOX_NOT_READY', 'The sandbox daemon closed the connection during the handshake.'),
      peerClosedError: () => new CodedError('SANDBOX_NOT_READY', 'The sandbox daemon closed the connection.'),
      localClosedError: () => ended ?? new CodedError('CANCELLED', 'The gateway closed its connection to the sandbox daemon.'),
    });
    const session = new DaemonSession(client, caller, grant, metrics, () => sandboxes.freezer.hold(id), sandboxes.auditFor?.(id, caller));
    session.ending = (error) => (ended ??= error);
    return session;
  }

  /**
   * Calls one method of the registry. Refused with FORBIDDEN, before anything is sent, when the
   * caller's grant does not allow the method's kind of access (the relay's per-frame rule).
   */
  async call<M extends MethodName>(method: M, params: ParamsIn<M>, options: CallOptions = {}): Promise<DaemonAnswer<M>> {
    const refusal = refusalFor({ caller: this.caller, grant: () => this.grant }, METHODS[method].access, method);
    if (refusal !== undefined) {
      this.audit?.refused(method, params, options.payload?.length ?? 0, 'FORBIDDEN');
      this.metrics?.calls.inc({ method, outcome: 'refused' });
      this.metrics?.errors.inc({ code: 'FORBIDDEN', source: 'call' });
      throw new CodedError('FORBIDDEN', refusal, { method });
    }
    // Cancelled before it was sent, or on a closed connection: nothing reaches the daemon, nothing is counted.
    if (!this.client.isOpen || options.signal?.aborted) return this.client.call(method, params, { signal: options.signal });
    const started = performance.now();
    // Frames sent to a frozen sandbox wait in its socket; the hold thaws it, so they are read.
    const release = this.awake();
    const audited = this.audit?.begin(method, params, options.payload?.length ?? 0);
    try {
      const answer = await this.client.call(method, params, {
        payload: options.payload,
        signal: options.signal,
        onEvent: (event, payload) => {
          audited?.answered(payload?.length ?? 0);
          options.onEvent?.(event.event, event.data, payload);
        },
      });
      this.count(method, started, 'ok');
      audited?.answered(answer.payload?.length ?? 0);
      audited?.end('ok');
      return answer;
    } catch (err) {
      const code = err instanceof CodedError ? err.code : 'INTERNAL';
      this.count(method, started, 'error', code);
      audited?.end(code);
      throw err;
    } finally {
      release();
    }
  }

  private count(method: MethodName, started: number, outcome: 'ok' | 'error', code?: string): void {
    this.metrics?.calls.inc({ method, outcome });
    this.metrics?.callSeconds.observe({ method }, (performance.now() - started) / 1000);
    if (code !== undefined) this.metrics?.errors.inc({ code, source: 'call' });
  }

  /**
   * Stops reading the daemon's frames until {@link resumeReading}: the daemon's send buffer then
   * fills and a streaming call (a port tunnel) stops producing, so a slow reader costs no memory here.
   */
  pauseReading(): void {
    this.client.pauseReading();
  }

  resumeReading(): void {
    this.client.resumeReading();
  }

  /** Whether calls can still be sent: the connection is open and was not closed. */
  get open(): boolean {
    return this.client.isOpen;
  }

  /** Open, with no call in flight and reading: fit to be handed to the next user (`DaemonSessionPool` keeps such sessions). */
  get idle(): boolean {
    return this.client.idle;
  }

  /** Closes the connection; calls still in flight are cancelled by the daemon (background processes live on). */
  close(): void {
    this.client.close();
  }

  /** Records why the session is about to be closed, for its calls in flight (set by `open`). */
  private ending: (error: CodedError) => void = () => undefined;

  /**
   * Closes the connection because its credential ended (a key revoked or rotated, a token
   * revoked): calls in flight, a port tunnel's or an E2B stream's, fail with UNAUTHORIZED and `reason`.
   */
  end(reason: string): void {
    this.ending(new CodedError('UNAUTHORIZED', reason));
    this.client.close(1008, reason);
  }

  /** Runs `listener` once the connection has closed, for whatever reason. */
  onClose(listener: () => void): void {
    this.client.onClose(() => listener());
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }
}
