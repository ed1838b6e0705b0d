import net from 'node:net';
import { CodedError, EGRESS_STREAM_WINDOW, WireClient, type ParamsIn, type ParsedEvent } from '@warren/protocol';
import { wsSocket } from '@warren/protocol/node';
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
  #client: WireClient | undefined;
  #pinger: NodeJS.Timeout | undefined;
  readonly #streams = new Map<number, Stream>();
  readonly #ackQueue = new Set<number>();
  readonly #options: EgressTunnelOptions;
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
    // The `egress.send` calls still in flight fail here; nothing waits for them any more.
    this.#client?.close();
  }

  async #start(timeoutMs: number): Promise<void> {
    let listening = false;
    let fail: (err: Error) => void = () => undefined;
    const failed = new Promise<never>((_, reject) => {
      fail = (err: Error) => {
        clearTimeout(timer);
        this.close(err.message);
        reject(err);
      };
    });
    // Whatever the daemon sends off-contract ends the tunnel (or its start), never the controller.
    const broken = (err: Error) => (listening ? this.close(`the daemon sent a bad frame: ${err.message}`) : fail(err));
    const timer = setTimeout(
      () => fail(new CodedError('SANDBOX_NOT_READY', `The sandbox daemon did not start its egress relay within ${timeoutMs} ms.`)),
      timeoutMs,
    );
    const notListening = () => new CodedError('SANDBOX_NOT_READY', 'The sandbox daemon closed the egress channel before its relay listened.');
    const client = await Promise.race([
      WireClient.connect(wsSocket(this.#ws, { batch: false }), {
        client: 'warren-controller-egress',
        handshakeTimeoutMs: timeoutMs,
        // egress.send carries every relayed byte: its params are built here, its results only counted.
        checkParams: false,
        checkResults: false,
        handshakeClosedError: notListening,
        onBadFrame: broken,
      }),
      failed,
    ]).catch((err: unknown) => {
      fail(err as Error);
      throw err;
    });
    this.#client = client;
    client.onClose(() => (listening ? this.close('the daemon closed the egress channel') : fail(notListening())));
    const params: ParamsIn<'egress.serve'> = { port: this.#options.port ?? undefined, maxConnections: this.#options.maxConnections };
    if (this.#options.caPem !== undefined) params.caPem = this.#options.caPem;
    if (this.#options.transparent !== undefined) params.transparent = this.#options.transparent;
    const started = new Promise<void>((resolve) => {
      client
        .call('egress.serve', params, {
          onEvent: (raw, payload) => {
            // The client checks events against the registry, so each is a parsed one.
            const event = raw as ParsedEvent;
            if (event.method !== 'egress.serve') return;
            if (event.event === 'listening' && !listening) {
              listening = true;
              clearTimeout(timer);
              this.port = event.data.port;
              this.transparentPorts = event.data.transparent;
              return resolve();
            }
            this.#onEvent(event, payload);
          },
        })
        .then(
          () => this.close('the daemon ended its egress relay'),
          (err: unknown) => {
            const error = err as Error;
            if (this.#closed) return;
            if (err instanceof CodedError && err.code !== 'INVALID_FRAME' && !listening)
              return fail(new CodedError(err.code, `The daemon refused its egress relay: ${err.message}`));
            broken(error);
          },
        );
    });
    await Promise.race([started, failed]);
  }

  #onEvent(event: ParsedEvent, payload: Buffer | undefined): void {
    if (event.method !== 'egress.serve') return;
    switch (event.event) {
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
    if (this.#closed || !this.#client) return;
    const state = this.#streams.get(stream);
    const ack = state && state.toAck > 0 ? Math.min(state.toAck, EGRESS_STREAM_WINDOW) : undefined;
    if (state && ack !== undefined) state.toAck -= ack;
    const body: ParamsIn<'egress.send'> = { stream, ...params, ...(ack === undefined ? {} : { ack }) };
    const sent = this.#client.call('egress.send', body, { payload });
    const bytes = payload?.length ?? 0;
    // Answered or refused alike, the bytes have left the daemon's window: the gateway may send more.
    const settled = () => {
      if (bytes === 0) return;
      const now = this.#streams.get(stream);
      if (now !== state || !now) return;
      now.inflight -= bytes;
      if (now.inflight < EGRESS_STREAM_WINDOW && now.gateway.isPaused()) now.gateway.resume();
    };
    sent.then(settled, settled);
  }
}
