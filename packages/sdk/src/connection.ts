import {
  CodedError,
  decodeFrame,
  encodeFrame,
  issueText,
  METHODS,
  parseResult,
  PROTOCOL_MINOR,
  PROTOCOL_VERSION,
  WS_MAX_PAYLOAD_BYTES,
  negotiatedMinor,
  parseEvent,
  type ApprovalRequest,
  type WelcomeFrame,
  type ParsedEvent,
  type FrameHeader,
  type MethodName,
  type ParamsIn,
  type Result,
  WriteBatch,
} from '@warren/protocol';
import { WebSocket } from 'ws';
import { errorFromWire, makeError, WarrenError } from './errors.js';

/** Options every call takes. */
export interface CallOptions {
  /** Aborting sends a cancel frame and rejects the call with `CancelledError`. */
  signal?: AbortSignal | undefined;
  /** How long to wait for the final answer before cancelling and rejecting with `RequestTimeoutError`. */
  timeoutMs?: number | undefined;
}

export interface RawCallOptions extends CallOptions {
  payload?: Uint8Array | undefined;
  /** The call's events, checked against the registry; events this SDK does not know are dropped. */
  onEvent?: ((event: ParsedEvent, payload: Buffer | undefined) => void) | undefined;
}

/** A call's answer: the checked result and the response payload, if the method has one. */
export interface CallAnswer<M extends MethodName> {
  result: Result<M>;
  payload?: Buffer | undefined;
}

export const DEFAULT_CALL_TIMEOUT_MS = 60_000;

/** Decides one approval request; see {@link Connection.onApproval}. */
export type ApprovalHandler = (request: ApprovalRequest, method: MethodName) => boolean | Promise<boolean>;

interface Pending {
  method: MethodName;
  resolve: (answer: { result: unknown; payload?: Buffer | undefined }) => void;
  reject: (err: WarrenError) => void;
  onEvent?: RawCallOptions['onEvent'];
}

/**
 * One WebSocket to a sandbox, through the controller: the hello handshake, then calls matched to
 * their answers by id in one pending map. Each call has its own timeout naming its method, and
 * everything still pending is rejected when the connection closes.
 */
export class Connection {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private closedError: WarrenError | undefined;

  /**
   * Answers the sandbox's approval requests (seed 001's `read_approval` / `write_approval`):
   * return true to allow. No handler, a handler that throws, or one that answers anything but
   * true denies, and the call fails with `ApprovalDeniedError`.
   */
  onApproval: ApprovalHandler | undefined;

  private readonly closeListeners = new Set<() => void>();
  /** Frames sent in one turn of the event loop (calls made at once, with `Promise.all`) leave in two writes: the first at once, the rest together. */
  private readonly batch: WriteBatch;

  /**
   * The protocol this connection speaks: the shared major, the minor both ends speak (the lower
   * of the two), and the server's own minor and name from its welcome.
   */
  readonly protocol: { version: number; minor: number; serverMinor: number; server: string; serverVersion: string };

  private constructor(
    private readonly ws: WebSocket,
    welcome: WelcomeFrame,
  ) {
    this.batch = new WriteBatch(ws);
    this.protocol = {
      version: welcome.protocolVersion,
      minor: negotiatedMinor(welcome.protocolMinor),
      serverMinor: welcome.protocolMinor ?? 0,
      server: welcome.server,
      serverVersion: welcome.serverVersion,
    };
    ws.on('message', (data: Buffer) => this.onMessage(data));
    ws.on('close', (code, reason) => {
      this.failAll(makeError('CONNECTION_CLOSED', `The connection to the sandbox closed (${code}${reason.length ? `: ${reason.toString()}` : ''}).`));
      for (const listener of this.closeListeners) listener();
    });
    ws.on('error', () => undefined); // the close that follows reports it
  }

