import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { isIP, type AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import {
  CodedError,
  ERROR_CODES,
  GRANT_HEADER,
  REST_PATHS,
  SandboxState,
  SetTimeoutRequest,
  WS_MAX_PAYLOAD_BYTES,
  encodeGrant,
  issueText,
  type ErrorCode,
  type RestErrorBody,
} from '@warren/protocol';
import { WebSocketServer, type WebSocket } from 'ws';
import { openAgentSocket } from './agent-link.js';
import type { ControllerConfig } from './config.js';
import type { Credentials } from './credentials.js';
import { callAccessCheck, deriveGrant, grantFor, observeCalls, routeRefusal, type Access, type Caller, type Holder } from './grants.js';
import type { Metrics } from './metrics.js';
import { relay, sizeRefusal } from './relay.js';
import type { SandboxService } from './sandboxes.js';

const MAX_BODY_BYTES = 1024 * 1024;

export interface HttpServerDeps {
  sandboxes: SandboxService;
  credentials: Credentials;
  config: ControllerConfig;
  metrics: Metrics;
  log: (event: string, fields?: Record<string, unknown>) => void;
  /** `/readyz`: resolves when Docker answers and the default image is present. */
  readiness: () => Promise<Record<string, unknown>>;
  /** `GET /v1/sandboxes/:id/audit`: the daemon's audit log of the sandbox. */
  audit: (id: string, query: URLSearchParams) => Promise<unknown>;
}

/** The REST API and the WebSocket relay to each sandbox's daemon, on one node:http server. */
export function createHttpServer(deps: HttpServerDeps) {
  const upgrading = { count: 0 };
  // The socket takes messages up to the protocol's hard cap, so the relay can answer a frame over
  // maxMessageBytes with its request id (relay.ts) instead of closing the connection.
  const wss = new WebSocketServer({ noServer: true, maxPayload: WS_MAX_PAYLOAD_BYTES, perMessageDeflate: false });

  const server = createServer((req, res) => {
    route(deps, req, res).catch((err: unknown) => sendError(deps, res, err));
  });

  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => socket.destroy());
    upgrade(deps, wss, upgrading, req, socket, head).catch((err: unknown) => rejectUpgrade(deps, socket, err));
  });

  // Heartbeat: a client that has not answered the previous ping by the next one is gone.
  // (`handleUpgrade` emits no 'connection' event, so the upgrade path emits it for this listener.)
  const alive = new WeakMap<WebSocket, boolean>();
  wss.on('connection', (ws: WebSocket) => {
    alive.set(ws, true);
    ws.on('pong', () => alive.set(ws, true));
  });
  const heartbeat = setInterval(() => {
    for (const ws of wss.clients) {
      if (alive.get(ws) === false) {
        ws.terminate();
        continue;
      }
      alive.set(ws, false);
      ws.ping();
    }
  }, deps.config.heartbeatMs);
  heartbeat.unref();
  server.on('close', () => clearInterval(heartbeat));

  return { server, wss };
}

