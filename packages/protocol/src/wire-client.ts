import type { FrameHeader, WelcomeFrame } from './envelope.js';
import { CodedError, type ErrorCode, type WireErrorBody } from './errors.js';
import { decodeFrame, encodeFrame, issueText } from './frame.js';
import { METHODS, parseEvent, parseResult, type MethodName, type ParamsIn, type ParsedEvent, type Result } from './methods.js';
import type { ApprovalRequest } from './policy.js';
import { negotiatedMinor, PROTOCOL_MINOR, PROTOCOL_VERSION } from './version.js';

/**
 * The socket a {@link WireClient} speaks through: what `ws` in Node and the browser's `WebSocket`
 * both provide through a thin adapter (`wsSocket` in `@warren/protocol/node`, `webSocket`
 * for a standard one). The socket is open when handed over; the client only sends, reads and closes.
 */
export interface WireSocket {
  /** Sends one binary message. */
  send(frame: Uint8Array): void;
  /** Starts the closing handshake (or drops a socket still connecting). */
  close(code?: number, reason?: string): void;
  /** Whether a message sent now goes out. */
  readonly isOpen: boolean;
  /** Hands every message received and the close to `handlers` (called once, by the client). */
  listen(handlers: WireSocketHandlers): void;
  /** Stops reading the socket (backpressure); a socket that cannot leaves it out. */
  pause?(): void;
  /** Reads the socket again after {@link pause}. */
  resume?(): void;
}

/** What a {@link WireSocket} reports to its client. */
export interface WireSocketHandlers {
  message(data: Uint8Array | ArrayBuffer | string): void;
  close(code: number, reason: string): void;
}

/** Options of a local failure made by {@link WireErrors.local}. */
export interface LocalErrorOptions {
  details?: Record<string, unknown> | undefined;
  cause?: unknown;
}

/**
 * How a client's failures become its callers' error type: the SDK's `WarrenError` classes, the
 * console's errors, or the protocol's {@link CodedError} (the default). `CONNECTION_CLOSED` and
 * `REQUEST_TIMEOUT` are client-local codes that never cross the wire.
 */
export interface WireErrors {
  /** An `err` frame's error. */
  fromWire: (error: WireErrorBody) => Error;
  /** A failure on this side: a timeout, a cancel, a closed connection, a frame that cannot be read or sent. */
  local: (code: ErrorCode | 'CONNECTION_CLOSED' | 'REQUEST_TIMEOUT', message: string, options?: LocalErrorOptions) => Error;
}

/** The errors a client makes when its owner gives none: {@link CodedError}s (local codes as their nearest wire code). */
export const CODED_ERRORS: WireErrors = {
  fromWire: (error) => new CodedError(error.code, error.message, error.details),
  local: (code, message, options) => {
    const wire: ErrorCode = code === 'CONNECTION_CLOSED' || code === 'REQUEST_TIMEOUT' ? 'UPSTREAM_UNAVAILABLE' : code;
    return new CodedError(wire, message, options?.details);
  },
};

/** Options of {@link WireClient.connect}. */
export interface WireClientOptions {
  /** The `client` name sent in `hello`. */
  client: string;
  /** How long to wait for `welcome` (ms). */
  handshakeTimeoutMs?: number | undefined;
  /** The error type of this client's failures ({@link CODED_ERRORS} when left out). */
  errors?: WireErrors | undefined;
  /** Check params against the registry before sending (default true); a client relaying checked params may skip it. */
  checkParams?: boolean | undefined;
  /** Check results against the registry, tolerantly (default true); a client that only passes results on may skip it. */
  checkResults?: boolean | undefined;
  /**
   * Check each event against its method's events (default true): an unknown event is dropped, an
   * off-contract one fails its call (and cancels it). When false, events are passed on as sent.
   */
  checkEvents?: boolean | undefined;
  /** Answer `approval` events with {@link WireClient.onApproval} (deny without one) instead of passing them on as events (default false). */
  answerApprovals?: boolean | undefined;
  /** The timeout of a call that gives none (ms); none when left out. */
  defaultTimeoutMs?: number | undefined;
  /** The error calls still pending fail with when the peer closes ({@link WireErrors.local} `CONNECTION_CLOSED` when left out). */
  peerClosedError?: ((code: number, reason: string) => Error) | undefined;
  /** The error calls still pending fail with when this side closes. */
  localClosedError?: (() => Error) | undefined;
  /** The error of a handshake with no welcome in time. */
  handshakeTimeoutError?: (() => Error) | undefined;
  /** The error of a handshake the peer closed before its welcome. */
  handshakeClosedError?: ((code: number, reason: string) => Error) | undefined;
  /** Words naming this end in a version mismatch: `{ self: 'this SDK', another: 'an SDK' }`; `this client` and `a client` when left out. */
  versionWords?: { self: string; another: string } | undefined;
  /** A frame that cannot be read and names no pending call: the peer broke the protocol. Ignored when left out. */
  onBadFrame?: ((err: Error) => void) | undefined;
  /** Runs right before each frame is sent, with its size (the Node adapter's write batching). */
  beforeSend?: ((bytes: number) => void) | undefined;
}

