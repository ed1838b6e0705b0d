import { Duplex, PassThrough, Writable } from 'node:stream';
import type { Exec } from '@kubernetes/client-node';
import type WebSocket from 'ws';

/**
 * A byte stream to a process in a pod through the API server's exec (WebSocket, channel protocol
 * v4): writes go to the process's stdin, its stdout comes out, its stderr is dropped. A slow
 * reader pauses the WebSocket, so a daemon that writes fast cannot pile bytes up in the
 * controller. Closing ends stdin, which client-node turns into closing the WebSocket; the API
 * server then ends the process's stdin, so the bridge in the pod ends too.
 */
export class PodExecStream extends Duplex {
  private ws: WebSocket | undefined;
  private readonly stdin = new PassThrough();
  private paused = false;

  private constructor() {
    super({ allowHalfOpen: false });
  }

  /** Opens `command` in `container` of `pod` and resolves once the API server accepted the exec. */
  static async open(exec: Exec, namespace: string, pod: string, container: string, command: string[]): Promise<PodExecStream> {
    const stream = new PodExecStream();
    const stdout = new Writable({
      write: (chunk: Buffer, _encoding, done) => {
        if (!stream.push(chunk)) stream.pause_();
        done();
      },
      final: (done) => {
        stream.push(null);
        done();
      },
    });
    const stderr = new Writable({ write: (_chunk, _encoding, done) => done() });
    const ws = await exec.exec(namespace, pod, container, command, stdout, stderr, stream.stdin, false);
    stream.ws = ws;
    if (stream.paused) ws.pause();
    ws.once('close', () => stream.push(null));
    ws.on('error', (err) => stream.destroy(err));
    return stream;
  }

  private pause_(): void {
    this.paused = true;
    this.ws?.pause();
  }

  override _read(): void {
    if (!this.paused) return;
    this.paused = false;
    this.ws?.resume();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (error?: Error | null) => void): void {
    this.stdin.write(chunk, done);
  }

  override _final(done: (error?: Error | null) => void): void {
    this.stdin.end();
    done();
  }

  override _destroy(error: Error | null, done: (error?: Error | null) => void): void {
    this.stdin.end();
    const ws = this.ws;
    if (ws) {
      const timer = setTimeout(() => ws.terminate(), 2_000).unref();
      ws.once('close', () => clearTimeout(timer));
    }
    done(error);
  }

  // What http and ws ask of a socket; a stream through the API server has no such knobs.
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