async function route(deps: HttpServerDeps, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://controller');
  const method = req.method ?? 'GET';
  if (url.pathname === REST_PATHS.healthz && method === 'GET') return sendJson(res, 200, { status: 'ok' });
  if (url.pathname === REST_PATHS.readyz && method === 'GET') {
    const checks = await deps.readiness().catch((err: unknown) => {
      throw new CodedError('SANDBOX_NOT_READY', `Not ready: ${(err as Error).message}`);
    });
    return sendJson(res, 200, { status: 'ready', ...checks });
  }
  if (url.pathname === REST_PATHS.metrics && method === 'GET') {
    refuse(controllerWide(authenticate(deps.credentials, req, undefined)), 'operator', 'GET /metrics');
    const text = await deps.metrics.registry.metrics();
    res.writeHead(200, { 'content-type': deps.metrics.registry.contentType }).end(text);
    return;
  }

  const match = /^\/v1\/sandboxes(?:\/([A-Za-z0-9]+)(?:\/([a-z]+))?)?$/.exec(url.pathname);
  if (!match)
    throw new CodedError(
      'NOT_FOUND',
      `No route ${method} ${url.pathname}. Routes: /healthz, /readyz, /metrics, /v1/sandboxes[/<id>[/keepalive|timeout|pause|resume|derive|audit]].`,
    );
  const [, id, action] = match;
  const caller = authenticate(deps.credentials, req, id);

  if (!id) {
    refuse(controllerWide(caller), 'operator', `${method} /v1/sandboxes`);
    if (method === 'POST') {
      const created = await deps.sandboxes.create(await readJson(req));
      deps.log('sandbox.created', { sandboxId: created.id, image: created.image, readyMs: created.readyMs, pooled: created.pooled });
      return sendJson(res, 201, created);
    }
    if (method === 'GET') return sendJson(res, 200, { sandboxes: await deps.sandboxes.find(listFilter(url.searchParams)) });
    throw methodNotAllowed(method, url.pathname, 'GET, POST');
  }

  // Each route names its kind of access; the rule table in grants.ts decides, as it does for the
  // WebSocket methods that do the same things (audit.list, system.info).
  const routes = new Map<string, { method: string; access: Access; run: () => Promise<void> }>([
    ['', { method: 'GET', access: 'info', run: async () => sendJson(res, 200, await deps.sandboxes.get(id)) }],
    [
      'DELETE:',
      {
        method: 'DELETE',
        access: 'lifecycle',
        run: async () => {
          await deps.sandboxes.kill(id);
          deps.log('sandbox.killed', { sandboxId: id });
          res.writeHead(204).end();
        },
      },
    ],
    ['keepalive', { method: 'POST', access: 'lifecycle', run: async () => sendJson(res, 200, await deps.sandboxes.keepalive(id)) }],
    [
      'timeout',
      {
        method: 'POST',
        access: 'lifecycle',
        run: async () => {
          const body = SetTimeoutRequest.safeParse(await readJson(req));
          if (!body.success)
            throw new CodedError(
              'INVALID_PARAMS',
              `Invalid timeout request: ${body.error.issues.map(issueText).join('; ')}. Send { "ttlSeconds": <seconds from now> }.`,
            );
          sendJson(res, 200, await deps.sandboxes.setTimeout(id, body.data.ttlSeconds));
        },
      },
    ],
    ['pause', { method: 'POST', access: 'lifecycle', run: async () => sendJson(res, 200, await deps.sandboxes.pause(id)) }],
    ['resume', { method: 'POST', access: 'lifecycle', run: async () => sendJson(res, 200, await deps.sandboxes.resume(id)) }],
    [
      'derive',
      {
        method: 'POST',
        access: 'derive',
        run: async () => sendJson(res, 201, deriveGrant(deps.credentials, deps.sandboxes.record(id), caller, await readJson(req))),
      },
    ],
    ['audit', { method: 'GET', access: 'audit', run: async () => sendJson(res, 200, await deps.audit(id, url.searchParams)) }],
  ]);
  // A Map holds only the routes put in it: `constructor`, `__proto__` and the like are unknown.
  const handler = routes.get(action === undefined && method === 'DELETE' ? 'DELETE:' : (action ?? ''));
  if (!handler)
    throw new CodedError(
      'NOT_FOUND',
      `No route ${method} ${url.pathname}. Sandbox routes: GET|DELETE /v1/sandboxes/<id>, POST .../keepalive|timeout|pause|resume|derive, GET .../audit.`,
    );
  const record = deps.sandboxes.record(id); // throws SANDBOX_NOT_FOUND
  refuse({ caller, grant: () => grantFor(record, caller) }, handler.access, `${handler.method} /v1/sandboxes/<id>${action === undefined ? '' : `/${action}`}`);
  if (handler.method !== method) throw methodNotAllowed(method, url.pathname, handler.method);
  await handler.run();
}

/** A caller on a controller-wide route, where no sandbox (so no grant) is involved. */
function controllerWide(caller: Caller): Holder {
  return {
    caller,
    grant: () => {
      throw new CodedError('INTERNAL', 'A controller-wide route asked for a sandbox grant.');
    },
  };
}

/** Throws the rule table's FORBIDDEN when `holder` may not use a route of this access. */
function refuse(holder: Holder, access: Access, what: string): void {
  const refusal = routeRefusal(holder, access, what);
  if (refusal) throw refusal;
}

function listFilter(query: URLSearchParams): { labels: Record<string, string>; state?: SandboxState } {
  const pairs: [string, string][] = [];
  for (const pair of query.getAll('label')) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new CodedError('INVALID_PARAMS', `Label filter '${pair}' is not key=value; use ?label=team=red.`);
    pairs.push([pair.slice(0, eq), pair.slice(eq + 1)]);
  }
  // fromEntries makes own keys, `__proto__` included (an assignment would set the prototype and drop the filter).
  const labels = Object.fromEntries(pairs);
  const state = query.get('state');
  if (state === null) return { labels };
  const parsed = SandboxState.safeParse(state);
  if (!parsed.success) throw new CodedError('INVALID_PARAMS', `State filter '${state}' is not one of ${SandboxState.options.join(', ')}.`);
  return { labels, state: parsed.data };
}

