import { constants as fsConstants } from 'node:fs';
import { mkdir, open, readFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { CodedError, EGRESS_STREAM_WINDOW, EGRESS_TRUST_DIR, type Params } from '@warren/protocol';
import type { CallContext, Handlers } from '../dispatch.js';

/** Where images keep their system trust bundle (Debian/Alpine, Fedora/RHEL, others); the first found is used. */
const SYSTEM_BUNDLES = ['/etc/ssl/certs/ca-certificates.crt', '/etc/pki/tls/certs/ca-bundle.crt', '/etc/ssl/cert.pem'];
const MAX_SYSTEM_BUNDLE_BYTES = 4 * 1024 * 1024;

interface RelayStream {
  socket: net.Socket;
  /** Bytes sent to the controller and not yet acknowledged. */
  unacked: number;
}

interface ActiveRelay {
  server: net.Server;
  streams: Map<number, RelayStream>;
}

/** Options of {@link EgressRelay}. */
export interface EgressRelayOptions {
  /** Where the CA and trust bundle are written; a root-owned folder the sandbox user cannot write. */
  trustDir?: string;
  /** The loopback address to listen on. */
  host?: string;
}

/**
 * The daemon's side of a sandbox's way out. While the controller's `egress.serve` call lasts, it
 * listens on the sandbox's loopback (where `HTTP_PROXY` points) and carries every connection to
 * the controller as events on that call; `egress.send` brings the gateway's bytes back. The relay
 * is not a boundary (the gateway treats every byte as hostile): it only moves bytes, with a
 * window per connection so a side that does not read makes the other wait, and a cap on
 * connections.
 *
 * @example
 * const relay = new EgressRelay({ trustDir: '/run/warren-egress' });
 * const handlers = { ...otherHandlers, ...relay.handlers() };
 */
export class EgressRelay {
  #active: ActiveRelay | undefined;
  #nextStream = 1;
  readonly #trustDir: string;
  readonly #host: string;

  constructor(options: EgressRelayOptions = {}) {
    this.#trustDir = options.trustDir ?? EGRESS_TRUST_DIR;
    this.#host = options.host ?? '127.0.0.1';
  }

  handlers(): Pick<Handlers, 'egress.serve' | 'egress.send'> {
    return {
      'egress.serve': async (params, ctx) => {
        await this.#serve(params, ctx);
        return { result: {} };
      },
      'egress.send': async (params, ctx) => {
        await this.#send(params, ctx.payload);
        return { result: {} };
      },
    };
  }

  async #serve(params: Params<'egress.serve'>, ctx: CallContext<'egress.serve'>): Promise<void> {
    if (this.#active) throw new CodedError('CONFLICT', 'The egress relay is already served on another connection; cancel that call first.');
    if (params.caPem !== undefined) await this.#writeTrust(params.caPem);
    const streams = new Map<number, RelayStream>();
    const server = net.createServer({ pauseOnConnect: true, allowHalfOpen: true }, (socket) => this.#accept(socket, streams, params.maxConnections, ctx));
    const active: ActiveRelay = { server, streams };
    this.#active = active;
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen({ host: this.#host, port: params.port, exclusive: true }, () => {
          server.off('error', reject);
          resolve();
        });
      });
      server.on('error', () => undefined);
      ctx.emit('listening', { port: (server.address() as net.AddressInfo).port });
      if (!ctx.signal.aborted) await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
    } finally {
      for (const stream of streams.values()) stream.socket.destroy();
      streams.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      if (this.#active === active) this.#active = undefined;
    }
  }

  #accept(socket: net.Socket, streams: Map<number, RelayStream>, max: number, ctx: CallContext<'egress.serve'>): void {
    socket.on('error', () => undefined);
    if (streams.size >= max || ctx.signal.aborted) return void socket.destroy();
    const id = this.#nextStream;
    this.#nextStream = this.#nextStream >= 2 ** 31 - 1 ? 1 : this.#nextStream + 1;
    const stream: RelayStream = { socket, unacked: 0 };
    streams.set(id, stream);
    ctx.emit('open', { stream: id });
    const resumeWhenDrained = () => {
      void ctx.drained().then(() => {
        if (streams.get(id) === stream && stream.unacked < EGRESS_STREAM_WINDOW) socket.resume();
      });
    };
    socket.on('data', (chunk: Buffer) => {
      // Never past the window: what does not fit goes back to be read once the controller acknowledges.
      const room = EGRESS_STREAM_WINDOW - stream.unacked;
      const part = chunk.length > room ? chunk.subarray(0, room) : chunk;
      if (part.length > 0) {
        stream.unacked += part.length;
        ctx.emit('data', { stream: id }, part);
      }
      if (part.length < chunk.length) {
        socket.pause();
        socket.unshift(chunk.subarray(part.length));
      } else if (stream.unacked >= EGRESS_STREAM_WINDOW) socket.pause();
      else if (ctx.congested()) {
        socket.pause();
        resumeWhenDrained();
      }
    });
    socket.once('end', () => {
      if (streams.get(id) === stream) ctx.emit('end', { stream: id });
    });
    socket.once('close', () => {
      if (streams.get(id) !== stream) return;
      streams.delete(id);
      ctx.emit('close', { stream: id });
    });
    socket.resume();
  }

  async #send(params: Params<'egress.send'>, payload: Buffer | undefined): Promise<void> {
    const stream = this.#active?.streams.get(params.stream);
    // Gone on the sandbox's side already (its close event is on its way): nothing to deliver.
    if (!stream) return;
    const { socket } = stream;
    if (params.ack !== undefined) {
      stream.unacked = Math.max(0, stream.unacked - params.ack);
      if (stream.unacked < EGRESS_STREAM_WINDOW && socket.isPaused()) socket.resume();
    }
    if (params.close === true) {
      // The gateway side is gone: what was already written still goes out, then the socket closes.
      socket.end();
      socket.once('finish', () => socket.destroy());
      setTimeout(() => socket.destroy(), 10_000).unref();
      return;
    }
    if (payload !== undefined && payload.length > 0 && socket.writable) {
      await new Promise<void>((resolve) => socket.write(payload, () => resolve()));
    }
    if (params.end === true) socket.end();
  }

  /**
   * Writes the CA as `ca.pem` (for `NODE_EXTRA_CA_CERTS`) and the image's system roots plus the
   * CA as `bundle.pem` (for OpenSSL, curl, Python, git, pip), without following links.
   */
  async #writeTrust(caPem: string): Promise<void> {
    await mkdir(this.#trustDir, { recursive: true, mode: 0o755 });
    let system = '';
    for (const file of SYSTEM_BUNDLES) {
      try {
        const text = await readFile(file, 'utf8');
        if (text.length <= MAX_SYSTEM_BUNDLE_BYTES) {
          system = text;
          break;
        }
      } catch {
        // not in this image
      }
    }
    const ca = caPem.endsWith('\n') ? caPem : `${caPem}\n`;
    await writeNoFollow(path.join(this.#trustDir, 'ca.pem'), ca);
    await writeNoFollow(path.join(this.#trustDir, 'bundle.pem'), `${system}${system.endsWith('\n') || system === '' ? '' : '\n'}${ca}`);
  }
}

async function writeNoFollow(file: string, text: string): Promise<void> {
  const handle = await open(file, fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_TRUNC | fsConstants.O_NOFOLLOW, 0o644);
  try {
    await handle.writeFile(text);
    await handle.chmod(0o644);
  } finally {
    await handle.close();
  }
}
