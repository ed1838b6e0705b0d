import dgram from 'node:dgram';
import http from 'node:http';
import https from 'node:https';
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import net from 'node:net';
import { Duplex } from 'node:stream';
import tls from 'node:tls';
import { CodedError, type EgressPolicy, type SecretBinding } from '@warren/protocol';
import dnsPacket from 'dns-packet';
import type { EgressCa } from './ca.js';
import { AddressFloor, parseLabCidrs, type FloorClass } from './address-floor.js';
import { decideEgress, decideEgressName, type EgressDenyReason, type EgressOperatorConfig } from './decide.js';
import type { EgressEvent, EgressKind } from './events.js';
import { canonicalHost, hostMatches, normalisePath, splitAuthority } from './host-name.js';
import { DnsResolver, type EgressResolver } from './resolver.js';
import { applySecrets, brokerSecrets, RedactStream, redactHeaders, type BrokeredSecret } from './secrets.js';
import { MAX_CLIENT_HELLO_BYTES, parseClientHello } from './tls-hello.js';

/** What the gateway needs to start. */
export interface EgressGatewayOptions {
  operator: Pick<EgressOperatorConfig, 'deny' | 'labCidrs' | 'resolvers' | 'maxConnectionsPerSandbox' | 'secrets'>;
  /** Resolves names; default: DNS queries to `operator.resolvers` (or the host's servers). */
  resolver?: EgressResolver;
  /** The address floor; default: built from `operator.labCidrs` and the host's interfaces. */
  floor?: AddressFloor;
  /** Called once per connection attempt (see {@link EgressEvent}); route it to the audit log and metrics. */
  onEvent?: (event: EgressEvent) => void;
  /** How long to wait for the upstream's TCP connect, and for a client's request head or ClientHello. */
  connectTimeoutMs?: number;
  headerTimeoutMs?: number;
  /**
   * The CA that signs the certificates the gateway shows when it intercepts TLS (for secrets
   * bound to HTTPS hosts and for method/path rules on port 443). Without it, secret bindings are
   * refused and method/path rules apply to plain HTTP only.
   */
  ca?: EgressCa;
  /** Certificates (PEM) trusted for upstream servers when intercepting; default: Node's bundled roots. */
  upstreamCa?: string[];
}

/** What registering a sandbox gives back: the environment its processes get (placeholders, never values). */
export interface SandboxEgressHandle {
  env: Record<string, string>;
  /** The brokered secrets (real values with their placeholders), for the controller's state folder only. */
  secrets: readonly BrokeredSecret[];
}

interface Tracked {
  /** Decided as a tunnel the gateway looks into (method and path rules may admit it). */
  inspectable?: boolean;
  kind: EgressKind;
  host: string;
  port: number;
  method?: string | undefined;
  path?: string | undefined;
  destroy(): void;
}

interface SandboxState {
  id: string;
  policy: EgressPolicy;
  version: number;
  secrets: BrokeredSecret[];
  open: number;
  tracked: Set<Tracked>;
  servers: (net.Server | dgram.Socket)[];
  sockets: Set<net.Socket>;
}

interface Admitted {
  host: string;
  rule: string;
  address: string;
  inspect: boolean;
}

interface ForwardTarget {
  scheme: 'http' | 'https';
  host: string;
  port: number;
  /** The request URL; brokered query secrets are written into it. */
  url: URL;
  rawPath: string;
  address: string;
  rule: string;
}

/** A refusal the gateway answers with; `status` for HTTP clients. */
class Refusal extends Error {
  constructor(
    readonly status: number,
    readonly rule: string,
    readonly reason: EgressDenyReason,
    message: string,
    readonly floor?: FloorClass,
  ) {
    super(message);
  }
}

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
]);

/**
 * Warren's egress gateway: every way out of a sandbox that has an egress policy. Per sandbox it
 * serves an explicit HTTP proxy (absolute-form plain HTTP, checked by host, port, method and
 * path, and CONNECT tunnels checked by host and port and then by the ClientHello's SNI), a
 * transparent TLS listener for clients that ignore proxy variables (checked by SNI), and a DNS
 * responder that answers only allowed names, with the gateway's own address. The gateway
 * resolves names itself, refuses every answer below the {@link AddressFloor}, and dials the
 * address it checked. A denial is an HTTP 403 naming the rule (or a closed connection where
 * there is no HTTP to answer with), never a hang.
 *
 * @example
 * const gateway = new EgressGateway({ operator: config.egress, onEvent: (e) => audit(e) });
 * const { env } = gateway.addSandbox('abc', { mode: 'allow', rules: [{ host: 'registry.npmjs.org' }] });
 * await gateway.listenProxy('abc', { path: '/run/warren/abc/egress.sock' });
 */