/** One event of a call: checked against the registry, or as sent when the client does not check events. */
export type WireEvent = ParsedEvent | { method: MethodName; event: string; data: unknown };

/** Options of one {@link WireClient.call}. */
export interface WireCallOptions {
  /** The request frame's binary payload (file content, stdin bytes). */
  payload?: Uint8Array | undefined;
  /** Each event of the call, with its payload. */
  onEvent?: ((event: WireEvent, payload: Buffer | undefined) => void) | undefined;
  /** Aborting sends a `cancel` frame and fails the call with `CANCELLED`. */
  signal?: AbortSignal | undefined;
  /** How long to wait for the answer before cancelling and failing with `REQUEST_TIMEOUT`; the client's default when left out. */
  timeoutMs?: number | undefined;
}

/** A call's answer: the result (checked, unless the client does not check results) and the response payload. */
export interface WireAnswer<M extends MethodName> {
  result: Result<M>;
  payload?: Buffer | undefined;
}

/** What the two ends agreed in the handshake: the shared major, the minor both speak, and the server's own minor and name. */
export interface NegotiatedProtocol {
  version: number;
  minor: number;
  serverMinor: number;
  server: string;
  serverVersion: string;
}

/** Decides one approval request: true allows. */
export type WireApprovalHandler = (request: ApprovalRequest, method: MethodName) => boolean | Promise<boolean>;

interface Pending {
  method: MethodName;
  resolve(answer: { result: unknown; payload?: Buffer | undefined }): void;
  reject(err: Error): void;
  onEvent?: WireCallOptions['onEvent'];
}

/**
 * One client of Warren's wire, for every runtime and every caller: the SDK, the console, and the
 * controller's own connections to daemons (the E2B gateway's sessions, port tunnels, the egress
 * relay, probes). It does the `hello`/`welcome` handshake and version negotiation (the major must
 * match; both ends then speak the lower minor), numbers requests, keeps one pending map, times
 * calls out and cancels them (a `cancel` frame) by signal or timeout, pauses reading for
 * backpressure, answers approvals, and fails everything pending when the connection closes. It
 * speaks through a {@link WireSocket}, so it imports nothing of Node's.
 *
 * @example
 * const client = await WireClient.connect(wsSocket(ws), { client: 'my-tool' });
 * const { result } = await client.call('fs.stat', { path: 'a.py' }, { timeoutMs: 5_000 });
 * client.close();
 */
export class WireClient {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private closedError: Error | undefined;
  private readonly closeListeners = new Set<(code: number, reason: string) => void>();
  private readonly errors: WireErrors;
  private readPauses = 0;

  /** Answers approval requests when the client was made with `answerApprovals`: true allows; none, a throw or anything else denies. */
  onApproval: WireApprovalHandler | undefined;

  private constructor(
    private readonly socket: WireSocket,
    private readonly options: WireClientOptions,
    /** What the handshake agreed. */
    readonly protocol: NegotiatedProtocol,
  ) {
    this.errors = options.errors ?? CODED_ERRORS;
  }

