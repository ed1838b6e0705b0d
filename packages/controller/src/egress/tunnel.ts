import net from 'node:net';
import { CodedError, decodeFrame, EGRESS_STREAM_WINDOW, encodeFrame, parseEvent, PROTOCOL_MINOR, PROTOCOL_VERSION, type ParamsIn } from '@warren/protocol';
import type { WebSocket } from 'ws';
import { openAgentSocket } from '../agent-link.js';
import type { DaemonEndpoint } from '../provider.js';

/** What a relayed connection is: to the proxy port, or the transparent path's :80, :443 or DNS. */
export type EgressStreamKind = 'proxy' | 'http' | 'tls' | 'dns';

/** Options of {@link EgressTunnel.open}. */
export interface EgressTunnelOptions {
  endpoint: DaemonEndpoint;
  secret: string;
  /**
   * Opens the gateway side of one relayed connection (the sandbox's own gateway listener for
   * that kind: the proxy for `proxy` and `http`, the SNI listener for `tls`, the DNS stream for `dns`).
   */
  connectGateway: (kind: EgressStreamKind) => net.Socket;
  /** Also relay the transparent path (DNS, :80, :443) on this loopback address inside the sandbox. */
  transparent?: ParamsIn<'egress.serve'>['transparent'];
  /** The loopback port the daemon listens on inside the sandbox (0: any, for tests). */
  port?: number;
  /** Connections held at once; the daemon closes more, and the tunnel closes any it opens past this. */
  maxConnections: number;
  /** The interception CA's certificate for the sandbox's trust stores. */
  caPem?: string | undefined;
  /** How long to wait for the daemon to listen. */
  timeoutMs?: number;
}

interface Stream {
  gateway: net.Socket;
  /** Bytes sent to the daemon whose `egress.send` has not been answered yet. */
  inflight: number;
  /** Bytes the daemon sent that are not yet written to the gateway. */
  received: number;
  /** Bytes written to the gateway and not yet acknowledged to the daemon. */
  toAck: number;
}

const SERVE_ID = 1;
/** How often the tunnel pings the daemon (which closes a channel silent for 30 s). */
const TUNNEL_PING_MS = 10_000;

/**
 * The controller's end of a sandbox's egress relay: one long-lived `egress.serve` call over the
 * daemon's channel (unix socket or the engine's exec stream alike), on which the daemon reports
 * each connection a sandbox process makes to its loopback relay and the bytes it sends; the
 * tunnel opens one gateway connection per relayed connection and sends the gateway's bytes back
 * with `egress.send`. Everything the daemon sends is checked: an event off-contract, data for a
 * connection over its window, or more connections than allowed closes the connection concerned
 * or the whole tunnel, never the controller.
 *
 * @example
 * const tunnel = await EgressTunnel.open({ endpoint, secret, connectGateway: () => net.connect(socketPath), maxConnections: 64 });
 * tunnel.closed.then(() => console.log('relay gone'));
 */
export class EgressTunnel {
  readonly #ws: WebSocket;
  #pinger: NodeJS.Timeout | undefined;
  readonly #streams = new Map<number, Stream>();
  readonly #pendingSends = new Map<number, { stream: number; bytes: number }>();
  readonly #ackQueue = new Set<number>();
  readonly #options: EgressTunnelOptions;
  #nextId = SERVE_ID + 1;
  #closed = false;
  #resolveClosed!: (reason: string) => void;
  /** Resolves with why, once the tunnel is closed (by {@link close}, the daemon or a broken channel). */
  readonly closed: Promise<string>;
  /** The port the daemon's relay listens on inside the sandbox. */
  port = 0;
  /** Where the transparent path listens inside the sandbox, when it was asked for. */
  transparentPorts: { dns: number; http: number; tls: number } | undefined;