export class EgressGateway {
  readonly #sandboxes = new Map<string, SandboxState>();
  readonly #resolver: EgressResolver;
  readonly #floor: AddressFloor;
  readonly #operator: EgressGatewayOptions['operator'];
  readonly #onEvent: (event: EgressEvent) => void;
  readonly #connectTimeoutMs: number;
  readonly #headerTimeoutMs: number;
  readonly #ca: EgressCa | undefined;
  readonly #upstreamCa: string[] | undefined;
  /** Decrypted tunnels and whose they are; their requests arrive at {@link #interceptServer}. */
  readonly #intercepted = new WeakMap<tls.TLSSocket, { state: SandboxState; host: string; port: number; address: string }>();
  readonly #interceptServer: http.Server;

  constructor(options: EgressGatewayOptions) {
    this.#ca = options.ca;
    this.#upstreamCa = options.upstreamCa;
    this.#interceptServer = http.createServer(this.#serverOptions(options.headerTimeoutMs ?? 10_000));
    this.#interceptServer.on('request', (req: IncomingMessage, res: ServerResponse) => this.#onInterceptedRequest(req, res));
    this.#interceptServer.on('clientError', (_err, socket) => socket.destroy());
    this.#operator = options.operator;
    this.#resolver = options.resolver ?? new DnsResolver({ servers: options.operator.resolvers });
    this.#floor = options.floor ?? new AddressFloor({ labCidrs: parseLabCidrs(options.operator.labCidrs) });
    this.#onEvent = options.onEvent ?? (() => {});
    this.#connectTimeoutMs = options.connectTimeoutMs ?? 10_000;
    this.#headerTimeoutMs = options.headerTimeoutMs ?? 10_000;
  }