async function upgrade(
  deps: HttpServerDeps,
  wss: WebSocketServer,
  upgrading: { count: number },
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://controller');
  const match = /^\/v1\/sandboxes\/([A-Za-z0-9]+)\/connect$/.exec(url.pathname);
  if (!match) throw new CodedError('NOT_FOUND', `No WebSocket route at ${url.pathname}; connect to /v1/sandboxes/<id>/connect.`);
  const id = match[1]!;
  checkOriginAndHost(deps.config, req);
  const caller = authenticate(deps.credentials, req, id);
  // Upgrades still waiting for their daemon count too, or a burst would all pass the cap at once.
  if (wss.clients.size + upgrading.count >= deps.config.maxConnections) {
    throw new CodedError(
      'RESOURCE_EXHAUSTED',
      `This controller holds its maximum of ${deps.config.maxConnections} connections (maxConnections); close connections you no longer use.`,
    );
  }
  const record = deps.sandboxes.record(id);
  if (record.state === 'paused')
    throw new CodedError('SANDBOX_NOT_READY', `Sandbox '${id}' is paused; resume it (POST /v1/sandboxes/${id}/resume) before connecting.`, { sandboxId: id });
  const grant = grantFor(record, caller);
  upgrading.count++;
  let agent: WebSocket;
  try {
    agent = await openAgentSocket(deps.sandboxes.socketPath(id), deps.sandboxes.agentSecret(id), 5000, { [GRANT_HEADER]: encodeGrant(grant) });
  } catch (err) {
    upgrading.count--;
    throw await unreachableDaemon(deps, id, err);
  }
  // handleUpgrade calls back synchronously (no async verifyClient here), or not at all when the
  // client went away meanwhile: then the daemon connection is closed, not leaked.
  let connected = false;
  try {
    wss.handleUpgrade(req, socket, head, (client) => {
      connected = true;
      wss.emit('connection', client, req);
      deps.metrics.connections.inc();
      client.once('close', () => deps.metrics.connections.dec());
      const observer = observeCalls(client, agent, deps.metrics);
      const check = callAccessCheck({ caller, grant: () => grant }, deps.metrics);
      relay(client, agent, {
        allowFrame: (data) => {
          const refusal = sizeRefusal(data, deps.config.maxMessageBytes) ?? check(data);
          if (refusal) observer.forget(data);
          return refusal;
        },
      });
    });
  } finally {
    upgrading.count--;
    if (!connected) agent.close();
  }
}

/**
 * Why a sandbox's daemon did not answer, as the client should act on it: a sandbox whose
 * container has ended (its daemon died, or it was stopped from outside) will not come back, so
 * that is final; anything else may pass (the engine is away or restarting the sandbox, the daemon
 * is busy), so it is retryable.
 */
async function unreachableDaemon(deps: HttpServerDeps, id: string, err: unknown): Promise<CodedError> {
  if (deps.sandboxes.engineAway) {
    return new CodedError(
      'SANDBOX_NOT_READY',
      `Sandbox '${id}' is not answering: the Docker engine is away, and Warren starts the sandbox again when it is back (its files are kept, its processes are not). Retry shortly.`,
      { sandboxId: id },
    );
  }
  const state = await deps.sandboxes.get(id).then(
    (info) => info.state,
    (e: unknown) => (e instanceof CodedError && e.code === 'SANDBOX_NOT_FOUND' ? ('gone' as const) : ('unknown' as const)),
  );
  if (state === 'unknown')
    return new CodedError(
      'SANDBOX_NOT_READY',
      `Sandbox '${id}' is not answering, and the Docker engine cannot say why: ${(err as Error).message}. Retry shortly.`,
      { sandboxId: id },
    );
  if (state === 'exited' && deps.sandboxes.willRestart(id)) {
    return new CodedError(
      'SANDBOX_NOT_READY',
      `Sandbox '${id}' stopped, and Warren is starting it again (its files are kept, its processes are not). Retry shortly.`,
      { sandboxId: id },
    );
  }
  if (state === 'exited' || state === 'gone') {
    return new CodedError(
      'SANDBOX_NOT_FOUND',
      `Sandbox '${id}' has ended: its container is ${state} (its daemon died, or it was stopped from outside). Create a new sandbox.`,
      { sandboxId: id, state },
    );
  }
  return new CodedError('SANDBOX_NOT_READY', `The sandbox daemon is not answering: ${(err as Error).message}`, { sandboxId: id });
}

/**
 * DNS-rebinding and cross-site guard for upgrades: a browser page may not open a sandbox
 * connection unless its `Origin` is allowed, and the `Host` must be an address this controller
 * answers on (IP literal, localhost, the bound host, or an allowed name).
 */
