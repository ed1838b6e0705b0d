import { METHODS, type MethodName, type ParamsIn } from '@warren/protocol';
import { DEFAULT_CALL_TIMEOUT_MS, type ApprovalHandler, type CallAnswer, type Connection, type RawCallOptions } from './connection.js';
import { makeError, WarrenError } from './errors.js';

/**
 * What the SDK's namespaces need from a connection: calls, and read pausing for streams whose
 * consumer is behind. Both {@link Connection} and {@link ReconnectingChannel} provide it.
 */
export interface Channel {
  call<M extends MethodName>(method: M, params: ParamsIn<M>, options?: RawCallOptions): Promise<CallAnswer<M>>;
  pauseReading(): void;
  resumeReading(): void;
}

/** How a dropped connection is brought back. */
export interface ReconnectOptions {
  /** The first retry waits up to this long; each later one up to twice the one before. */
  baseDelayMs?: number;
  /** No single wait is longer than this. */
  maxDelayMs?: number;
  /** After this long without a connection, calls fail instead of waiting. */
  giveUpAfterMs?: number;
}

const DEFAULTS: Required<ReconnectOptions> = { baseDelayMs: 100, maxDelayMs: 5_000, giveUpAfterMs: 120_000 };

/**
 * How many times one idempotent call is repeated after its connection dropped. A call whose
 * connection drops every time may be what drops it (a request that kills the daemon): repeating
 * it without end would turn one failure into a crash loop.
 */
export const MAX_REPEATS = 2;

/**
 * A connection that comes back by itself. When the socket drops (a controller restart, a network
 * blip), it reopens with exponential backoff and full jitter, so a fleet of clients does not
 * reconnect in lockstep. Calls made meanwhile wait for the new connection (within their own
 * timeout). A call that was in flight is repeated only when its method is idempotent and it is
 * not a stream, and at most {@link MAX_REPEATS} times; any other fails with a retryable `ConnectionClosedError` that says it may or may
 * not have run.
 *
 * @example
 * const channel = new ReconnectingChannel(() => Connection.open(url, token), first);
 * const { result } = await channel.call('fs.stat', { path: 'a.py' });
 */
export class ReconnectingChannel implements Channel {
  private current: Connection | undefined;
  private reconnecting: Promise<Connection> | undefined;
  private closed = false;
  /** Set by {@link ReconnectingChannel.sleep}: no reconnection until the next call asks for one. */
  private dormant = false;
  private failure: WarrenError | undefined;
  private approval: ApprovalHandler | undefined;
  private readonly reconnectListeners = new Set<() => void>();
  private readonly options: Required<ReconnectOptions>;

  constructor(
    private readonly open: () => Promise<Connection>,
    first: Connection,
    options: ReconnectOptions = {},
  ) {
    this.options = { ...DEFAULTS, ...options };
    this.adopt(first);
  }

  /** Answers approval requests on this and every later connection. */
  get onApproval(): ApprovalHandler | undefined {
    return this.approval;
  }

  set onApproval(handler: ApprovalHandler | undefined) {
    this.approval = handler;
    if (this.current) this.current.onApproval = handler;
  }

  /** Runs `listener` after each successful reconnection; returns a function that removes it. */
  onReconnect(listener: () => void): () => void {
    this.reconnectListeners.add(listener);
    return () => this.reconnectListeners.delete(listener);
  }

