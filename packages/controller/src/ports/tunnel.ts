import { Duplex } from 'node:stream';
import { CodedError, type ConnectionGrant } from '@warren/protocol';
import { DaemonSession } from '../e2b/daemon-session.js';
import type { Caller } from '../grants.js';
import type { Metrics } from '../metrics.js';
import type { SandboxService } from '../sandboxes.js';

/**
 * A TCP connection to a port inside a sandbox, as a Node stream: the daemon dials the port on the
 * sandbox's own loopback (`port.open`), what the server sends arrives as the call's `data`
 * events, and what is written here goes out as `port.write` calls. It rides a daemon connection
 * of its own (over whichever channel the provider gives, socket or exec), opened with the
 * caller's grant, so the daemon applies the same rules as for any other client.
 *
 * Backpressure both ways: a write completes only when the daemon has handed the bytes to the
 * server's socket, and when the reader of this stream falls behind, the daemon connection stops
 * being read, so the daemon stops reading the server.
 *
 * @example
 * const tunnel = await PortTunnel.open(sandboxes, id, caller, grant, 3000);
 * tunnel.end('GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n');
 * for await (const chunk of tunnel) process.stdout.write(chunk);
 */
export class PortTunnel extends Duplex {
  private paused = false;
  private readonly abort = new AbortController();

  private constructor(
    private readonly session: DaemonSession,
    private readonly handle: string,
  ) {
    super({ allowHalfOpen: true });
  }

  /** Opens a daemon connection and a tunnel to `port`; fails with `PORT_UNREACHABLE` when nothing listens there. */
  static async open(
    sandboxes: SandboxService,
    id: string,
    caller: Caller,
    grant: ConnectionGrant,
    port: number,
    metrics?: Metrics,
    connectTimeoutMs = 5000,
  ): Promise<PortTunnel> {
    const session = await DaemonSession.open(sandboxes, id, caller, grant, metrics);
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
      tunnel = new PortTunnel(session, opened);
      tunnel.abort.signal.addEventListener('abort', () => abort.abort(), { once: true });
      for (const chunk of early) tunnel.onData(chunk);
      const t = tunnel;
      call.then(
        () => t.push(null),
        (err: unknown) => t.destroy(err instanceof Error ? err : new Error(String(err))),
      );
      return tunnel;
    } catch (err) {
      abort.abort();
      session.close();
      call.catch(() => undefined);
      throw err;
    }
  }

  private onData(chunk: Buffer): void {
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
    this.session.call('port.write', { handle: this.handle }, { payload: chunk }).then(
      () => callback(),
      (err: unknown) => callback(err instanceof Error ? err : new Error(String(err))),
    );
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.session.call('port.write', { handle: this.handle, end: true }).then(
      () => callback(),
      () => callback(), // the server already hung up: nothing left to half-close
    );
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.abort.abort();
    if (this.paused) this.session.resumeReading();
    this.session.close();
    callback(error);
  }
}