  private constructor(ws: WebSocket, options: EgressTunnelOptions) {
    this.#ws = ws;
    this.#options = options;
    this.closed = new Promise((resolve) => (this.#resolveClosed = resolve));
  }

  /** Connects to the daemon and starts its relay; resolves once it listens. */
  static async open(options: EgressTunnelOptions): Promise<EgressTunnel> {
    const timeoutMs = options.timeoutMs ?? 10_000;
    const ws = await openAgentSocket(options.endpoint, options.secret, timeoutMs);
    const tunnel = new EgressTunnel(ws, options);
    await tunnel.#start(timeoutMs);
    // The daemon closes a channel whose pings stop (30 s): a controller whose host vanished
    // without closing its connections frees the relay for a replica that is alive.
    tunnel.#pinger = setInterval(() => {
      if (ws.readyState === ws.OPEN) ws.ping();
    }, TUNNEL_PING_MS);
    tunnel.#pinger.unref();
    return tunnel;
  }

  /** How many relayed connections are open. */
  get connections(): number {
    return this.#streams.size;
  }

  /** Closes the relay: the daemon stops listening and every relayed connection is closed. */
  close(reason = 'closed'): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const stream of this.#streams.values()) stream.gateway.destroy();
    this.#streams.clear();
    clearInterval(this.#pinger);
    this.#ws.removeAllListeners('message');
    this.#ws.on('error', () => undefined);
    this.#ws.terminate();
    this.#resolveClosed(reason);
  }

