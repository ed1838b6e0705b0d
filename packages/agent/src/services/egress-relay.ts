import dgram from 'node:dgram';
import { constants as fsConstants } from 'node:fs';
import { chmod, chown, lstat, mkdir, open, readFile, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { CodedError, EGRESS_STREAM_WINDOW, EGRESS_TRUST_DIR, type Params } from '@warren/protocol';
import type { CallContext, Handlers } from '../dispatch.js';

/** Where images keep their system trust bundle (Debian/Alpine, Fedora/RHEL, others); the first found is used. */
const SYSTEM_BUNDLES = ['/etc/ssl/certs/ca-certificates.crt', '/etc/pki/tls/certs/ca-bundle.crt', '/etc/ssl/cert.pem'];
const MAX_SYSTEM_BUNDLE_BYTES = 4 * 1024 * 1024;

/** The largest DNS message the relay takes from the sandbox (UDP or TCP); bigger ones are dropped. */
const MAX_DNS_MESSAGE = 4096;
/** How long one UDP DNS query may wait for the gateway's answer before its slot is given back. */
const DNS_QUERY_TIMEOUT_MS = 5000;

type StreamKind = 'proxy' | 'http' | 'tls' | 'dns';

interface RelayStream {
  socket?: net.Socket;
  /** A UDP DNS query: where its answer goes, and the answer's bytes so far (length-prefixed). */
  udp?: { socket: dgram.Socket; port: number; address: string; answer: Buffer; timer: NodeJS.Timeout };
  /** Bytes sent to the controller and not yet acknowledged. */
  unacked: number;
}

interface ActiveRelay {
  servers: (net.Server | dgram.Socket)[];
  streams: Map<number, RelayStream>;
  ctx: CallContext<'egress.serve'>;
}

/** Options of {@link EgressRelay}. */
export interface EgressRelayOptions {
  /** Where the CA and trust bundle are written; a root-owned folder the sandbox user cannot write. */
  trustDir?: string;
  /** The loopback address to listen on. */
  host?: string;
  /** The resolver file the transparent path rewrites (`/etc/resolv.conf`). */
  resolvConf?: string;
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
  readonly #resolvConf: string;

  constructor(options: EgressRelayOptions = {}) {
    this.#trustDir = options.trustDir ?? EGRESS_TRUST_DIR;
    this.#host = options.host ?? '127.0.0.1';
    this.#resolvConf = options.resolvConf ?? '/etc/resolv.conf';
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
    const max = params.maxConnections;
    const tcp = (kind: StreamKind) =>
      net.createServer({ pauseOnConnect: true, allowHalfOpen: true }, (socket) => this.#accept(socket, streams, max, ctx, kind));
    const server = tcp('proxy');
    const active: ActiveRelay = { servers: [server], streams, ctx };
    this.#active = active;
    try {
      const port = await listenTcp(server, this.#host, params.port);
      let transparent: { dns: number; http: number; tls: number } | undefined;
      if (params.transparent) {
        const { address } = params.transparent;
        const ports = params.transparent.ports ?? { dns: 53, http: 80, tls: 443 };
        const http = tcp('http');
        const tlsServer = tcp('tls');
        const dnsTcp = tcp('dns');
        const dnsUdp = dgram.createSocket('udp4');
        active.servers.push(http, tlsServer, dnsTcp, dnsUdp);
        dnsUdp.on('message', (message, remote) => this.#onDnsDatagram(dnsUdp, message, remote, streams, max, ctx));
        const dns = await bindUdp(dnsUdp, address, ports.dns);
        transparent = { dns, http: await listenTcp(http, address, ports.http), tls: await listenTcp(tlsServer, address, ports.tls) };
        await listenTcp(dnsTcp, address, dns);
        if (params.transparent.resolvConf) await this.#pointResolver(address);
      }
      ctx.emit('listening', transparent ? { port, transparent } : { port });
      if (!ctx.signal.aborted) await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
    } finally {
      for (const stream of streams.values()) closeStream(stream);
      streams.clear();
      await Promise.all(
        active.servers.map((s) => new Promise<void>((resolve) => (s instanceof net.Server ? s.close(() => resolve()) : s.close(() => resolve())))),
      );
      if (this.#active === active) this.#active = undefined;
    }
  }

  /**
   * Points the sandbox's resolver at the relay. Only where the sandbox has no interface but
   * loopback (a container with network `none`): a daemon that shares a host's network never
   * touches its resolver. The file is the engine's bind-mounted one; links are not followed.
   */
  async #pointResolver(address: string): Promise<void> {
    const interfaces = Object.keys(os.networkInterfaces());
    if (interfaces.some((name) => name !== 'lo')) return;
    try {
      const handle = await open(this.#resolvConf, fsConstants.O_WRONLY | fsConstants.O_TRUNC | fsConstants.O_NOFOLLOW);
      try {
        await handle.writeFile(
          `# Written by Warren's egress relay: names are answered by the egress gateway.\nnameserver ${address}\noptions attempts:2 timeout:3\n`,
        );
      } finally {
        await handle.close();
      }
    } catch {
      // Not writable here (not root, a read-only file): the proxy variables still work, DNS does not.
    }
  }

  /**
   * One UDP DNS query becomes one relayed connection of kind `dns`: the query goes with a
   * two-byte length in front (as DNS on TCP), the first whole answer goes back as a datagram,
   * and the connection closes. Oversized or tiny datagrams and queries past the connection cap
   * are dropped, so a flood holds at most `maxConnections` slots, each for at most 5 s.
   */
  #onDnsDatagram(
    socket: dgram.Socket,
    message: Buffer,
    remote: dgram.RemoteInfo,
    streams: Map<number, RelayStream>,
    max: number,
    ctx: CallContext<'egress.serve'>,
  ): void {
    if (message.length < 12 || message.length > MAX_DNS_MESSAGE || streams.size >= max || ctx.signal.aborted) return;
    const id = this.#takeId();
    const timer = setTimeout(() => finishStream(streams, id, stream, ctx), DNS_QUERY_TIMEOUT_MS);
    timer.unref();
    const stream: RelayStream = { unacked: 0, udp: { socket, port: remote.port, address: remote.address, answer: Buffer.alloc(0), timer } };
    streams.set(id, stream);
    ctx.emit('open', { stream: id, kind: 'dns' });
    const length = Buffer.alloc(2);
    length.writeUInt16BE(message.length);
    ctx.emit('data', { stream: id }, Buffer.concat([length, message]));
    ctx.emit('end', { stream: id });
  }

  #takeId(): number {
    const id = this.#nextStream;
    this.#nextStream = this.#nextStream >= 2 ** 31 - 1 ? 1 : this.#nextStream + 1;
    return id;
  }

  #accept(socket: net.Socket, streams: Map<number, RelayStream>, max: number, ctx: CallContext<'egress.serve'>, kind: StreamKind): void {
    socket.on('error', () => undefined);
    if (streams.size >= max || ctx.signal.aborted) return void socket.destroy();
    const id = this.#takeId();
    const stream: RelayStream = { socket, unacked: 0 };
    streams.set(id, stream);
    ctx.emit('open', kind === 'proxy' ? { stream: id } : { stream: id, kind });
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
    if (stream.udp) return this.#sendDatagram(params, stream, payload);
    const socket = stream.socket!;
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

  /** The gateway's answer to a UDP query: the first whole length-prefixed message goes back as a datagram; then the query is done. */
  #sendDatagram(params: Params<'egress.send'>, stream: RelayStream, payload: Buffer | undefined): void {
    const udp = stream.udp!;
    const { streams, ctx } = this.#active!;
    const id = params.stream;
    if (payload !== undefined && payload.length > 0 && udp.answer.length + payload.length <= 2 + 65535) udp.answer = Buffer.concat([udp.answer, payload]);
    const length = udp.answer.length >= 2 ? udp.answer.readUInt16BE(0) : -1;
    const whole = length >= 0 && udp.answer.length >= 2 + length;
    if (whole) udp.socket.send(udp.answer.subarray(2, 2 + length), udp.port, udp.address, () => undefined);
    if (whole || params.end === true || params.close === true) {
      finishStream(streams, id, stream, ctx);
    }
  }

  /**
   * Writes the CA as `ca.pem` (for `NODE_EXTRA_CA_CERTS`) and the image's system roots plus the
   * CA as `bundle.pem` (for OpenSSL, curl, Python, git, pip), without following links.
   */
  async #writeTrust(caPem: string): Promise<void> {
    await mkdir(this.#trustDir, { recursive: true, mode: 0o755 });
    // A folder the engine made writable by all (a Kubernetes emptyDir is 0777) becomes the daemon's
    // own first, and files sandbox code may have put there go, so only the daemon writes the trust.
    const info = await lstat(this.#trustDir);
    if (!info.isDirectory()) throw new CodedError('INTERNAL', `${this.#trustDir} is not a folder`);
    const uid = process.getuid?.();
    if (uid !== undefined && (info.uid !== uid || (info.mode & 0o022) !== 0)) {
      if (uid === 0) await chown(this.#trustDir, 0, 0);
      await chmod(this.#trustDir, 0o755);
      for (const name of ['ca.pem', 'bundle.pem']) await rm(path.join(this.#trustDir, name), { force: true, recursive: true });
    }
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

function listenTcp(server: net.Server, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port, exclusive: true }, () => {
      server.off('error', reject);
      server.on('error', () => undefined);
      resolve((server.address() as net.AddressInfo).port);
    });
  });
}

function bindUdp(socket: dgram.Socket, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    socket.once('error', reject);
    socket.bind({ address: host, port, exclusive: true }, () => {
      socket.off('error', reject);
      socket.on('error', () => undefined);
      resolve(socket.address().port);
    });
  });
}

function closeStream(stream: RelayStream): void {
  stream.socket?.destroy();
  if (stream.udp) clearTimeout(stream.udp.timer);
}

/** Ends a UDP query's connection on the relay's side (its answer came, or its time ran out). */
function finishStream(streams: Map<number, RelayStream>, id: number, stream: RelayStream, ctx: CallContext<'egress.serve'>): void {
  if (streams.get(id) !== stream) return;
  closeStream(stream);
  streams.delete(id);
  ctx.emit('close', { stream: id });
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
