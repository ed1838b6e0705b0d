import type { WebSocket } from 'ws';
import {
  AUDIT_RING_COMMAND_CHARS,
  auditCommand,
  auditPaths,
  CodedError,
  decodeFrame,
  encodeFrame,
  isMethodName,
  parseParams,
  PROTOCOL_MINOR,
  PROTOCOL_VERSION,
  toWireError,
  DEFAULT_APPROVAL_TIMEOUT_MS,
  type ApprovalRequest,
  type FrameHeader,
  type RequestId,
  type WireErrorBody,
  WriteBatch,
} from '@warren/protocol';
import type { AuditLog } from './audit.js';
import { dispatch, type Handlers } from './dispatch.js';
import { idleCollector, type IdleCollector } from './idle-gc.js';

export const AGENT_VERSION = '0.1.0';

/** Above this many unsent bytes a streaming producer pauses (backpressure); it resumes below the low mark. */
export const SEND_HIGH_WATER_BYTES = 1024 * 1024;
export const SEND_LOW_WATER_BYTES = 256 * 1024;

/**
 * Who waits for a socket's send buffer to fall below the low-water mark: woken by the completion of
 * any send (the socket took its bytes) or the socket's close, never by polling, so a stream resumes
 * as soon as there is room (a timer's tick per wait would cap a download at a few pieces per tick).
 */
class DrainWaiters {
  private waiters: (() => void)[] = [];

  constructor(private readonly ws: WebSocket) {
    ws.once('close', () => this.wake(true));
  }