  #start(timeoutMs: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => fail(new CodedError('SANDBOX_NOT_READY', `The sandbox daemon did not start its egress relay within ${timeoutMs} ms.`)),
        timeoutMs,
      );
      const fail = (err: Error) => {
        clearTimeout(timer);
        this.close(err.message);
        reject(err);
      };
      let listening = false;
      this.#ws.on('message', (data: Buffer, isBinary: boolean) => {
        try {
          if (!isBinary) throw new CodedError('INVALID_FRAME', 'a text frame on the egress channel');
          const onListening = () => {
            listening = true;
            clearTimeout(timer);
            resolve();
          };
          this.#onFrame(data, onListening);
        } catch (err) {
          const error = err instanceof Error ? err : new Error(String(err));
          if (!listening) fail(error);
          else this.close(`the daemon sent a bad frame: ${error.message}`);
        }
      });
      this.#ws.once('close', () =>
        listening
          ? this.close('the daemon closed the egress channel')
          : fail(new CodedError('SANDBOX_NOT_READY', 'The sandbox daemon closed the egress channel before its relay listened.')),
      );
      this.#ws.on('error', () => undefined);
      this.#ws.send(encodeFrame({ type: 'hello', protocolVersion: PROTOCOL_VERSION, protocolMinor: PROTOCOL_MINOR, client: 'warren-controller-egress' }));
    });
  }

  #onFrame(data: Buffer, onListening: () => void): void {
    const { header, payload } = decodeFrame(data);
    switch (header.type) {
      case 'welcome': {
        const params: ParamsIn<'egress.serve'> = { port: this.#options.port ?? undefined, maxConnections: this.#options.maxConnections };
        if (this.#options.caPem !== undefined) params.caPem = this.#options.caPem;
        if (this.#options.transparent !== undefined) params.transparent = this.#options.transparent;
        this.#ws.send(encodeFrame({ type: 'req', id: SERVE_ID, method: 'egress.serve', params }));
        return;
      }
      case 'evt': {
        if (header.id !== SERVE_ID) return;
        const event = parseEvent('egress.serve', header.event, header.data);
        if (event === undefined || event.method !== 'egress.serve') return;
        switch (event.event) {
          case 'listening':
            this.port = event.data.port;
            this.transparentPorts = event.data.transparent;
            return onListening();
          case 'open':
            return this.#onOpen(event.data.stream, event.data.kind ?? 'proxy');
          case 'data':
            return this.#onData(event.data.stream, payload ?? Buffer.alloc(0));
          case 'end':
            return void this.#streams.get(event.data.stream)?.gateway.end();
          case 'close': {
            const stream = this.#streams.get(event.data.stream);
            this.#streams.delete(event.data.stream);
            stream?.gateway.destroy();
            return;
          }
          default:
            return;
        }
      }
      case 'res':
      case 'err': {
        if (header.id === SERVE_ID) {
          if (header.type === 'err') throw new CodedError(header.error.code, `The daemon refused its egress relay: ${header.error.message}`);
          return this.close('the daemon ended its egress relay');
        }
        const sent = typeof header.id === 'number' ? this.#pendingSends.get(header.id) : undefined;
        if (!sent) return;
        this.#pendingSends.delete(header.id as number);
        const stream = this.#streams.get(sent.stream);
        if (!stream) return;
        stream.inflight -= sent.bytes;
        if (stream.inflight < EGRESS_STREAM_WINDOW && stream.gateway.isPaused()) stream.gateway.resume();
        return;
      }
      default:
        return;
    }
  }

  #onOpen(id: number, kind: EgressStreamKind): void {
    if (this.#streams.has(id) || this.#streams.size >= this.#options.maxConnections || (kind !== 'proxy' && this.#options.transparent === undefined)) {
      // A reused id or one connection too many: the daemon is not keeping its side; close that one.
      this.#send(id, { close: true });
      return;
    }
    const gateway = this.#options.connectGateway(kind);
    const stream: Stream = { gateway, inflight: 0, received: 0, toAck: 0 };
    this.#streams.set(id, stream);
    gateway.on('error', () => undefined);
    gateway.on('data', (chunk: Buffer) => {
      stream.inflight += chunk.length;
      this.#send(id, {}, chunk);
      if (stream.inflight >= EGRESS_STREAM_WINDOW) gateway.pause();
    });
    gateway.once('end', () => {
      if (this.#streams.get(id) === stream) this.#send(id, { end: true });
    });
    gateway.once('close', () => {
      if (this.#streams.get(id) !== stream) return;
      this.#streams.delete(id);
      this.#send(id, { close: true });
    });
  }

  #onData(id: number, payload: Buffer): void {
    const stream = this.#streams.get(id);
    if (!stream) return; // closed here already; the daemon learns from our close
    if (stream.received + payload.length > EGRESS_STREAM_WINDOW) {
      // Past the window the daemon agreed to: it is not keeping its side, so this connection ends.
      this.#streams.delete(id);
      stream.gateway.destroy();
      this.#send(id, { close: true });
      return;
    }
    stream.received += payload.length;
    stream.gateway.write(payload, () => {
      stream.received -= payload.length;
      stream.toAck += payload.length;
      this.#queueAck(id);
    });
  }

  /** Acknowledges what was passed on, once per turn of the event loop per connection. */
  #queueAck(id: number): void {
    if (this.#ackQueue.size === 0) setImmediate(() => this.#flushAcks());
    this.#ackQueue.add(id);
  }

  #flushAcks(): void {
    for (const id of this.#ackQueue) {
      const stream = this.#streams.get(id);
      if (stream && stream.toAck > 0) this.#send(id, {});
    }
    this.#ackQueue.clear();
  }

  #send(stream: number, params: { end?: boolean; close?: boolean }, payload?: Buffer): void {
    if (this.#closed) return;
    const state = this.#streams.get(stream);
    const ack = state && state.toAck > 0 ? Math.min(state.toAck, EGRESS_STREAM_WINDOW) : undefined;
    if (state && ack !== undefined) state.toAck -= ack;
    const id = this.#nextId++;
    if (payload !== undefined && payload.length > 0) this.#pendingSends.set(id, { stream, bytes: payload.length });
    const body: ParamsIn<'egress.send'> = { stream, ...params, ...(ack === undefined ? {} : { ack }) };
    this.#ws.send(encodeFrame({ type: 'req', id, method: 'egress.send', params: body }, payload));
  }
}
