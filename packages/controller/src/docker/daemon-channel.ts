import type { Duplex as DuplexType } from 'node:stream';
import { Duplex } from 'node:stream';
import type Docker from 'dockerode';
import { bridgeCommand } from '../runtime.js';
import { SOCKET_DIR_IN_SANDBOX } from '../sandbox-layout.js';
import { rethrow } from './engine-errors.js';

/**
 * How the controller reaches a daemon: `socket`, a unix socket in a host folder bound into the
 * sandbox (the engine shares this machine's file system); `exec`, a stream the engine's API opens
 * into the sandbox (`docker exec` of a small bridge to the daemon's socket), for any engine.
 */
export type DaemonChannel = 'socket' | 'exec';

/**
 * The daemon channel for `auto`: `socket` only where the engine certainly shares this process's
 * folders (a local unix socket, not an engine in a VM such as Docker Desktop, which passes no
 * unix sockets through its file sharing, and a folder of the controller's that a container of
 * the engine's was seen to read: a controller in a container with the engine's socket fails
 * that); `exec` everywhere else.
 *
 * @example
 * chooseChannel('auto', { localEngine: true, engineInVm: true, sharesFolders: true }); // 'exec'
 */
export function chooseChannel(wanted: 'auto' | DaemonChannel, where: { localEngine: boolean; engineInVm: boolean; sharesFolders: boolean }): DaemonChannel {
  if (wanted !== 'auto') return wanted;
  return where.localEngine && !where.engineInVm && where.sharesFolders ? 'socket' : 'exec';
}

/**
 * A byte stream to the daemon's socket through the engine's API: `docker exec` (as the
 * container's root, which alone may enter the daemon's folder) of a bridge that copies stdin to
 * the socket and the socket to stdout. The engine frames stdout and stderr on one connection;
 * they are taken apart here, and the bridge's stderr (its errors) is dropped.
 */
export async function openExecStream(docker: Docker, agentId: string): Promise<DuplexType> {
  const container = docker.getContainer(`warren-${agentId}`);
  const exec = await container
    .exec({ Cmd: bridgeCommand(`${SOCKET_DIR_IN_SANDBOX}/agent.sock`), AttachStdin: true, AttachStdout: true, AttachStderr: true, Tty: false, User: '0:0' })
    .catch((e: unknown) => rethrow(e, `reach the daemon of sandbox ${agentId} through the engine`));
  const raw = await exec.start({ hijack: true, stdin: true }).catch((e: unknown): never => rethrow(e, `reach the daemon of sandbox ${agentId}`));
  return new ExecStream(raw);
}

/**
 * The engine's attach stream of an exec as a plain byte stream: stdout's frames (the engine
 * multiplexes stdout and stderr with 8-byte headers) are unwrapped with backpressure, so a slow
 * reader pauses the engine's connection instead of piling bytes up here; stderr (the bridge's
 * errors) is dropped; writes go to the exec's stdin. Closing ends stdin first: the engine passes
 * the EOF to the bridge, which ends its socket, so the daemon learns the connection is gone (the
 * engine may keep an exec running after its attach connection is dropped).
 */
class ExecStream extends Duplex {
  private pending: Buffer = Buffer.alloc(0);

  constructor(private readonly raw: Duplex) {
    super({ allowHalfOpen: false });
    raw.on('data', (chunk: Buffer) => this.unwrap(chunk));
    raw.once('end', () => this.push(null));
    raw.once('close', () => this.push(null));
    raw.on('error', (err) => this.destroy(err));
  }

  private unwrap(chunk: Buffer): void {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    let wantsMore = true;
    while (this.pending.length >= 8) {
      const size = this.pending.readUInt32BE(4);
      if (this.pending.length < 8 + size) break;
      const stream = this.pending[0];
      const payload = this.pending.subarray(8, 8 + size);
      this.pending = this.pending.subarray(8 + size);
      if (stream === 1 && !this.push(payload)) wantsMore = false;
    }
    if (!wantsMore) this.raw.pause();
  }

  override _read(): void {
    this.raw.resume();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (error?: Error | null) => void): void {
    this.raw.write(chunk, done);
  }

  override _final(done: (error?: Error | null) => void): void {
    this.raw.end();
    done();
  }

  override _destroy(error: Error | null, done: (error?: Error | null) => void): void {
    this.raw.end();
    const timer = setTimeout(() => this.raw.destroy(), 2_000).unref();
    this.raw.once('close', () => clearTimeout(timer));
    done(error);
  }

  // What http and ws ask of a socket; a stream through the engine has no such knobs.
  setTimeout(): this {
    return this;
  }
  setNoDelay(): this {
    return this;
  }
  setKeepAlive(): this {
    return this;
  }
}