  /**
   * Registers a sandbox with its policy and secret bindings. Returns the environment variables
   * (placeholders) its processes should get; the real values stay in the gateway.
   */
  addSandbox(id: string, policy: EgressPolicy, secrets: readonly SecretBinding[] = []): SandboxEgressHandle {
    if (this.#sandboxes.has(id)) throw new CodedError('ALREADY_EXISTS', `Sandbox ${id} already has egress registered.`);
    if (secrets.length > 0 && this.#ca === undefined) {
      throw new CodedError(
        'INVALID_PARAMS',
        'Brokered secrets need TLS interception, and this egress gateway has no CA; create the sandbox without `secrets`, or give the gateway its CA.',
      );
    }
    return this.#add(id, policy, 1, brokerSecrets(secrets, this.#operator.secrets));
  }

  /**
   * Registers a sandbox again after a controller restart, with the policy, version and brokered
   * secrets it had (its container's environment already holds those placeholders).
   */
  restoreSandbox(id: string, policy: EgressPolicy, version: number, secrets: readonly BrokeredSecret[]): SandboxEgressHandle {
    if (this.#sandboxes.has(id)) throw new CodedError('ALREADY_EXISTS', `Sandbox ${id} already has egress registered.`);
    return this.#add(id, policy, version, [...secrets]);
  }

  #add(id: string, policy: EgressPolicy, version: number, brokered: BrokeredSecret[]): SandboxEgressHandle {
    this.#sandboxes.set(id, { id, policy, version, secrets: brokered, open: 0, tracked: new Set(), servers: [], sockets: new Set() });
    return { env: Object.fromEntries(brokered.map((s) => [s.name, s.placeholder])), secrets: brokered };
  }

  /**
   * Swaps a sandbox's policy. New connections and requests are decided under it at once; open
   * tunnels and requests it no longer allows are closed before this returns.
   */
  setPolicy(id: string, policy: EgressPolicy, version?: number): number {
    const state = this.#state(id);
    state.policy = policy;
    state.version = version ?? state.version + 1;
    for (const t of state.tracked) {
      const verdict = decideEgress(policy, this.#operator, { host: t.host, port: t.port, method: t.method, path: t.path, inspectable: t.inspectable });
      if (!verdict.allowed) t.destroy();
    }
    return state.version;
  }

  /** The sandbox's current policy and its version. */
  policyOf(id: string): { policy: EgressPolicy; version: number } {
    const state = this.#state(id);
    return { policy: state.policy, version: state.version };
  }

  /** Forgets a sandbox: its listeners stop and its open connections are closed. */
  async removeSandbox(id: string): Promise<void> {
    const state = this.#sandboxes.get(id);
    if (!state) return;
    this.#sandboxes.delete(id);
    for (const socket of state.sockets) socket.destroy();
    for (const t of state.tracked) t.destroy();
    await Promise.all(
      state.servers.map((s) => new Promise<void>((resolve) => (s instanceof net.Server ? s.close(() => resolve()) : s.close(() => resolve())))),
    );
  }

  /** Stops everything. */
  async close(): Promise<void> {
    await Promise.all([...this.#sandboxes.keys()].map((id) => this.removeSandbox(id)));
  }

  /** Serves the explicit HTTP proxy (set `HTTP_PROXY`/`HTTPS_PROXY` to it) for one sandbox on a TCP port or unix socket. */
  async listenProxy(id: string, listen: net.ListenOptions): Promise<net.AddressInfo | string> {
    const state = this.#state(id);
    const server = http.createServer(this.#serverOptions(this.#headerTimeoutMs));
    server.on('request', (req: IncomingMessage, res: ServerResponse) => void this.#onRequest(state, req, res));
    server.on('connect', (req: IncomingMessage, socket: Duplex, head: Buffer) => void this.#onConnect(state, req, socket as net.Socket, head));
    server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
      if (!socket.writable) return void socket.destroy();
      const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
      socket.end(`HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
    });
    return this.#listen(state, server, listen);
  }

  /** Serves the transparent TLS path (clients that ignore proxy variables and dial the DNS answer's address on :443). */
  async listenTransparentTls(id: string, listen: net.ListenOptions, port = 443): Promise<net.AddressInfo | string> {
    const state = this.#state(id);
    const server = net.createServer((socket) => void this.#onTransparent(state, socket, port));
    return this.#listen(state, server, listen);
  }

  /**
   * Answers DNS for one sandbox on UDP: allowed names get `answerAddress` (where the transparent
   * listeners are, as the sandbox sees them), every other name NXDOMAIN. Nothing is forwarded upstream.
   */
  async listenDns(id: string, listen: { host: string; port: number }, answerAddress: string): Promise<net.AddressInfo> {
    const state = this.#state(id);
    const socket = dgram.createSocket(net.isIPv6(listen.host) ? 'udp6' : 'udp4');
    socket.on('message', (message, remote) => this.#onDns(state, socket, message, remote, answerAddress));
    socket.on('error', () => {});
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(listen.port, listen.host, () => {
        socket.off('error', reject);
        resolve();
      });
    });
    state.servers.push(socket);
    return socket.address();
  }

  /**
   * Answers DNS for one sandbox as a stream (DNS-on-TCP framing) on a TCP port or unix socket:
   * what the sandbox's relay sends for its DNS queries, UDP and TCP alike. Same answers as {@link listenDns}.
   */
  async listenDnsStream(id: string, listen: net.ListenOptions, answerAddress: string): Promise<net.AddressInfo | string> {
    const state = this.#state(id);
    const server = net.createServer({ allowHalfOpen: true }, (socket) => this.#onDnsStream(state, socket, answerAddress));
    return this.#listen(state, server, listen);
  }

  /** Request heads must arrive within the header timeout (checked every second) and fit in 32 KiB. */
  #serverOptions(headerTimeoutMs: number): http.ServerOptions {
    return { requestTimeout: 0, headersTimeout: headerTimeoutMs, connectionsCheckingInterval: 1000, maxHeaderSize: 32 * 1024 };
  }

  #state(id: string): SandboxState {
    const state = this.#sandboxes.get(id);
    if (!state) throw new CodedError('SANDBOX_NOT_FOUND', `Sandbox ${id} has no egress registered.`);
    return state;
  }

  async #listen(state: SandboxState, server: net.Server, listen: net.ListenOptions): Promise<net.AddressInfo | string> {
    server.on('connection', (socket: net.Socket) => {
      state.sockets.add(socket);
      socket.once('close', () => state.sockets.delete(socket));
    });
    server.maxConnections = this.#operator.maxConnectionsPerSandbox * 4;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(listen, () => {
        server.off('error', reject);
        resolve();
      });
    });
    state.servers.push(server);
    const address = server.address();
    if (address === null) throw new Error('The egress listener has no address.');
    return address;
  }

  /** Takes one of the sandbox's connection slots, or undefined when it holds its maximum. */
  #acquire(state: SandboxState): (() => void) | undefined {
    if (state.open >= this.#operator.maxConnectionsPerSandbox) return undefined;
    state.open += 1;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      state.open -= 1;
    };
  }

  /** The event of a refused attempt: nothing moved, and the refusal says which rule and why. */
  #emitDenied(
    state: SandboxState,
    where: Pick<EgressEvent, 'kind' | 'host' | 'port' | 'method' | 'path'>,
    refusal: Pick<Refusal, 'rule' | 'reason' | 'floor'>,
    started: number,
  ): void {
    this.#emit(state, {
      ...where,
      decision: 'denied',
      rule: refusal.rule,
      reason: refusal.reason,
      floor: refusal.floor,
      bytesIn: 0,
      bytesOut: 0,
      durationMs: Date.now() - started,
    });
  }

  #emit(state: SandboxState, event: Omit<EgressEvent, 'sandboxId' | 'policyVersion'>): void {
    try {
      this.#onEvent({ sandboxId: state.id, policyVersion: state.version, ...event });
    } catch {
      // An event sink that throws must not break the connection it reports on.
    }
  }

  /** Decides a request, resolves the name and picks the first answer above the floor; throws a {@link Refusal}. */
  async #admit(state: SandboxState, query: { host: string; port: number; method?: string; path?: string; inspectable?: boolean }): Promise<Admitted> {
    const verdict = decideEgress(state.policy, this.#operator, query);
    if (!verdict.allowed) throw new Refusal(verdict.reason === 'invalid-host' ? 400 : 403, verdict.rule, verdict.reason, verdict.message);
    let answers: string[];
    try {
      answers = await this.#resolver.resolve(verdict.host);
    } catch (err) {
      throw new Refusal(502, verdict.rule, 'resolve-failed', `Could not resolve ${verdict.host}: ${(err as Error).message}.`);
    }
    let refusedAs: FloorClass | undefined;
    for (const address of answers) {
      const cls = this.#floor.classify(address);
      if (cls === undefined) return { host: verdict.host, rule: verdict.rule, address, inspect: verdict.inspect === true };
      refusedAs ??= cls;
    }
    if (refusedAs === undefined) throw new Refusal(502, verdict.rule, 'resolve-failed', `${verdict.host} has no addresses.`);
    throw new Refusal(
      403,
      `floor:${refusedAs}`,
      'address-floor',
      `${verdict.host} resolves only to ${refusedAs} addresses, which no sandbox may reach.`,
      refusedAs,
    );
  }

  #dial(address: string, port: number): Promise<net.Socket> {
    return new Promise((resolve, reject) => {
      const socket = net.connect({ host: address, port, timeout: this.#connectTimeoutMs });
      socket.once('connect', () => {
        socket.setTimeout(0);
        resolve(socket);
      });
      socket.once('timeout', () => socket.destroy(new Error(`connect to ${address}:${port} timed out`)));
      socket.once('error', reject);
    });
  }

  async #onRequest(state: SandboxState, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const started = Date.now();
    const release = this.#acquire(state);
    const raw = req.url ?? '';
    let host = '';
    let port = 80;
    const refuse = (refusal: Refusal) => this.#refuseRequest(state, 'http', req, res, host, port, undefined, refusal, started, release);
    if (!release) {
      return refuse(
        new Refusal(
          429,
          'limit:connections',
          'too-many-connections',
          `This sandbox already holds ${this.#operator.maxConnectionsPerSandbox} open connections through the gateway.`,
        ),
      );
    }
    let target: URL;
    try {
      if (/^https?:\/\//i.test(raw)) {
        target = new URL(raw);
        host = target.hostname;
        port = target.port === '' ? 80 : Number(target.port);
        if (target.protocol !== 'http:')
          return refuse(new Refusal(400, 'scheme', 'invalid-host', 'Send https:// requests through a CONNECT tunnel (set HTTPS_PROXY), not as absolute-form.'));
        if (target.username || target.password) return refuse(new Refusal(400, 'invalid-host', 'invalid-host', 'Userinfo in the request URL is refused.'));
        const hostHeader = req.headers.host;
        if (hostHeader !== undefined && !sameAuthority(hostHeader, target.hostname, port, 80)) {
          return refuse(
            new Refusal(
              403,
              'host-mismatch',
              'host-mismatch',
              `The Host header '${hostHeader.slice(0, 200)}' does not match the request URL's host ${target.host}.`,
            ),
          );
        }
      } else {
        // Origin-form: a client that reached the gateway without knowing it is a proxy; the Host header names the target.
        const authority = splitAuthority(req.headers.host ?? '', 80);
        if (!authority || !raw.startsWith('/')) return refuse(new Refusal(400, 'invalid-host', 'invalid-host', 'The request names no valid Host.'));
        ({ host, port } = authority);
        target = new URL(`http://${authority.host}:${port}${raw}`);
      }
    } catch {
      return refuse(new Refusal(400, 'invalid-host', 'invalid-host', 'The request URL is not valid.'));
    }
    const rawPath = raw.replace(/^https?:\/\/[^/?#]*/i, '') || '/';
    let admitted: Admitted;
    try {
      admitted = await this.#admit(state, { host, port, method: req.method ?? 'GET', path: rawPath });
    } catch (err) {
      return refuse(err instanceof Refusal ? err : new Refusal(502, 'upstream', 'resolve-failed', (err as Error).message));
    }
    host = admitted.host;
    this.#forward(state, req, res, { scheme: 'http', host, port, url: target, rawPath, address: admitted.address, rule: admitted.rule }, started, release);
  }

  /** Answers a refused request with a JSON body naming the rule, and reports it. */
  #refuseRequest(
    state: SandboxState,
    kind: EgressKind,
    req: IncomingMessage,
    res: ServerResponse,
    host: string,
    port: number,
    path: string | undefined,
    refusal: Refusal,
    started: number,
    release: (() => void) | undefined,
  ): void {
    release?.();
    this.#emitDenied(state, { kind, host, port, method: req.method, path }, refusal, started);
    const body = JSON.stringify({ error: 'egress_denied', rule: refusal.rule, reason: refusal.reason, message: refusal.message });
    if (res.headersSent) return void res.destroy();
    res.writeHead(refusal.status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      'x-warren-egress': 'denied',
      connection: 'close',
    });
    res.end(body);
    req.resume();
  }

  /** Sends an admitted request to the address the gateway checked, with secrets written in and echoed values redacted. */
  #forward(state: SandboxState, req: IncomingMessage, res: ServerResponse, target: ForwardTarget, started: number, release: () => void): void {
    const { host, port, url } = target;
    const kind: EgressKind = target.scheme === 'http' ? 'http' : 'https';
    const normal = normalisePath(target.rawPath);
    const path = 'path' in normal ? normal.path : url.pathname;
    const headers: OutgoingHttpHeaders = {};
    for (const [key, value] of Object.entries(req.headers)) if (!HOP_BY_HOP.has(key) && value !== undefined) headers[key] = value;
    headers.host = port === (target.scheme === 'http' ? 80 : 443) ? host : `${host}:${port}`;
    const used = applySecrets(state.secrets, host, headers, url);
    if (used.length > 0) headers['accept-encoding'] = 'identity'; // so an echoed secret can be found and redacted
    let bytesOut = 0;
    let bytesIn = 0;
    const options = { host: target.address, port, method: req.method, path: url.pathname + url.search, headers, setHost: false, agent: false as const };
    const upstream =
      target.scheme === 'http'
        ? http.request({ ...options, timeout: this.#connectTimeoutMs })
        : https.request({ ...options, servername: host, ca: this.#upstreamCa, timeout: this.#connectTimeoutMs });
    const tracked: Tracked = { kind, host, port, method: req.method, path, inspectable: target.scheme === 'https', destroy: () => upstream.destroy() };
    state.tracked.add(tracked);
    const finish = (error?: Error) => {
      if (!state.tracked.delete(tracked)) return;
      release();
      this.#emit(state, {
        kind,
        host,
        port,
        method: req.method,
        path,
        decision: 'allowed',
        rule: target.rule,
        address: target.address,
        bytesOut,
        bytesIn,
        durationMs: Date.now() - started,
        secrets: used.length ? used : undefined,
      });
      if (error && !res.headersSent) {
        const body = JSON.stringify({ error: 'egress_upstream', message: `The upstream ${host}:${port} failed: ${error.message}` });
        res.writeHead(502, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), connection: 'close' }).end(body);
      } else if (error) res.destroy();
    };
    upstream.on('timeout', () => upstream.destroy(new Error('no answer in time')));
    upstream.on('response', (answer) => {
      upstream.setTimeout(0);
      const responseHeaders = redactHeaders(state.secrets, answer.headers);
      for (const key of Object.keys(responseHeaders)) if (HOP_BY_HOP.has(key) && key !== 'host') delete responseHeaders[key];
      if (used.length > 0) delete responseHeaders['content-length'];
      res.writeHead(answer.statusCode ?? 502, answer.statusMessage, responseHeaders);
      answer.on('data', (chunk: Buffer) => (bytesIn += chunk.length));
      (used.length > 0 ? answer.pipe(new RedactStream(state.secrets)) : answer).pipe(res);
      res.once('finish', () => finish());
      answer.once('error', (err) => finish(err));
    });
    upstream.on('error', (err) => finish(err));
    req.on('data', (chunk: Buffer) => (bytesOut += chunk.length));
    req.pipe(upstream);
    res.once('close', () => {
      if (!res.writableFinished) {
        upstream.destroy();
        finish(new Error('the client went away'));
      }
    });
  }

  /** A request inside an intercepted tunnel: Host must name the tunnel's host, then the policy decides with method and path. */
  #onInterceptedRequest(req: IncomingMessage, res: ServerResponse): void {
    const tunnel = this.#intercepted.get(req.socket as tls.TLSSocket);
    if (!tunnel) return void res.destroy();
    const { state, host, port, address } = tunnel;
    const started = Date.now();
    const raw = req.url ?? '/';
    const refuse = (refusal: Refusal) => this.#refuseRequest(state, 'https', req, res, host, port, raw.split('?', 1)[0], refusal, started, undefined);
    const hostHeader = req.headers.host;
    if (hostHeader === undefined || !sameAuthority(hostHeader, host, port, 443)) {
      return refuse(
        new Refusal(421, 'host-mismatch', 'host-mismatch', `The Host header '${(hostHeader ?? '').slice(0, 200)}' does not match the TLS server name ${host}.`),
      );
    }
    if (!raw.startsWith('/')) return refuse(new Refusal(400, 'invalid-host', 'invalid-host', 'Inside a tunnel, send origin-form requests (a path).'));
    const verdict = decideEgress(state.policy, this.#operator, { host, port, method: req.method ?? 'GET', path: raw });
    if (!verdict.allowed) return refuse(new Refusal(403, verdict.rule, verdict.reason, verdict.message));
    const url = new URL(`https://${host}:${port}${raw}`);
    this.#forward(state, req, res, { scheme: 'https', host, port, url, rawPath: raw, address, rule: verdict.rule }, started, () => {});
  }

  async #onConnect(state: SandboxState, req: IncomingMessage, client: net.Socket, head: Buffer): Promise<void> {
    const started = Date.now();
    const authority = splitAuthority(req.url ?? '');
    let host = authority?.host ?? (req.url ?? '').slice(0, 260);
    const port = authority?.port ?? 0;
    const release = this.#acquire(state);
    const refuse = (refusal: Refusal) => {
      release?.();
      this.#emitDenied(state, { kind: 'connect', host, port }, refusal, started);
      const body = JSON.stringify({ error: 'egress_denied', rule: refusal.rule, reason: refusal.reason, message: refusal.message });
      if (client.writable && !client.destroyed) {
        const reason = http.STATUS_CODES[refusal.status] ?? 'Forbidden';
        client.end(
          `HTTP/1.1 ${refusal.status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nX-Warren-Egress: denied\r\nConnection: close\r\n\r\n${body}`,
        );
      } else client.destroy();
    };
    client.on('error', () => {});
    if (!release)
      return refuse(
        new Refusal(
          429,
          'limit:connections',
          'too-many-connections',
          `This sandbox already holds ${this.#operator.maxConnectionsPerSandbox} open connections through the gateway.`,
        ),
      );
    if (!authority) return refuse(new Refusal(400, 'invalid-host', 'invalid-host', 'CONNECT needs host:port with a port of 1-65535.'));
    const canonical = canonicalHost(authority.host);
    if (canonical.kind === 'invalid') return refuse(new Refusal(400, 'invalid-host', 'invalid-host', `'${host}' is not a valid host: ${canonical.reason}.`));
    const hostHeader = req.headers.host;
    if (hostHeader !== undefined && !sameAuthority(hostHeader, authority.host, port, port)) {
      return refuse(
        new Refusal(403, 'host-mismatch', 'host-mismatch', `The Host header '${hostHeader.slice(0, 200)}' does not match the CONNECT target ${req.url}.`),
      );
    }
    let upstream: net.Socket;
    let admitted: Admitted;
    try {
      admitted = await this.#admit(state, { host: authority.host, port, inspectable: this.#ca !== undefined });
      host = admitted.host;
      upstream = await this.#dial(admitted.address, port);
    } catch (err) {
      return refuse(err instanceof Refusal ? err : new Refusal(502, 'upstream', 'resolve-failed', `Could not connect: ${(err as Error).message}.`));
    }
    const tracked = this.#track(state, 'connect', admitted.host, port, client, upstream);
    client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    void this.#spliceAfterHello(state, tracked, client, upstream, head, admitted, port, started, release);
  }

  async #onTransparent(state: SandboxState, client: net.Socket, port: number): Promise<void> {
    const started = Date.now();
    client.on('error', () => {});
    const release = this.#acquire(state);
    if (!release) {
      this.#emit(state, {
        kind: 'sni',
        host: '',
        port,
        decision: 'denied',
        rule: 'limit:connections',
        reason: 'too-many-connections',
        bytesIn: 0,
        bytesOut: 0,
        durationMs: 0,
      });
      client.destroy();
      return;
    }
    const hello = await this.#readHello(client, Buffer.alloc(0));
    const refuse = (host: string, rule: string, reason: EgressDenyReason, floor?: FloorClass) => {
      release();
      this.#emitDenied(state, { kind: 'sni', host, port }, { rule, reason, floor }, started);
      client.destroy();
    };
    if (hello.serverName === undefined) return refuse('', 'sni:missing', 'not-tls');
    let admitted: Admitted;
    let upstream: net.Socket;
    try {
      admitted = await this.#admit(state, { host: hello.serverName, port, inspectable: this.#ca !== undefined });
      upstream = await this.#dial(admitted.address, port);
    } catch (err) {
      if (err instanceof Refusal) return refuse(hello.serverName.slice(0, 260), err.rule, err.reason, err.floor);
      return refuse(hello.serverName.slice(0, 260), 'upstream', 'resolve-failed');
    }
    const tracked = this.#track(state, 'sni', admitted.host, port, client, upstream);
    if (this.#mustIntercept(state, admitted)) return void this.#intercept(state, tracked, client, upstream, hello.data, admitted, port, started, release);
    this.#pipe(state, tracked, client, upstream, hello.data, admitted, port, started, release);
  }

  /** Reads the first TLS record (bounded in size and time); `serverName` undefined for no SNI, a non-TLS start or a timeout. */
  #readHello(client: net.Socket, head: Buffer): Promise<{ serverName: string | undefined; data: Buffer }> {
    return new Promise((resolve) => {
      let data = head;
      const done = (serverName: string | undefined) => {
        clearTimeout(timer);
        client.off('data', onData);
        client.off('close', onClose);
        client.off('end', onClose);
        client.pause();
        resolve({ serverName, data });
      };
      const check = () => {
        const parsed = parseClientHello(data);
        if (parsed.kind === 'hello') done(parsed.serverName);
        else if (parsed.kind === 'not-tls' || data.length > MAX_CLIENT_HELLO_BYTES) done(undefined);
      };
      const onData = (chunk: Buffer) => {
        data = Buffer.concat([data, chunk]);
        check();
      };
      const onClose = () => done(undefined);
      const timer = setTimeout(() => done(undefined), this.#headerTimeoutMs);
      client.on('data', onData);
      client.once('close', onClose);
      client.once('end', onClose); // a client that half-closes before its hello gives up its slot at once
      client.resume();
      if (data.length > 0) check();
    });
  }

  /** Registers an open tunnel, so a live policy update can close it. */
  #track(state: SandboxState, kind: EgressKind, host: string, port: number, client: net.Socket, upstream: net.Socket): Tracked {
    const tracked: Tracked = {
      kind,
      host,
      port,
      destroy: () => {
        client.destroy();
        upstream.destroy();
      },
    };
    state.tracked.add(tracked);
    return tracked;
  }

  async #spliceAfterHello(
    state: SandboxState,
    tracked: Tracked,
    client: net.Socket,
    upstream: net.Socket,
    head: Buffer,
    admitted: Admitted,
    port: number,
    started: number,
    release: () => void,
  ): Promise<void> {
    const hello = await this.#readHello(client, head);
    const sni = hello.serverName === undefined ? undefined : canonicalHost(hello.serverName);
    if (!state.tracked.has(tracked)) return; // closed by a policy update while the hello was awaited
    if (sni === undefined || sni.kind !== 'name' || sni.name !== admitted.host) {
      state.tracked.delete(tracked);
      tracked.destroy();
      release();
      const rule = sni === undefined ? 'sni:missing' : 'sni:mismatch';
      this.#emit(state, {
        kind: tracked.kind,
        host: admitted.host,
        port,
        decision: 'denied',
        rule,
        reason: sni === undefined ? 'not-tls' : 'host-mismatch',
        bytesIn: 0,
        bytesOut: 0,
        durationMs: Date.now() - started,
      });
      return;
    }
    if (this.#mustIntercept(state, admitted)) return this.#intercept(state, tracked, client, upstream, hello.data, admitted, port, started, release);
    this.#pipe(state, tracked, client, upstream, hello.data, admitted, port, started, release);
  }

  /** Whether a tunnel must be decrypted: a secret is bound to its host, or only a method/path rule admits it. */
  #mustIntercept(state: SandboxState, admitted: Admitted): boolean {
    if (this.#ca === undefined) return false;
    return admitted.inspect || state.secrets.some((s) => s.hosts.some((pattern) => hostMatches(pattern, admitted.host)));
  }

  /**
   * Ends the sandbox's TLS at the gateway with a leaf for the verified host (HTTP/1.1 only), and
   * hands the decrypted connection to the intercept server, whose requests are decided one by one
   * and sent on over a fresh, verified TLS connection to the address checked at CONNECT.
   */
  async #intercept(
    state: SandboxState,
    tracked: Tracked,
    client: net.Socket,
    upstream: net.Socket,
    hello: Buffer,
    admitted: Admitted,
    port: number,
    started: number,
    release: () => void,
  ): Promise<void> {
    upstream.destroy(); // each request goes on over its own verified TLS connection
    let context: tls.SecureContext;
    try {
      context = await (this.#ca as EgressCa).contextFor(admitted.host);
    } catch {
      state.tracked.delete(tracked);
      client.destroy();
      release();
      return;
    }
    // TLS over a stream that first replays the ClientHello the gateway already read (a bare
    // net.Socket would hand TLS its file descriptor and lose those bytes).
    const replay = new Duplex({
      read: () => void client.resume(),
      write: (chunk: Buffer, _encoding, done) => void client.write(chunk, (err) => done(err ?? null)),
      final: (done) => void client.end(() => done()),
      destroy: (err, done) => {
        client.destroy();
        done(err);
      },
    });
    replay.push(hello);
    client.on('data', (chunk: Buffer) => {
      if (!replay.push(chunk)) client.pause();
    });
    client.once('end', () => replay.push(null));
    const secure = new tls.TLSSocket(replay, { isServer: true, secureContext: context, ALPNProtocols: ['http/1.1'] });
    tracked.destroy = () => {
      secure.destroy();
      client.destroy();
    };
    // Only a tunnel the gateway reads may stay open under method/path rules; a spliced one may not.
    tracked.inspectable = true;
    this.#intercepted.set(secure, { state, host: admitted.host, port, address: admitted.address });
    const finish = () => {
      if (!state.tracked.delete(tracked)) return;
      release();
      this.#emit(state, {
        kind: tracked.kind,
        host: admitted.host,
        port,
        decision: 'allowed',
        rule: admitted.rule,
        address: admitted.address,
        intercepted: true,
        bytesOut: hello.length + client.bytesRead,
        bytesIn: client.bytesWritten,
        durationMs: Date.now() - started,
      });
    };
    secure.on('error', () => secure.destroy());
    secure.once('close', finish);
    client.once('close', finish);
    this.#interceptServer.emit('connection', secure);
    client.resume();
  }

  #pipe(
    state: SandboxState,
    tracked: Tracked,
    client: net.Socket,
    upstream: net.Socket,
    first: Buffer,
    admitted: Admitted,
    port: number,
    started: number,
    release: () => void,
  ): void {
    let bytesOut = first.length;
    let bytesIn = 0;
    const kind = tracked.kind;
    const finish = () => {
      if (!state.tracked.delete(tracked)) return;
      client.destroy();
      upstream.destroy();
      release();
      this.#emit(state, {
        kind,
        host: admitted.host,
        port,
        decision: 'allowed',
        rule: admitted.rule,
        address: admitted.address,
        bytesOut,
        bytesIn,
        durationMs: Date.now() - started,
      });
    };
    upstream.on('error', finish);
    client.on('error', finish);
    upstream.once('close', finish);
    client.once('close', finish);
    if (first.length > 0) upstream.write(first);
    client.on('data', (chunk: Buffer) => (bytesOut += chunk.length));
    upstream.on('data', (chunk: Buffer) => (bytesIn += chunk.length));
    client.pipe(upstream);
    upstream.pipe(client);
    client.resume();
  }

  #onDns(state: SandboxState, socket: dgram.Socket, message: Buffer, remote: dgram.RemoteInfo, answerAddress: string): void {
    const response = this.#answerDns(state, message, answerAddress);
    if (response) socket.send(response, remote.port, remote.address);
  }

  /**
   * The answer to one DNS message from a sandbox, or undefined for one that is not a query (no
   * answer at all). Allowed names get `answerAddress`, others NXDOMAIN; nothing goes upstream.
   */
  #answerDns(state: SandboxState, message: Buffer, answerAddress: string): Buffer | undefined {
    let query: dnsPacket.Packet;
    try {
      query = dnsPacket.decode(message);
    } catch {
      return undefined; // not DNS: no answer
    }
    const question = query.questions?.[0];
    if (!question || query.type !== 'query' || typeof question.name !== 'string') return undefined;
    const verdict = decideEgressName(state.policy, this.#operator, question.name);
    const answers: dnsPacket.Answer[] =
      verdict.allowed && question.type === 'A' && net.isIPv4(answerAddress)
        ? [{ type: 'A', name: question.name, ttl: 0, class: 'IN', data: answerAddress }]
        : verdict.allowed && question.type === 'AAAA' && net.isIPv6(answerAddress)
          ? [{ type: 'AAAA', name: question.name, ttl: 0, class: 'IN', data: answerAddress }]
          : [];
    let response: Buffer;
    try {
      response = dnsPacket.encode({
        id: query.id,
        type: 'response',
        flags: (verdict.allowed ? 0 : 3) | dnsPacket.RECURSION_DESIRED | dnsPacket.RECURSION_AVAILABLE, // rcode 3 = NXDOMAIN
        questions: [question],
        answers,
      });
    } catch {
      return undefined; // a question that does not encode back (odd labels): no answer
    }
    this.#emit(state, {
      kind: 'dns',
      host: verdict.host,
      port: 53,
      decision: verdict.allowed ? 'allowed' : 'denied',
      rule: verdict.rule,
      reason: verdict.allowed ? undefined : verdict.reason,
      bytesIn: response.length,
      bytesOut: message.length,
      durationMs: 0,
    });
    return response;
  }

  /**
   * One DNS-over-stream connection (DNS on TCP framing: two-byte length, message): each message
   * is answered in turn. A message over 4 KiB, more than 16 messages, or 10 s idle end it, and it
   * holds one of the sandbox's connection slots while open.
   */
  #onDnsStream(state: SandboxState, client: net.Socket, answerAddress: string): void {
    client.on('error', () => {});
    const release = this.#acquire(state);
    if (!release) return void client.destroy();
    client.once('close', release);
    client.setTimeout(this.#headerTimeoutMs, () => client.destroy());
    let buffered = Buffer.alloc(0);
    let answered = 0;
    client.on('data', (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 2) {
        const length = buffered.readUInt16BE(0);
        if (length > MAX_DNS_MESSAGE_BYTES || answered >= MAX_DNS_MESSAGES_PER_STREAM) return void client.destroy();
        if (buffered.length < 2 + length) return;
        const response = this.#answerDns(state, buffered.subarray(2, 2 + length), answerAddress);
        buffered = buffered.subarray(2 + length);
        answered += 1;
        if (!response) continue;
        const prefix = Buffer.alloc(2);
        prefix.writeUInt16BE(response.length);
        client.write(Buffer.concat([prefix, response]));
      }
    });
    client.once('end', () => client.end());
  }
}

/** The largest DNS message a sandbox may send on the stream path. */
const MAX_DNS_MESSAGE_BYTES = 4096;
/** DNS messages one stream connection may carry before it is closed. */
const MAX_DNS_MESSAGES_PER_STREAM = 16;

/** Whether a Host header names the same host and port as a request target. */
function sameAuthority(header: string, host: string, port: number, defaultPort: number): boolean {
  const parsed = splitAuthority(header, defaultPort);
  if (!parsed || parsed.port !== port) return false;
  const a = canonicalHost(parsed.host);
  const b = canonicalHost(host);
  if (a.kind === 'invalid' || b.kind === 'invalid') return false;
  return a.kind === b.kind && (a.kind === 'name' ? a.name === (b as { name: string }).name : a.ip === (b as { ip: string }).ip);
}
