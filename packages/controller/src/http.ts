import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { CodedError, ERROR_CODES, REST_PATHS, WS_MAX_PAYLOAD_BYTES, type ErrorCode, type RestErrorBody } from '@warren/protocol';
import { WebSocketServer, type WebSocket } from 'ws';
import { openAgentSocket } from './agent-link.js';
import { relay } from './relay.js';
import type { Credentials } from './credentials.js';
import type { SandboxService } from './sandboxes.js';

const MAX_BODY_BYTES = 1024 * 1024;

/** Who is calling: the operator (API key) or the holder of one sandbox's token. */
type Caller = { kind: 'operator' } | { kind: 'sandbox'; sandboxId: string };

export interface HttpServerDeps {
  sandboxes: SandboxService;
  credentials: Credentials;
  log: (event: string, fields?: Record<string, unknown>) => void;
}

/** The REST API and the WebSocket relay to each sandbox's daemon, on one node:http server. */
export function createHttpServer(deps: HttpServerDeps) {
  const wss = new WebSocketServer({ noServer: true, maxPayload: WS_MAX_PAYLOAD_BYTES, perMessageDeflate: false });

  const server = createServer((req, res) => {
    route(deps, req, res).catch((err: unknown) => sendError(res, err));
  });

  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    upgrade(deps, wss, req, socket, head).catch((err: unknown) => rejectUpgrade(socket, err));
  });

  return { server, wss };
}

async function route(deps: HttpServerDeps, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://controller');
  const method = req.method ?? 'GET';
  if (url.pathname === REST_PATHS.healthz && method === 'GET') return sendJson(res, 200, { status: 'ok' });

  const match = /^\/v1\/sandboxes(?:\/([A-Za-z0-9]+))?$/.exec(url.pathname);
  if (!match) throw new CodedError('NOT_FOUND', `No route ${method} ${url.pathname}.`);
  const id = match[1];
  const caller = authenticate(deps.credentials, req, id);

  if (!id) {
    if (method !== 'POST') throw methodNotAllowed(method, url.pathname);
    requireOperator(caller);
    const created = await deps.sandboxes.create(await readJson(req));
    deps.log('sandbox.created', { sandboxId: created.id, image: created.image, readyMs: created.readyMs });
    return sendJson(res, 201, created);
  }
  if (method === 'GET') return sendJson(res, 200, await deps.sandboxes.get(id));
  if (method === 'DELETE') {
    await deps.sandboxes.kill(id);
    deps.log('sandbox.killed', { sandboxId: id });
    res.writeHead(204).end();
    return;
  }
  throw methodNotAllowed(method, url.pathname);
}

async function upgrade(deps: HttpServerDeps, wss: WebSocketServer, req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://controller');
  const match = /^\/v1\/sandboxes\/([A-Za-z0-9]+)\/connect$/.exec(url.pathname);
  if (!match) throw new CodedError('NOT_FOUND', `No WebSocket route at ${url.pathname}.`);
  const id = match[1]!;
  authenticate(deps.credentials, req, id);
  if (!deps.sandboxes.has(id)) throw new CodedError('SANDBOX_NOT_FOUND', `No sandbox '${id}'.`);
  const agent = await openAgentSocket(deps.sandboxes.socketPath(id), deps.credentials.agentSecret(id)).catch((err: unknown) => {
    throw new CodedError('SANDBOX_NOT_READY', `The sandbox daemon is not answering: ${(err as Error).message}`, { sandboxId: id });
  });
  wss.handleUpgrade(req, socket, head, (client) => relay(client, agent));
}

/**
 * Accepts the API key anywhere, and a sandbox's token for that sandbox only. Every failure has
 * the same 401 shape, whatever was wrong with the credential.
 */
function authenticate(credentials: Credentials, req: IncomingMessage, sandboxId: string | undefined): Caller {
  const presented = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
  if (presented !== undefined) {
    if (credentials.isApiKey(presented)) return { kind: 'operator' };
    if (sandboxId !== undefined && credentials.isSandboxToken(sandboxId, presented)) return { kind: 'sandbox', sandboxId };
  }
  throw new CodedError('UNAUTHORIZED', 'Missing or invalid credential: send Authorization: Bearer <API key>, or the sandbox token for its own sandbox.');
}

function requireOperator(caller: Caller): void {
  if (caller.kind !== 'operator') throw new CodedError('FORBIDDEN', 'Only the API key may create sandboxes; a sandbox token reaches its own sandbox only.');
}

function methodNotAllowed(method: string, path: string): CodedError {
  return new CodedError('INVALID_PARAMS', `${method} is not supported on ${path}.`);
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

function sendError(res: ServerResponse, err: unknown): void {
  const { status, body } = errorBody(err);
  if (res.headersSent) return void res.destroy();
  sendJson(res, status, body);
}

function rejectUpgrade(socket: Duplex, err: unknown): void {
  const { status, body } = errorBody(err);
  const text = JSON.stringify(body);
  socket.end(`HTTP/1.1 ${status} ${status === 401 ? 'Unauthorized' : 'Error'}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`);
}

/** The URL a listening server answers on. */
export function serverUrl(server: ReturnType<typeof createServer>, host: string): string {
  const { port } = server.address() as AddressInfo;
  return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
}