function checkOriginAndHost(config: ControllerConfig, req: IncomingMessage): void {
  const origin = req.headers.origin;
  if (origin !== undefined && !config.allowedOrigins.includes(origin)) {
    throw new CodedError(
      'FORBIDDEN',
      `WebSocket upgrades from Origin '${origin}' are refused; add it to allowedOrigins in the controller's configuration to allow it.`,
    );
  }
  const host = (req.headers.host ?? '')
    .replace(/:\d+$/, '')
    .replace(/^\[(.*)\]$/, '$1')
    .toLowerCase();
  const allowed =
    host === 'localhost' || isIP(host) !== 0 || host === config.host.toLowerCase() || config.allowedHosts.map((h) => h.toLowerCase()).includes(host);
  if (!allowed)
    throw new CodedError('FORBIDDEN', `WebSocket upgrades for Host '${host}' are refused; use the controller's address, or add the name to allowedHosts.`);
}

const UNAUTHORIZED_MESSAGE = 'Missing or invalid credential: send Authorization: Bearer <API key>, or a token of this sandbox.';

/**
 * Accepts the API key anywhere, a sandbox's token for that sandbox only, and a derived token for
 * its sandbox while it is valid. Every failure has the same 401 shape, whatever was wrong with
 * the credential.
 */
function authenticate(credentials: Credentials, req: IncomingMessage, sandboxId: string | undefined): Caller {
  const presented = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
  if (presented !== undefined) {
    if (credentials.isApiKey(presented)) return { kind: 'operator' };
    if (sandboxId !== undefined) {
      if (credentials.isSandboxToken(sandboxId, presented)) return { kind: 'sandbox', sandboxId };
      const derived = credentials.readDerivedToken(presented);
      if (derived && derived.sandboxId === sandboxId && (derived.expiresAt === undefined || derived.expiresAt > Date.now())) {
        return { kind: 'derived', sandboxId, grant: derived.grant, expiresAt: derived.expiresAt };
      }
    }
  }
  throw new CodedError('UNAUTHORIZED', UNAUTHORIZED_MESSAGE);
}

function methodNotAllowed(method: string, path: string, allowed: string): CodedError {
  return new CodedError('METHOD_NOT_ALLOWED', `${method} is not supported on ${path}; use ${allowed}.`, { allowed });
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new CodedError('FRAME_TOO_LARGE', `Request body exceeds ${MAX_BODY_BYTES} bytes.`);
    chunks.push(chunk);
  }
  if (size === 0) return {};
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new CodedError('INVALID_PARAMS', 'Request body is not valid JSON.');
  }
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text);
}

/** The one shape of every REST error: code, message, and what to do next. */
export function errorBody(err: unknown): { status: number; body: RestErrorBody } {
  const coded = err instanceof CodedError ? err : new CodedError('INTERNAL', err instanceof Error ? err.message : String(err));
  const code: ErrorCode = coded.code;
  const body: RestErrorBody = { error: { code, message: coded.message, suggestion: ERROR_CODES[code].suggestion } };
  if (coded.details) body.error.details = coded.details;
  return { status: ERROR_CODES[code].status, body };
}

function sendError(deps: HttpServerDeps, res: ServerResponse, err: unknown): void {
  const { status, body } = errorBody(err);
  deps.metrics.errors.inc({ code: body.error.code, source: 'rest' });
  if (status >= 500) deps.log('request.failed', { code: body.error.code, message: body.error.message });
  if (res.headersSent) return void res.destroy();
  // A refusal for load says when to come back (the SDK's create waits that long, then retries).
  const retryAfter = (body.error.details as { retryAfterSeconds?: unknown } | undefined)?.retryAfterSeconds;
  if (status === 429 && typeof retryAfter === 'number') res.setHeader('retry-after', String(retryAfter));
  sendJson(res, status, body);
}

function rejectUpgrade(deps: HttpServerDeps, socket: Duplex, err: unknown): void {
  const { status, body } = errorBody(err);
  deps.metrics.errors.inc({ code: body.error.code, source: 'rest' });
  const text = JSON.stringify(body);
  const reason = { 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 429: 'Too Many Requests', 503: 'Service Unavailable' }[status] ?? 'Error';
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
  );
}

/** The URL a listening server answers on. */
export function serverUrl(server: ReturnType<typeof createServer>, host: string): string {
  const { port } = server.address() as AddressInfo;
  const shown = host === '0.0.0.0' ? '127.0.0.1' : host === '::' ? '::1' : host;
  return `http://${shown.includes(':') ? `[${shown}]` : shown}:${port}`;
}