  /**
   * Sends `hello` on an open socket and resolves once the `welcome` of the same major arrived.
   * A different major fails with `PROTOCOL_VERSION_MISMATCH` naming both versions, an `err`
   * answer with its own error; the socket is closed then.
   */
  static connect(socket: WireSocket, options: WireClientOptions): Promise<WireClient> {
    const errors = options.errors ?? CODED_ERRORS;
    const timeoutMs = options.handshakeTimeoutMs ?? 10_000;
    return new Promise<WireClient>((resolve, reject) => {
      let client: WireClient | undefined;
      let settled = false;
      const fail = (err: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        socket.close();
        reject(err);
      };
      const timer = setTimeout(
        () => fail(options.handshakeTimeoutError?.() ?? errors.local('REQUEST_TIMEOUT', `No handshake answer within ${timeoutMs} ms.`)),
        timeoutMs,
      );
      socket.listen({
        message: (data) => {
          if (client) return client.receive(data);
          if (settled) return;
          let header: FrameHeader;
          try {
            header = decodeFrame(data as ArrayBuffer).header;
          } catch (err) {
            return fail(toError(errors, err));
          }
          if (header.type === 'welcome' && header.protocolVersion === PROTOCOL_VERSION) {
            settled = true;
            clearTimeout(timer);
            client = new WireClient(socket, options, negotiated(header));
            resolve(client);
          } else if (header.type === 'welcome') {
            const server = `${header.protocolVersion}.${header.protocolMinor ?? 0}`;
            const self = `${PROTOCOL_VERSION}.${PROTOCOL_MINOR}`;
            const words = options.versionWords ?? { self: 'this client', another: 'a client' };
            fail(
              errors.local(
                'PROTOCOL_VERSION_MISMATCH',
                `The sandbox's daemon speaks protocol ${server}; ${words.self} speaks ${self}. Use ${words.another} of major version ${header.protocolVersion}.`,
                { details: { server, client: self } },
              ),
            );
          } else if (header.type === 'err') fail(errors.fromWire(header.error));
          else fail(errors.local('INVALID_FRAME', `Expected a welcome frame, got '${header.type}'.`));
        },
        close: (code, reason) => {
          if (client) return client.onSocketClosed(code, reason);
          fail(options.handshakeClosedError?.(code, reason) ?? errors.local('CONNECTION_CLOSED', `The connection closed during the handshake (${code}).`));
        },
      });
      try {
        socket.send(encodeFrame({ type: 'hello', protocolVersion: PROTOCOL_VERSION, protocolMinor: PROTOCOL_MINOR, client: options.client }));
      } catch (err) {
        fail(toError(errors, err));
      }
    });
  }

  /**
   * Calls a method of the registry and resolves with its answer; its events go to `onEvent`
   * meanwhile. Fails without sending when the params do not match the method's schema
   * (`INVALID_PARAMS`), the connection is closed, or the signal was already aborted.
   */
  async call<M extends MethodName>(method: M, params: ParamsIn<M>, options: WireCallOptions = {}): Promise<WireAnswer<M>> {
    let sent: unknown = params;
    if (this.options.checkParams !== false) {
      const checked = METHODS[method].params.safeParse(params);
      if (!checked.success) throw this.errors.local('INVALID_PARAMS', `Invalid arguments for ${method}: ${checked.error.issues.map(issueText).join('; ')}`);
      sent = checked.data;
    }
    if (this.closedError) throw this.closedError;
    if (options.signal?.aborted) throw this.errors.local('CANCELLED', `${method} was cancelled before it was sent.`);

    const id = this.nextId++;
    const timeoutMs = options.timeoutMs ?? this.options.defaultTimeoutMs;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let onAbort: (() => void) | undefined;
    try {
      const answer = await new Promise<{ result: unknown; payload?: Buffer | undefined }>((resolve, reject) => {
        this.pending.set(id, { method, resolve, reject, onEvent: options.onEvent });
        const giveUp = (err: Error) => {
          if (!this.pending.delete(id)) return;
          this.sendFrame({ type: 'cancel', id });
          reject(err);
        };
        if (timeoutMs !== undefined) {
          timer = setTimeout(
            () => giveUp(this.errors.local('REQUEST_TIMEOUT', `${method} did not answer within ${timeoutMs} ms; it was cancelled.`)),
            timeoutMs,
          );
        }
        onAbort = () => giveUp(this.errors.local('CANCELLED', `${method} was cancelled by its AbortSignal.`));
        options.signal?.addEventListener('abort', onAbort, { once: true });
        try {
          this.sendFrame({ type: 'req', id, method, params: sent }, options.payload);
        } catch (err) {
          // A request too large for a frame is refused here, as the peer would, and never sent.
          this.pending.delete(id);
          reject(toError(this.errors, err));
        }
      });
      return { result: (this.options.checkResults === false ? answer.result : parseResult(method, answer.result)) as Result<M>, payload: answer.payload };
    } catch (err) {
      throw toError(this.errors, err);
    } finally {
      clearTimeout(timer);
      if (onAbort) options.signal?.removeEventListener('abort', onAbort);
    }
  }

  /** The id the last call was sent with (0 before the first). */
  get lastId(): number {
    return this.nextId - 1;
  }

  /** Whether calls can still be made: not closed by either side. */
  get isOpen(): boolean {
    return this.closedError === undefined && this.socket.isOpen;
  }

  /** Open, with no call in flight and reading: fit to be handed to the next user of a pool. */
  get idle(): boolean {
    return this.isOpen && this.pending.size === 0 && this.readPauses === 0;
  }

  /** How many calls wait for their answer. */
  get inFlight(): number {
    return this.pending.size;
  }

