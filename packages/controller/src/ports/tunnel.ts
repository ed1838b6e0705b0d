import { Duplex } from 'node:stream';
import { CodedError, type ConnectionGrant } from '@warren/protocol';
import type { DaemonSessionPool } from '../daemon-pool.js';
import type { DaemonSession } from '../daemon-session.js';
import type { Caller } from '../grants.js';
import type { Metrics } from '../metrics.js';
import type { SandboxService } from '../sandboxes.js';

/** How long a tunnel closed by its client waits for the app to hang up before cancelling (ms). */
const LINGER_MS = 250;

/**
 * A TCP connection to a port inside a sandbox, as a Node stream: the daemon dials the port on the
 * sandbox's own loopback (`port.open`), what the server sends arrives as the call's `data`
 * events, and what is written here goes out as `port.write` calls. It rides a daemon connection
 * (over whichever channel the provider gives, socket or exec) opened with the caller's grant, so
 * the daemon applies the same rules as for any other client; one tunnel at a time per connection,
 * which goes back to a {@link DaemonSessionPool} when its tunnel ended cleanly.
 *
 * Backpressure both ways: a write completes only when the daemon has handed the bytes to the
 * server's socket, and when the reader of this stream falls behind, the daemon connection stops
 * being read, so the daemon stops reading the server.
 *
 * @example
 * const tunnel = await PortTunnel.open(new DaemonSessionPool(), sandboxes, id, caller, grant, 3000);
 * tunnel.end('GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n');
 * for await (const chunk of tunnel) process.stdout.write(chunk);
 */
export class PortTunnel extends Duplex {
  private paused = false;
  /** The server closed its side and the daemon ended the `port.open` call: the connection may serve another tunnel. */
  private serverClosed = false;
  /** `port.write` calls in flight. */
  private writing = 0;
  /** Called when the `port.open` call or a write settles; after destroy it decides the connection's fate. */
  private settled: () => void = () => undefined;

  private constructor(
    private readonly session: DaemonSession,
    private readonly handle: string,
    private readonly reuse: () => void,
    private readonly abort: AbortController,
  ) {
    super({ allowHalfOpen: true });
  }

  /**
   * Opens a tunnel to `port` over a daemon connection from `pool` (or a new one); fails with
   * `PORT_UNREACHABLE` when nothing listens there.
   */
  static async open(
    pool: DaemonSessionPool,
    sandboxes: SandboxService,
    id: string,
    caller: Caller,
    grant: ConnectionGrant,
    port: number,
    metrics?: Metrics,
    connectTimeoutMs = 5000,
  ): Promise<PortTunnel> {
    const lease = await pool.lease(sandboxes, id, caller, grant, metrics);
    metrics?.portTunnels.inc({ connection: lease.reused ? 'reused' : 'new' });
    const session = lease.session;
    let tunnel: PortTunnel | undefined;
    const early: Buffer[] = [];
    let connected: (handle: string) => void = () => undefined;
    const handle = new Promise<string>((resolve) => (connected = resolve));
    const abort = new AbortController();
    const call = session.call(
      'port.open',
      { port, connectTimeoutMs },
      {
        signal: abort.signal,
        onEvent: (event, data, payload) => {
          if (event === 'connected') connected((data as { handle: string }).handle);
          else if (event === 'data' && payload) {
            if (tunnel) tunnel.onData(payload);
            else early.push(payload);
          }
        },
      },
    );
    try {
      const opened = await Promise.race([
        handle,
        call.then(() => {
          throw new CodedError('PORT_UNREACHABLE', `The connection to port ${port} closed before it opened.`);
        }),
      ]);
      const t = new PortTunnel(session, opened, lease.release, abort);
      tunnel = t;
      for (const chunk of early) t.onData(chunk);
      call.then(
        () => {
          t.serverClosed = true;
          t.settled();
          t.push(null);
        },
        (err: unknown) => {
          t.settled();
          t.destroy(err instanceof Error ? err : new Error(String(err)));
        },
      );
      return t;
    } catch (err) {
      abort.abort();
      session.close();
      call.catch(() => undefined);
      throw err;
    }
  }

  private onData(chunk: Buffer): void {
    // Data the daemon sent before it saw the cancel: dropped. Pausing here (push on a destroyed
    // stream says false) would stop the connection for good: its close handshake never read, the
    // socket kept open after the sandbox was gone, one more for each client that gave up on a stream.
    if (this.destroyed) return;
    if (!this.push(chunk) && !this.paused) {
      this.paused = true;
      this.session.pauseReading();
    }
  }

  override _read(): void {
    if (this.paused) {
      this.paused = false;
      this.session.resumeReading();
    }
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.send({ handle: this.handle }, chunk).then(
      () => callback(),
      (err: unknown) => callback(err instanceof Error ? err : new Error(String(err))),
    );
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.send({ handle: this.handle, end: true }).then(
      () => callback(),
      () => callback(), // the server already hung up: nothing left to half-close
    );
  }

  /** One `port.write`, counted so the connection is handed on only when none is in flight. */
  private async send(params: { handle: string; end?: boolean }, payload?: Buffer): Promise<void> {
    this.writing++;
    try {
      await this.session.call('port.write', params, { payload });
    } finally {
      this.writing--;
      this.settled();
    }
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    if (this.paused) {
      this.paused = false;
      this.session.resumeReading();
    }
    callback(error);
    // A client sends `Connection: close`, so after a complete answer the app hangs up about now:
    // wait a moment for the daemon to say so and for writes in flight to finish, then keep the
    // connection for the next tunnel. Anything else (an error, an app that keeps streaming)
    // cancels the call and closes the connection.
    let finished = false;
    const finish = (reusable: boolean) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      if (reusable && this.session.idle) return this.reuse();
      this.abort.abort();
      this.session.close();
    };
    const timer = setTimeout(() => finish(false), error ? 0 : LINGER_MS);
    this.settled = () => {
      if (!error && this.serverClosed && this.writing === 0) finish(true);
    };
    this.settled();
  }
}
