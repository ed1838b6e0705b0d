import {
  WireClient,
  WS_MAX_PAYLOAD_BYTES,
  type ApprovalRequest,
  type MethodName,
  type NegotiatedProtocol,
  type ParamsIn,
  type ParsedEvent,
  type Result,
  type WireCallOptions,
  type WireErrors,
} from '@warren/protocol';
import { wsSocket } from '@warren/protocol/node';
import { WebSocket } from 'ws';
import { errorFromWire, makeError, type WarrenError } from './errors.js';

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

/** The SDK's error classes for the shared wire client's failures. */
const SDK_ERRORS: WireErrors = {
  fromWire: errorFromWire,
  local: (code, message, options) => makeError(code, message, options),
};

/**
 * One WebSocket to a sandbox, through the controller: the protocol's {@link WireClient} (hello
 * handshake, calls matched to their answers by id in one pending map, a timeout per call naming
 * its method, everything still pending rejected when the connection closes) with the SDK's
 * errors, its default timeout and its approval handler.
 */
export class Connection {
  private constructor(
    /** The socket under the client; `wsSocket` sends the small frames of one turn of the event loop (calls made at once, with `Promise.all`) in two writes: the first at once, the rest together. */
    private readonly ws: WebSocket,
    private readonly client: WireClient,
  ) {}

  /**
   * Answers the sandbox's approval requests (seed 001's `read_approval` / `write_approval`):
   * return true to allow. No handler, a handler that throws, or one that answers anything but
   * true denies, and the call fails with `ApprovalDeniedError`.
   */
  get onApproval(): ApprovalHandler | undefined {
    return this.client.onApproval;
  }

  set onApproval(handler: ApprovalHandler | undefined) {
    this.client.onApproval = handler;
  }

  /**
   * The protocol this connection speaks: the shared major, the minor both ends speak (the lower
   * of the two), and the server's own minor and name from its welcome.
   */
  get protocol(): NegotiatedProtocol {
    return this.client.protocol;
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
    try {
      const client = await WireClient.connect(wsSocket(ws), {
        client: '@warren/sdk',
        handshakeTimeoutMs: timeoutMs,
        errors: SDK_ERRORS,
        answerApprovals: true,
        defaultTimeoutMs: DEFAULT_CALL_TIMEOUT_MS,
        versionWords: { self: 'this SDK', another: 'an SDK' },
        peerClosedError: (code, reason) =>
          makeError('CONNECTION_CLOSED', `The connection to the sandbox closed (${code}${reason.length ? `: ${reason}` : ''}).`),
        handshakeClosedError: (code) => makeError('CONNECTION_CLOSED', `The connection to ${url} closed before its handshake answer (${code}).`),
        handshakeTimeoutError: () => makeError('REQUEST_TIMEOUT', `No handshake answer from ${url} within ${timeoutMs} ms.`),
      });
      return new Connection(ws, client);
    } catch (err) {
      ws.terminate();
      throw err;
    }
  }

  /**
   * Calls a method: params are checked against its schema before anything is sent, the result
   * against its schema when it arrives.
   */
  call<M extends MethodName>(method: M, params: ParamsIn<M>, options: RawCallOptions = {}): Promise<CallAnswer<M>> {
    // The client checks events, so each one is a registry event.
    return this.client.call(method, params, options as WireCallOptions);
  }

  /** Runs `listener` once the socket has closed, for whatever reason. */
  onClose(listener: () => void): void {
    this.client.onClose(() => listener());
  }

  /** Closes the connection; pending calls are rejected with `ConnectionClosedError`. */
  close(): void {
    this.client.close(1000);
  }

  get isOpen(): boolean {
    return this.client.isOpen;
  }

  /**
   * Stops reading the socket until {@link resumeReading} is called as often: a stream whose
   * consumer is behind applies backpressure this way, through the controller to the process.
   * Every call on the connection waits meanwhile.
   */
  pauseReading(): void {
    this.client.pauseReading();
  }

  resumeReading(): void {
    this.client.resumeReading();
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
