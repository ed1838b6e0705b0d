import { Duplex } from 'node:stream';
import type { Channel } from './channel.js';
import { makeError } from './errors.js';
import type { RestClient } from './rest.js';

/** How long a raw port connection may stay open: a day. */
const PORT_MAX_MS = 24 * 60 * 60 * 1000;

/**
 * A TCP connection to a port inside the sandbox, as a Node `Duplex`: write to send to the server,
 * read (or pipe) what it answers. It travels over the sandbox's WebSocket, so it works with
 * `network: none`; `end()` half-closes, `destroy()` closes.
 */
export class PortConnection extends Duplex {
  private paused = false;
  constructor(
    private readonly connection: Channel,
    private readonly handle: string,
    private readonly hangUp: () => void,
  ) {
    super({ allowHalfOpen: true });
  }

  /** @internal */
  deliver(chunk: Buffer): void {
    if (!this.push(chunk) && !this.paused) {
      this.paused = true;
      this.connection.pauseReading();
    }
  }

  override _read(): void {
    if (this.paused) {
      this.paused = false;
      this.connection.resumeReading();
    }
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.connection.call('port.write', { handle: this.handle }, { payload: chunk }).then(
      () => callback(),
      (err: unknown) => callback(err as Error),
    );
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.connection.call('port.write', { handle: this.handle, end: true }).then(
      () => callback(),
      () => callback(),
    );
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    if (this.paused) this.connection.resumeReading();
    this.hangUp();
    callback(error);
  }
}

/** `sandbox.ports`: servers listening inside the sandbox, reached through Warren. */
export class Ports {
  constructor(
    private readonly connection: () => Channel,
    private readonly rest: RestClient,
    private readonly id: string,
  ) {}

  /**
   * A signed URL that opens `port` in a browser until it expires (default an hour): scoped to
   * this sandbox and port. The first request sets a cookie for the port's path, so the page's own
   * links and scripts work too. Anyone with the URL can reach the port until then. Where the
   * operator configured a wildcard `portDomain`, the URL is on the port's own origin
   * (`https://3000-<id>.<domain>/...`).
   *
   * @example
   * const url = await sandbox.ports.url(3000, { ttlSeconds: 600 }); // http://controller/v1/sandboxes/<id>/ports/3000/?warren_sig=...
   */
  async url(port: number, options: { ttlSeconds?: number; signal?: AbortSignal } = {}): Promise<string> {
    const body = options.ttlSeconds === undefined ? { port } : { port, ttlSeconds: options.ttlSeconds };
    const { path, url } = await this.rest.portUrl(this.id, body, options.signal);
    return url ?? new URL(path, this.rest.baseUrl).toString();
  }

  /**
   * Opens `port` to anyone who has its address, with no credential (`true`), or closes it again
   * (`false`); answers the sandbox's public ports. Needs the API key or the sandbox token (a
   * derived token cannot publish a port). A public port stays public until closed or the sandbox
   * is gone, across controller restarts.
   *
   * @example
   * await sandbox.ports.setPublic(3000, true); // sandbox.ports.baseUrl(3000) now works from any browser
   */
  async setPublic(port: number, isPublic: boolean, options: { signal?: AbortSignal } = {}): Promise<number[]> {
    return (await this.rest.setPortPublic(this.id, { port, public: isPublic }, options.signal)).publicPorts;
  }

  /**
   * The URL of `port` for a client that sends this sandbox's credential itself
   * (`Authorization: Bearer <token>`): no signature, nothing to expire.
   *
   * @example
   * await fetch(sandbox.ports.baseUrl(3000) + 'api', { headers: { authorization: `Bearer ${sandbox.token}` } });
   */
  baseUrl(port: number): string {
    return new URL(`/v1/sandboxes/${this.id}/ports/${port}/`, this.rest.baseUrl).toString();
  }

  /**
   * Opens a raw TCP connection to `port` on the sandbox's loopback (databases and other servers
   * that do not speak HTTP). Fails with `PortUnreachableError` when nothing listens there.
   *
   * @example
   * const socket = await sandbox.ports.connect(6379);
   * socket.write('PING\r\n');
   */
  async connect(port: number, options: { signal?: AbortSignal; connectTimeoutMs?: number } = {}): Promise<PortConnection> {
    const connection = this.connection();
    const abort = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, abort.signal]) : abort.signal;
    const opened: { socket?: PortConnection } = {};
    const early: Buffer[] = [];
    let connected: (handle: string) => void = () => undefined;
    const handle = new Promise<string>((resolve) => (connected = resolve));
    const call = connection.call(
      'port.open',
      { port, ...(options.connectTimeoutMs ? { connectTimeoutMs: options.connectTimeoutMs } : {}) },
      {
        signal,
        timeoutMs: PORT_MAX_MS,
        onEvent: (event, bytes) => {
          if (event.method !== 'port.open') return;
          if (event.event === 'connected') connected(event.data.handle);
          else if (event.event === 'data' && bytes) {
            if (opened.socket) opened.socket.deliver(bytes);
            else early.push(bytes);
          }
        },
      },
    );
    const tunnelHandle = await Promise.race([
      handle,
      call.then(() => Promise.reject(makeError('PORT_UNREACHABLE', `The connection to port ${port} closed at once.`))),
    ]);
    const s = new PortConnection(connection, tunnelHandle, () => abort.abort());
    opened.socket = s;
    for (const chunk of early) s.deliver(chunk);
    call.then(
      () => s.push(null),
      (err: unknown) => {
        if (!abort.signal.aborted) s.destroy(err as Error);
      },
    );
    return s;
  }
}