  /** Opens a connection and completes the version handshake. */
  static async open(url: string, token: string, timeoutMs = 10_000, headers: Record<string, string> = {}): Promise<Connection> {
    const ws = new WebSocket(url, {
      headers: { ...headers, authorization: `Bearer ${token}` },
      maxPayload: WS_MAX_PAYLOAD_BYTES,
      perMessageDeflate: false,
      handshakeTimeout: timeoutMs,
      // A zero mask makes ws send a payload as it is, instead of copying it into a masked buffer.
      ...(masksNeeded(url) ? {} : { generateMask: (mask: Buffer) => void mask.fill(0) }),
    });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', (err) => reject(makeError('CONNECTION_CLOSED', `Could not connect to ${url}: ${err.message}`, { cause: err })));
      ws.once('unexpected-response', (_req, res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => reject(restError(res.statusCode ?? 0, Buffer.concat(chunks).toString('utf8'))));
      });
    });
    const welcome = new Promise<WelcomeFrame>((resolve, reject) => {
      const timer = setTimeout(() => reject(makeError('REQUEST_TIMEOUT', `No handshake answer from ${url} within ${timeoutMs} ms.`)), timeoutMs);
      ws.once('message', (data: Buffer) => {
        clearTimeout(timer);
        try {
          const { header } = decodeFrame(data);
          if (header.type === 'welcome' && header.protocolVersion === PROTOCOL_VERSION) resolve(header);
          else if (header.type === 'welcome') {
            reject(
              makeError(
                'PROTOCOL_VERSION_MISMATCH',
                `The sandbox's daemon speaks protocol ${header.protocolVersion}.${header.protocolMinor ?? 0}; this SDK speaks ${PROTOCOL_VERSION}.${PROTOCOL_MINOR}. Use an SDK of major version ${header.protocolVersion}.`,
                { details: { server: `${header.protocolVersion}.${header.protocolMinor ?? 0}`, client: `${PROTOCOL_VERSION}.${PROTOCOL_MINOR}` } },
              ),
            );
          } else if (header.type === 'err') reject(errorFromWire(header.error));
          else reject(makeError('INVALID_FRAME', `Expected a welcome frame, got '${header.type}'.`));
        } catch (err) {
          reject(toWarrenError(err));
        }
      });
    });
    ws.send(encodeFrame({ type: 'hello', protocolVersion: PROTOCOL_VERSION, protocolMinor: PROTOCOL_MINOR, client: '@warren/sdk' }));
    try {
      return new Connection(ws, await welcome);
    } catch (err) {
      ws.terminate();
      throw err;
    }
  }

  /**
   * Calls a method: params are checked against its schema before anything is sent, the result
   * against its schema when it arrives.
   */
  async call<M extends MethodName>(method: M, params: ParamsIn<M>, options: RawCallOptions = {}): Promise<CallAnswer<M>> {
    const checked = METHODS[method].params.safeParse(params);
    if (!checked.success) throw makeError('INVALID_PARAMS', `Invalid arguments for ${method}: ${checked.error.issues.map(issueText).join('; ')}`);
    if (this.closedError) throw this.closedError;
    if (options.signal?.aborted) throw makeError('CANCELLED', `${method} was cancelled before it was sent.`);

    const id = this.nextId++;
    const timeoutMs = options.timeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    try {
      const answer = await new Promise<{ result: unknown; payload?: Buffer | undefined }>((resolve, reject) => {
        this.pending.set(id, { method, resolve, reject, onEvent: options.onEvent });
        const giveUp = (err: WarrenError) => {
          if (!this.pending.delete(id)) return;
          this.sendFrame({ type: 'cancel', id });
          reject(err);
        };
        timer = setTimeout(() => giveUp(makeError('REQUEST_TIMEOUT', `${method} did not answer within ${timeoutMs} ms; it was cancelled.`)), timeoutMs);
        onAbort = () => giveUp(makeError('CANCELLED', `${method} was cancelled by its AbortSignal.`));
        options.signal?.addEventListener('abort', onAbort, { once: true });
        try {
          this.sendFrame({ type: 'req', id, method, params: checked.data }, options.payload);
        } catch (err) {
          // A request too large for a frame is refused here, as the daemon would, and never sent.
          this.pending.delete(id);
          reject(toWarrenError(err));
        }
      });
      return { result: parseResult(method, answer.result), payload: answer.payload };
    } catch (err) {
      throw toWarrenError(err);
    } finally {
      clearTimeout(timer);
      if (onAbort) options.signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Runs `listener` once the socket has closed, for whatever reason. */
  onClose(listener: () => void): void {
    this.closeListeners.add(listener);
  }

  /** Closes the connection; pending calls are rejected with `ConnectionClosedError`. */
  close(): void {
    this.failAll(makeError('CONNECTION_CLOSED', 'The connection was closed by this client.'));
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) this.ws.close(1000);
  }

  get isOpen(): boolean {
    return this.closedError === undefined;
  }

  private readPauses = 0;

  /**
   * Stops reading the socket until {@link resumeReading} is called as often: a stream whose
   * consumer is behind applies backpressure this way, through the controller to the process.
   * Every call on the connection waits meanwhile.
   */
  pauseReading(): void {
    if (this.readPauses++ === 0) this.ws.pause();
  }

  resumeReading(): void {
    if (this.readPauses > 0 && --this.readPauses === 0) this.ws.resume();
  }

  private sendFrame(header: FrameHeader, payload?: Uint8Array): void {
    if (this.ws.readyState !== WebSocket.OPEN) return;
    const frame = encodeFrame(header, payload);
    this.batch.add(frame.length);
    this.ws.send(frame);
  }

  private onMessage(data: Buffer): void {
    let frame;
    try {
      frame = decodeFrame(data);
    } catch (err) {
      // A frame that cannot be read fails the call it names, if it names one; otherwise there is
      // no call to tell (a peer that breaks the protocol), and the calls keep their own timeouts.
      const id = err instanceof CodedError ? err.details?.id : undefined;
      const pending = typeof id === 'number' ? this.pending.get(id) : undefined;
      if (pending) {
        this.pending.delete(id as number);
        pending.reject(toWarrenError(err));
      }
      return;
    }
    const { header, payload } = frame;
    if (header.type !== 'res' && header.type !== 'err' && header.type !== 'evt') return;
    if (header.id === null || typeof header.id !== 'number') return;
    const pending = this.pending.get(header.id);
    if (!pending) return;
    if (header.type === 'evt') {
      let event;
      try {
        event = parseEvent(pending.method, header.event, header.data);
      } catch (err) {
        this.pending.delete(header.id);
        this.sendFrame({ type: 'cancel', id: header.id });
        return pending.reject(toWarrenError(err));
      }
      if (event?.event === 'approval') return this.answerApproval(header.id, pending.method, event.data);
      if (event) pending.onEvent?.(event, payload);
      return;
    }
    this.pending.delete(header.id);
    if (header.type === 'res') pending.resolve({ result: header.result, payload });
    else pending.reject(errorFromWire(header.error));
  }

  private answerApproval(id: number, method: MethodName, request: ApprovalRequest): void {
    const handler = this.onApproval;
    void (async () => {
      let allow: boolean;
      try {
        allow = handler !== undefined && (await handler(request, method)) === true;
      } catch {
        allow = false;
      }
      this.sendFrame({ type: 'approval', id, allow });
    })();
  }

  private failAll(err: WarrenError): void {
    this.closedError ??= err;
    for (const pending of this.pending.values()) pending.reject(err);
    this.pending.clear();
  }
}