  /** Runs `listener` once the connection has closed, for whatever reason, with the close code and reason. */
  onClose(listener: (code: number, reason: string) => void): void {
    this.closeListeners.add(listener);
  }

  /**
   * Stops reading the socket until {@link resumeReading} is called as often: a consumer that is
   * behind applies backpressure this way, to the peer and, through a relay, to the process that
   * writes. Every call on the connection waits meanwhile. A socket that cannot pause ignores it.
   */
  pauseReading(): void {
    if (this.readPauses++ === 0) this.socket.pause?.();
  }

  /** Undoes one {@link pauseReading}. */
  resumeReading(): void {
    if (this.readPauses > 0 && --this.readPauses === 0) this.socket.resume?.();
  }

  /** Closes the connection: calls still pending fail, and the peer cancels their work. */
  close(code = 1000, reason?: string): void {
    this.failAll(this.options.localClosedError?.() ?? this.errors.local('CONNECTION_CLOSED', 'The connection was closed by this client.'));
    // A paused socket would never read the peer's close frame behind the data it still has.
    if (this.readPauses > 0) {
      this.readPauses = 0;
      this.socket.resume?.();
    }
    this.socket.close(code, reason);
  }

  /** Sends a frame outside a call (a raw cancel of a call made elsewhere); dropped when the connection is not open. */
  sendFrame(header: FrameHeader, payload?: Uint8Array): void {
    if (!this.socket.isOpen) return;
    const frame = encodeFrame(header, payload);
    this.options.beforeSend?.(frame.length);
    this.socket.send(frame);
  }

  private receive(data: Uint8Array | ArrayBuffer | string): void {
    let frame;
    try {
      frame = decodeFrame(data as ArrayBuffer);
    } catch (err) {
      // A frame that cannot be read fails the call it names, if it names one; otherwise there is
      // no call to tell (a peer that breaks the protocol), and the calls keep their own timeouts.
      const id = err instanceof CodedError ? err.details?.id : undefined;
      const pending = typeof id === 'number' ? this.pending.get(id) : undefined;
      if (pending) {
        this.pending.delete(id as number);
        pending.reject(toError(this.errors, err));
      } else this.options.onBadFrame?.(toError(this.errors, err));
      return;
    }
    const { header, payload } = frame;
    if (header.type !== 'res' && header.type !== 'err' && header.type !== 'evt') return;
    if (typeof header.id !== 'number') return;
    const pending = this.pending.get(header.id);
    if (!pending) return;
    if (header.type === 'evt') return this.onEvent(header.id, pending, header.event, header.data, payload);
    this.pending.delete(header.id);
    if (header.type === 'res') pending.resolve({ result: header.result, payload });
    else pending.reject(this.errors.fromWire(header.error));
  }

  private onEvent(id: number, pending: Pending, name: string, data: unknown, payload: Buffer | undefined): void {
    let event: WireEvent | undefined;
    if (this.options.checkEvents === false) event = { method: pending.method, event: name, data };
    else {
      try {
        event = parseEvent(pending.method, name, data);
      } catch (err) {
        this.pending.delete(id);
        this.sendFrame({ type: 'cancel', id });
        return pending.reject(toError(this.errors, err));
      }
    }
    if (event?.event === 'approval' && this.options.answerApprovals) return this.answerApproval(id, pending.method, event.data as ApprovalRequest);
    if (event) pending.onEvent?.(event, payload);
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

  private onSocketClosed(code: number, reason: string): void {
    this.failAll(
      this.options.peerClosedError?.(code, reason) ?? this.errors.local('CONNECTION_CLOSED', `The connection closed (${code}${reason ? `: ${reason}` : ''}).`),
    );
    for (const listener of this.closeListeners) listener(code, reason);
  }

  private failAll(err: Error): void {
    this.closedError ??= err;
    for (const pending of this.pending.values()) pending.reject(err);
    this.pending.clear();
  }
}

function negotiated(welcome: WelcomeFrame): NegotiatedProtocol {
  return {
    version: welcome.protocolVersion,
    minor: negotiatedMinor(welcome.protocolMinor),
    serverMinor: welcome.protocolMinor ?? 0,
    server: welcome.server,
    serverVersion: welcome.serverVersion,
  };
}

/** Anything thrown, as the client's error type: a {@link CodedError} keeps its code and details. */
function toError(errors: WireErrors, err: unknown): Error {
  if (err instanceof CodedError) return errors.local(err.code, err.message, { details: err.details, cause: err });
  if (err instanceof Error && (err as { code?: unknown }).code !== undefined) return err;
  return errors.local('INTERNAL', err instanceof Error ? err.message : String(err), { cause: err });
}