  /** Resolves once the send buffer is below the low-water mark, or the socket is no longer open. */
  wait(): Promise<void> {
    if (this.ready()) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** A send completed (or the socket closed): wakes the waiters once there is room. */
  wake(force = false): void {
    if (this.waiters.length === 0 || (!force && !this.ready())) return;
    const waiters = this.waiters;
    this.waiters = [];
    for (const resolve of waiters) resolve();
  }

  private ready(): boolean {
    return this.ws.readyState !== this.ws.OPEN || this.ws.bufferedAmount < SEND_LOW_WATER_BYTES;
  }
}

/**
 * Serves one authenticated WebSocket: the hello handshake, then requests and cancels. A bad frame
 * gets a typed error frame and the connection lives on; closing the connection cancels every call
 * still running on it.
 */
/** How long a peer that has pinged may stay silent (no ping) before its connection is closed. */
const PEER_SILENCE_MS = 30_000;

/** Per-connection options of {@link serveConnection}. */
export interface ServeOptions {
  /** Where each served call is recorded (the agent's one audit ring). */
  audit?: AuditLog | undefined;
  /** How long an approval request waits for the client's answer before it counts as a deny. */
  approvalTimeoutMs?: number | undefined;
  /** How long a peer that has pinged may go without a ping before the connection is closed (default 30 s). */
  peerSilenceMs?: number | undefined;
  /** Told of each client frame, to collect garbage once the daemon is quiet (the daemon's own by default). */
  idle?: IdleCollector | undefined;
}

export function serveConnection(ws: WebSocket, handlers: Handlers, options: ServeOptions = {}): void {
  const approvals = new Map<RequestId, (allow: boolean) => void>();
  const collector = options.idle ?? idleCollector;
  let greeted = false;
  const inflight = new Map<RequestId, AbortController>();
  const connection = new AbortController();
  const drain = new DrainWaiters(ws);
  const sent = () => drain.wake();
  // Answers finished in one turn of the event loop (a burst of calls) leave together after the first.
  const batch = new WriteBatch(ws);
  const send = (header: FrameHeader, payload?: Uint8Array) => {
    if (ws.readyState !== ws.OPEN) return;
    let frame: Buffer;
    try {
      frame = encodeFrame(header, payload);
    } catch (err) {
      // An answer too large for one frame: the caller hears so, with its id, instead of nothing.
      // An error too large (one that names back a huge request) is cut: sending must never throw.
      const id = 'id' in header ? header.id : null;
      frame = encodeFrame({ type: 'err', id, error: header.type === 'err' ? cutError(header.error) : toWireError(err) });
    }
    batch.add(frame.length);
    ws.send(frame, sent);
  };
  const sendError = (id: RequestId | null, err: unknown) => send({ type: 'err', id, error: toWireError(err) });

  ws.on('message', (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => {
    collector.activity();
    let frame;
    try {
      frame = decodeFrame(isBinary ? data : Buffer.isBuffer(data) ? data.toString() : '');
    } catch (err) {
      const id = err instanceof CodedError ? (err.details?.id as RequestId | undefined) : undefined;
      sendError(id ?? null, err);
      return;
    }
    const { header, payload } = frame;
    if (!greeted) {
      if (header.type !== 'hello') return sendError(null, new CodedError('HANDSHAKE_REQUIRED', 'The first frame on a connection must be a hello.'));
      if (header.protocolVersion !== PROTOCOL_VERSION) {
        const client = `${header.protocolVersion}.${header.protocolMinor ?? 0}`;
        sendError(
          null,
          new CodedError(
            'PROTOCOL_VERSION_MISMATCH',
            `This sandbox's daemon speaks protocol ${PROTOCOL_VERSION}.${PROTOCOL_MINOR} (any client of major ${PROTOCOL_VERSION} works); the client speaks ${client}. Use an SDK of major version ${PROTOCOL_VERSION}.`,
            {
              server: `${PROTOCOL_VERSION}.${PROTOCOL_MINOR}`,
              client,
            },
          ),
        );
        ws.close(1002, 'protocol version mismatch');
        return;
      }
      greeted = true;
      return send({ type: 'welcome', protocolVersion: PROTOCOL_VERSION, protocolMinor: PROTOCOL_MINOR, server: 'warren-agent', serverVersion: AGENT_VERSION });
    }
    switch (header.type) {
      case 'req':
        return void handleRequest(header.id, header.method, header.params, payload);
      case 'approval':
        approvals.get(header.id)?.(header.allow);
        return;
      case 'cancel':
        inflight.get(header.id)?.abort();
        return;
      default:
        return sendError(null, new CodedError('INVALID_FRAME', `A client may send hello, req, cancel and approval frames, not '${header.type}'.`));
    }
  });

  // A peer that pings (the controller's egress tunnel does) and then falls silent is gone without
  // a word (its host went away): the connection is closed, so its calls end (the egress relay is
  // freed for a controller replica that is alive). Peers that never ping are not timed.
  let pinged = 0;
  const silenceMs = options.peerSilenceMs ?? PEER_SILENCE_MS;
  const silence = setInterval(() => {
    if (pinged > 0 && Date.now() - pinged > silenceMs) ws.terminate();
  }, silenceMs / 3);
  silence.unref();
  ws.on('ping', () => (pinged = Date.now()));

  ws.on('close', () => {
    clearInterval(silence);
    connection.abort();
    for (const controller of inflight.values()) controller.abort();
    inflight.clear();
  });

  // Seed 001's approval: ask the client with an event on the request, wait for its answer frame.
  function requestApproval(id: RequestId, signal: AbortSignal, request: ApprovalRequest): Promise<boolean> {
    return new Promise((resolve) => {
      const finish = (allow: boolean) => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        approvals.delete(id);
        resolve(allow);
      };
      const onAbort = () => finish(false);
      const timer = setTimeout(() => finish(false), options.approvalTimeoutMs ?? DEFAULT_APPROVAL_TIMEOUT_MS);
      signal.addEventListener('abort', onAbort, { once: true });
      approvals.get(id)?.(false);
      approvals.set(id, finish);
      send({ type: 'evt', id, event: 'approval', data: request });
    });
  }

  async function handleRequest(id: RequestId, method: string, rawParams: unknown, payload: Buffer | undefined): Promise<void> {
    const started = performance.now();
    const time = new Date().toISOString();
    let outcome = 'ok';
    let bytesOut = 0;
    if (inflight.has(id)) return sendError(id, new CodedError('DUPLICATE_REQUEST_ID', `Request id ${JSON.stringify(id)} is already in flight.`, { id }));
    const controller = new AbortController();
    inflight.set(id, controller);
    try {
      if (!isMethodName(method)) throw new CodedError('UNKNOWN_METHOD', `Unknown method '${method}'.`, { method });
      const params = parseParams(method, rawParams);
      const { result, payload: out } = await dispatch(handlers, method, params, {
        requestApproval: (request) => requestApproval(id, controller.signal, request),
        signal: controller.signal,
        connection: connection.signal,
        payload,
        emit: (event, data, eventPayload) => send({ type: 'evt', id, event, data }, eventPayload),
        congested: () => ws.bufferedAmount > SEND_HIGH_WATER_BYTES,
        drained: () => drain.wait(),
      });
      bytesOut = out?.length ?? 0;
      send({ type: 'res', id, result }, out);
    } catch (err) {
      outcome = err instanceof CodedError ? err.code : 'INTERNAL';
      sendError(id, err);
    } finally {
      inflight.delete(id);
      // The one place every served call is recorded (the audit log of seed 002); the relay's
      // per-chunk egress.send is not a call of the sandbox's (its connections are the gateway's events).
      if (options.audit && method !== 'audit.list' && method !== 'egress.send') {
        const command = auditCommand(rawParams, AUDIT_RING_COMMAND_CHARS);
        options.audit.add({
          time,
          method: method.slice(0, 100),
          paths: auditPaths(rawParams),
          ...(command === undefined ? {} : { command }),
          outcome,
          bytesIn: payload?.length ?? 0,
          bytesOut,
          durationMs: performance.now() - started,
        });
      }
    }
  }
}

/** The most of an error message a frame carries; the rest is cut (it names back what the caller sent). */
const MAX_ERROR_MESSAGE_CHARS = 4096;

function cutError(error: WireErrorBody): WireErrorBody {
  return {
    code: error.code,
    message: `${error.message.slice(0, MAX_ERROR_MESSAGE_CHARS)}... (cut: the whole message and its details were too large for a frame)`,
  };
}