/**
 * Whether the frames a client sends to `url` need a real (random) mask. RFC 6455 masks a client's
 * frames so that bytes its caller chooses cannot pose as HTTP to a proxy on the way that does not
 * understand WebSocket, and poison that proxy's cache; file content sent through Warren may come
 * from anywhere (a web page an agent read), so the concern applies to it. Such a proxy cannot read a
 * TLS connection (`wss:`), and none sits on a unix socket or on loopback: frames sent there go with
 * a zero mask, which spares a copy and an XOR of every byte sent. Plain `ws:` to any other host
 * keeps random masks.
 *
 * @example
 * masksNeeded('ws://127.0.0.1:8080/v1/sandboxes/x/connect'); // false
 * masksNeeded('ws://sandbox-host:8080/v1/sandboxes/x/connect'); // true
 */
export function masksNeeded(url: string): boolean {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return true;
  }
  if (parsed.protocol === 'wss:' || parsed.protocol === 'ws+unix:') return false;
  const host = parsed.hostname;
  return !(host === 'localhost' || host === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host));
}

function toWarrenError(err: unknown): WarrenError {
  if (err instanceof WarrenError) return err;
  if (err instanceof CodedError) return makeError(err.code, err.message, { details: err.details, cause: err });
  return makeError('INTERNAL', err instanceof Error ? err.message : String(err), { cause: err });
}

/** Turns a REST error answer (status + JSON body) into its SDK error. */
export function restError(status: number, text: string): WarrenError {
  try {
    const body = JSON.parse(text) as { error?: { code?: string; message?: string; details?: Record<string, unknown> } };
    if (body.error?.code && body.error.message) return makeError(body.error.code as never, body.error.message, { details: body.error.details });
  } catch {
    // not JSON: fall through
  }
  return makeError(status === 401 ? 'UNAUTHORIZED' : 'UPSTREAM_UNAVAILABLE', `The controller answered HTTP ${status}: ${text.slice(0, 500)}`);
}