  async call<M extends MethodName>(method: M, params: ParamsIn<M>, options: RawCallOptions = {}): Promise<CallAnswer<M>> {
    const deadline = Date.now() + (options.timeoutMs ?? DEFAULT_CALL_TIMEOUT_MS);
    const repeatable = METHODS[method].idempotent && options.onEvent === undefined;
    for (let repeats = 0; ; repeats++) {
      // An open connection is used at once; waiting (an async step) only while there is none.
      const current = this.current;
      const connection = !this.closed && current?.isOpen ? current : await this.ready(deadline, options.signal, method);
      try {
        return await connection.call(method, params, { ...options, timeoutMs: Math.max(1, deadline - Date.now()) });
      } catch (err) {
        if (!(err instanceof WarrenError) || err.code !== 'CONNECTION_CLOSED' || this.closed) throw err;
        if (!repeatable) {
          throw makeError(
            'CONNECTION_CLOSED',
            `The connection dropped while ${method} was in flight; it may or may not have run, so it was not repeated. The connection is coming back by itself: call again if repeating it is safe.`,
            { cause: err },
          );
        }
        if (repeats >= MAX_REPEATS) {
          throw makeError(
            'CONNECTION_CLOSED',
            `The connection dropped each of the ${repeats + 1} times ${method} was sent, so it is not sent again: the call itself may be what ends the connection. Check the sandbox (its state, its daemon), then call again if it is safe.`,
            { cause: err },
          );
        }
      }
    }
  }

  pauseReading(): void {
    this.current?.pauseReading();
  }

  resumeReading(): void {
    this.current?.resumeReading();
  }

  /**
   * Closes the connection without reconnecting until the next call needs one (a hibernated
   * sandbox: reconnecting at once would wake it again).
   */
  sleep(): void {
    this.dormant = true;
    this.current?.close();
  }

  /** Closes for good: no reconnection, pending and later calls fail. */
  close(): void {
    this.closed = true;
    this.current?.close();
  }

  /** The open connection, waiting for a reconnection when there is none. */
  async ready(deadline: number, signal: AbortSignal | undefined, method: string): Promise<Connection> {
    if (this.closed) throw makeError('CONNECTION_CLOSED', 'This sandbox handle was closed; connect again with Sandbox.connect(id).');
    if (this.current?.isOpen) return this.current;
    this.dormant = false;
    if (this.failure) throw this.failure;
    const waitFor = this.reconnecting ?? this.reconnect();
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    try {
      return await Promise.race([
        waitFor,
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(makeError('REQUEST_TIMEOUT', `${method} timed out waiting for the connection to come back.`)),
            Math.max(0, deadline - Date.now()),
          );
          onAbort = () => reject(makeError('CANCELLED', `${method} was cancelled while waiting for the connection.`));
          signal?.addEventListener('abort', onAbort, { once: true });
        }),
      ]);
    } finally {
      clearTimeout(timer);
      if (onAbort) signal?.removeEventListener('abort', onAbort);
    }
  }

  private adopt(connection: Connection): void {
    this.current = connection;
    connection.onApproval = this.approval;
    connection.onClose(() => {
      if (this.current === connection && !this.closed && !this.dormant) void this.reconnect().catch(() => undefined);
    });
  }

  private reconnect(): Promise<Connection> {
    this.reconnecting ??= (async () => {
      const started = Date.now();
      let lastError: unknown;
      for (let attempt = 0; !this.closed && Date.now() - started < this.options.giveUpAfterMs; attempt++) {
        // Full jitter: anywhere from 0 to the capped exponential delay.
        const cap = Math.min(this.options.maxDelayMs, this.options.baseDelayMs * 2 ** attempt);
        // unref: a reconnection in progress must not keep a finished script alive.
        await new Promise((r) => setTimeout(r, Math.random() * cap).unref());
        try {
          const connection = await this.open();
          if (this.closed) {
            connection.close();
            break;
          }
          this.adopt(connection);
          for (const listener of this.reconnectListeners) listener();
          return connection;
        } catch (err) {
          lastError = err;
          // A credential or a sandbox that is gone will not come back by waiting.
          if (err instanceof WarrenError && !err.isRetryable) break;
        }
      }
      // A final answer (the sandbox ended, the credential was refused) says more than "could not reconnect".
      this.failure =
        lastError instanceof WarrenError && !lastError.isRetryable
          ? lastError
          : makeError('CONNECTION_CLOSED', `Could not reconnect to the sandbox: ${(lastError as Error)?.message ?? 'closed'}.`, { cause: lastError });
      throw this.failure;
    })().finally(() => {
      this.reconnecting = undefined;
    });
    return this.reconnecting;
  }
}
