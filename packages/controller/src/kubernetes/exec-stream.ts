import { Duplex, PassThrough, Writable } from 'node:stream';
import type { Exec, PortForward } from '@kubernetes/client-node';
import type WebSocket from 'ws';

/**
 * A byte stream to a process in a pod through the API server's exec (WebSocket, channel protocol
 * v4), or to a pod's port through its port-forward: writes go to the process's stdin (the port),
 * its stdout (the port's answer) comes out, an exec's stderr is dropped. A slow
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
  static open(exec: Exec, namespace: string, pod: string, container: string, command: string[]): Promise<PodExecStream> {
    return PodExecStream.connect((stdout, stderr, stdin) => exec.exec(namespace, pod, container, command, stdout, stderr, stdin, false), false);
  }

  /**
   * Opens a byte stream to `port` of `pod` through the API server's port-forward (`pods/portforward`
   * get and create). What the kubelet says on the error channel (nothing listens there, say) ends
   * the stream with that text.
   */
  static portForward(forward: PortForward, namespace: string, pod: string, port: number): Promise<PodExecStream> {
    // With no retry count, client-node resolves with the WebSocket itself.
    return PodExecStream.connect((output, err, input) => forward.portForward(namespace, pod, [port], output, err, input) as Promise<WebSocket>, true);
  }

  private static async connect(
    start: (stdout: Writable, stderr: Writable, stdin: PassThrough) => Promise<WebSocket>,
    stderrIsError: boolean,
  ): Promise<PodExecStream> {
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
    const stderr = new Writable({
      write: (chunk: Buffer, _encoding, done) => {
        if (stderrIsError && chunk.length > 0) stream.destroy(new Error(`port-forward: ${chunk.toString('utf8', 0, 300)}`));
        done();
      },
    });
    // The kubelet's refusal can arrive in the same packet as the upgrade, so the stream may end
    // with an error before its opener has listened: kept from crashing the process here; the
    // opener sees the stream destroyed (and its `close`).
    stream.on('error', () => undefined);
    const ws = await start(stdout, stderr, stream.stdin);
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
