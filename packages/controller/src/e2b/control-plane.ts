import type { IncomingMessage, ServerResponse } from 'node:http';
import type { SandboxInfo } from '@warren/protocol';
import { z } from 'zod';
import { callerFor, grantFor, routeRefusal, type Access, type Caller } from '../grants.js';
import type { HttpServerDeps } from '../http.js';
import { E2bHttpError } from './errors.js';
import { DEFAULT_E2B_HOME, type E2bTemplate } from './templates.js';

/** The envd version the gateway advertises: the SDK switches features on it (docs/e2b.md); 0.5.7 has stdin, closeStdin and octet-stream uploads. */
export const ENVD_VERSION = '0.5.7';
/** The label that records a sandbox's E2B template, so envd calls resolve paths against its home. */
export const TEMPLATE_LABEL = 'e2b-template';
/** E2B's default timeout (seconds) when a create names none. */
const DEFAULT_TIMEOUT_SECONDS = 300;
/** Warren's shortest TTL; an E2B timeout below it is raised to it. */
const MIN_TTL_SECONDS = 10;
const MAX_BODY_BYTES = 1024 * 1024;

const Timeout = z
  .number()
  .int()
  .min(0)
  .max(30 * 24 * 3600);
/** `POST /sandboxes` and `POST /v2/sandboxes`: the fields Warren acts on; the rest are checked below or ignored (docs/e2b.md). */
const NewSandbox = z.looseObject({
  templateID: z.string().min(1).max(256).optional(),
  timeout: Timeout.optional(),
  metadata: z.record(z.string(), z.string()).optional(),
  envVars: z.record(z.string(), z.string()).optional(),
  autoPause: z.boolean().optional(),
});
const TimeoutBody = z.looseObject({ timeout: Timeout.optional() });

/** What a handler gets: the request, the checked caller and the sandbox id in the path. */
interface PlaneContext {
  deps: HttpServerDeps;
  req: IncomingMessage;
  res: ServerResponse;
  query: URLSearchParams;
  id: string;
  caller: Caller;
}

interface PlaneRoute {
  method: 'GET' | 'POST' | 'DELETE' | 'PUT';
  pattern: RegExp;
  access: Access;
  handle(ctx: PlaneContext): Promise<void>;
}

const ID = '([A-Za-z0-9]+)';
const notServed =
  (what: string): PlaneRoute['handle'] =>
  async () => {
    throw new E2bHttpError(501, `${what} is not supported by Warren's E2B gateway (docs/e2b.md lists what is).`);
  };

/** E2B's control-plane REST API, served on Warren's sandboxes (paths below the gateway's prefix). */
const PLANE_ROUTES: readonly PlaneRoute[] = [
  { method: 'POST', pattern: /^\/v2\/sandboxes$/, access: 'operator', handle: create },
  { method: 'POST', pattern: /^\/sandboxes$/, access: 'operator', handle: create },
  { method: 'GET', pattern: /^\/v2\/sandboxes$/, access: 'operator', handle: (ctx) => list(ctx, true) },
  { method: 'GET', pattern: /^\/sandboxes$/, access: 'operator', handle: (ctx) => list(ctx, false) },
  { method: 'GET', pattern: new RegExp(`^/sandboxes/${ID}$`), access: 'info', handle: detail },
  { method: 'DELETE', pattern: new RegExp(`^/sandboxes/${ID}$`), access: 'lifecycle', handle: kill },
  { method: 'POST', pattern: new RegExp(`^/sandboxes/${ID}/timeout$`), access: 'lifecycle', handle: setTimeoutRoute },
  { method: 'POST', pattern: new RegExp(`^/v2/sandboxes/${ID}/connect$`), access: 'lifecycle', handle: connect },
  { method: 'POST', pattern: new RegExp(`^/sandboxes/${ID}/connect$`), access: 'lifecycle', handle: connect },
  { method: 'POST', pattern: new RegExp(`^/sandboxes/${ID}/resume$`), access: 'lifecycle', handle: connect },
  { method: 'POST', pattern: new RegExp(`^/sandboxes/${ID}/pause$`), access: 'lifecycle', handle: pause },
  { method: 'GET', pattern: new RegExp(`^/sandboxes/${ID}/metrics$`), access: 'info', handle: metrics },
  { method: 'PUT', pattern: new RegExp(`^/sandboxes/${ID}/network$`), access: 'lifecycle', handle: notServed('Changing network rules') },
  { method: 'POST', pattern: new RegExp(`^/sandboxes/${ID}/(fork|snapshots)$`), access: 'lifecycle', handle: notServed('Forks and snapshots') },
  { method: 'POST', pattern: new RegExp(`^/sandboxes/${ID}/refreshes$`), access: 'lifecycle', handle: keepalive },
];

/** Whether a gateway path (after the prefix) is the control plane's: `/sandboxes...`, `/v2/...`, templates, volumes. */
export function isControlPlanePath(path: string): boolean {
  return /^\/(v\d+\/)?(sandboxes|templates|volumes|secrets|snapshots|teams|api-keys|access-tokens)(\/|$)/.test(path);
}

/**
 * Serves one control-plane request. Authentication is Warren's own: E2B's `X-API-Key` header is
 * checked by the same `callerFor` as `Authorization: Bearer` on Warren's routes, and each route
 * names its kind of access for the same rule table.
 */
export async function serveControlPlane(deps: HttpServerDeps, req: IncomingMessage, res: ServerResponse, path: string, query: URLSearchParams): Promise<void> {
  const method = req.method ?? 'GET';
  const candidates = PLANE_ROUTES.filter((r) => r.pattern.test(path));
  if (candidates.length === 0) throw new E2bHttpError(501, `${method} ${path} is not supported by Warren's E2B gateway (docs/e2b.md lists what is).`);
  const route = candidates.find((r) => r.method === method);
  if (!route) throw new E2bHttpError(405, `${method} is not supported on ${path}; use ${candidates.map((r) => r.method).join(', ')}.`);
  const id = route.pattern.exec(path)?.[1] ?? '';
  const key = req.headers['x-api-key'];
  const caller = typeof key === 'string' ? callerFor(deps.credentials, key, id || undefined) : undefined;
  if (!caller) throw new E2bHttpError(401, 'Missing or invalid API key: set E2B_API_KEY to a Warren API key (it travels as X-API-Key).');
  if (caller.kind !== 'operator')
    throw new E2bHttpError(401, 'The control plane takes the API key only; a sandbox access token reaches that sandbox envd routes.');
  // A sandbox that does not exist is a 404 whatever the method (throws SANDBOX_NOT_FOUND).
  if (id) deps.sandboxes.record(id);
  const refusal = routeRefusal({ caller, grant: () => grantFor(deps.sandboxes.record(id), caller) }, route.access, `${method} ${path}`);
  if (refusal) throw new E2bHttpError(403, refusal.message);
  await route.handle({ deps, req, res, query, id, caller });
}

/** The configured template a name maps to, or E2B's 404 naming the templates there are. */
export function templateFor(deps: HttpServerDeps, name: string): E2bTemplate {
  const templates = deps.config.e2bTemplates;
  const template = Object.hasOwn(templates, name) ? templates[name] : undefined;
  if (!template)
    throw new E2bHttpError(
      404,
      `Template '${name}' not found. This Warren serves: ${Object.keys(templates).join(', ')} (e2bTemplates in the controller's configuration).`,
    );
  return template;
}

/** The home folder of a sandbox made through the gateway: its template's, else its workspace, else Warren's default root. */
export function homeOf(deps: HttpServerDeps, labels: Record<string, string>): string {
  const name = labels[TEMPLATE_LABEL];
  const templates = deps.config.e2bTemplates;
  const template = name !== undefined && Object.hasOwn(templates, name) ? templates[name] : undefined;
  return template?.home ?? template?.create?.workspace ?? DEFAULT_E2B_HOME;
}

async function create({ deps, req, res }: PlaneContext): Promise<void> {
  const body = parse(NewSandbox, await readJson(req), 'create request');
  if (body.autoPause === true)
    throw new E2bHttpError(
      501,
      'autoPause (pause on timeout) is not supported by Warren: a sandbox is killed when its timeout passes. Create it without autoPause.',
    );
  const templateID = body.templateID ?? 'base';
  const template = templateFor(deps, templateID);
  const base = template.create ?? {};
  const labels: Record<string, string> = { ...base.labels, ...body.metadata, [TEMPLATE_LABEL]: templateID };
  const created = await deps.sandboxes.create({
    ...base,
    env: { ...base.env, ...body.envVars },
    labels,
    ttlSeconds: Math.max(MIN_TTL_SECONDS, body.timeout ?? DEFAULT_TIMEOUT_SECONDS),
  });
  deps.logger.info({ sandboxId: created.id, image: created.image, template: templateID, readyMs: created.readyMs }, 'sandbox.created');
  json(res, 201, { ...sandboxObject(created, templateID), envdAccessToken: created.token });
}

async function list({ deps, res, query }: PlaneContext, paged: boolean): Promise<void> {
  const states = (query.get('state') ?? 'running,paused').split(',').filter(Boolean);
  const metadata = metadataFilter(query.get('metadata'));
  let all = (await deps.sandboxes.find({ labels: metadata })).filter((s) => states.includes(s.state));
  all = all.sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
  if (!paged)
    return json(
      res,
      200,
      all.map((s) => listed(deps, s)),
    );
  const limit = Math.min(Math.max(Number.parseInt(query.get('limit') ?? '100', 10) || 100, 1), 1000);
  const start = Math.max(Number.parseInt(query.get('nextToken') ?? '0', 10) || 0, 0);
  const page = all.slice(start, start + limit);
  if (start + limit < all.length) res.setHeader('x-next-token', String(start + limit));
  json(
    res,
    200,
    page.map((s) => listed(deps, s)),
  );
}

async function detail({ deps, res, id }: PlaneContext): Promise<void> {
  const info = await deps.sandboxes.get(id);
  json(res, 200, { ...listed(deps, info), envdAccessToken: deps.credentials.sandboxToken(id), domain: null });
}

async function kill({ deps, res, id }: PlaneContext): Promise<void> {
  await deps.sandboxes.kill(id);
  deps.logger.info({ sandboxId: id }, 'sandbox.killed');
  res.writeHead(204).end();
}

async function setTimeoutRoute({ deps, req, res, id }: PlaneContext): Promise<void> {
  const body = parse(TimeoutBody, await readJson(req), 'timeout request');
  await deps.sandboxes.setTimeout(id, Math.max(MIN_TTL_SECONDS, body.timeout ?? DEFAULT_TIMEOUT_SECONDS));
  res.writeHead(204).end();
}

async function keepalive({ deps, res, id }: PlaneContext): Promise<void> {
  await deps.sandboxes.keepalive(id);
  res.writeHead(204).end();
}

/**
 * E2B's metrics: Warren's short history of engine samples of this sandbox (the controller samples
 * every `usage.sampleSeconds`), ending with one taken now, as `SandboxMetric`s; `start` / `end`
 * (Unix seconds) narrow it as on E2B. Disk fields come from the workspace disk where the sandbox
 * has one of its own, else 0.
 */
async function metrics({ deps, res, id, query }: PlaneContext): Promise<void> {
  await deps.sandboxes.usage(id);
  const { cpus } = deps.sandboxes.record(id).settings;
  const bound = (name: string) => {
    const text = query.get(name);
    const value = text === null ? NaN : Number(text);
    return Number.isFinite(value) ? value * 1000 : undefined;
  };
  const start = bound('start') ?? -Infinity;
  const end = bound('end') ?? Infinity;
  json(
    res,
    200,
    deps.sandboxes.usageHistory
      .list(id)
      .filter((sample) => Date.parse(sample.time) >= start && Date.parse(sample.time) <= end)
      .map((sample) => ({
        timestamp: sample.time,
        timestampUnix: Math.floor(Date.parse(sample.time) / 1000),
        cpuCount: Math.max(1, Math.ceil(cpus)),
        cpuUsedPct: sample.cpuPercent ?? 0,
        memUsed: sample.memoryBytes,
        memTotal: sample.memoryLimitBytes ?? 0,
        diskUsed: sample.disk?.usedBytes ?? 0,
        diskTotal: sample.disk?.limitBytes ?? 0,
      })),
  );
}

/** Connect (and the older resume): resumes a paused sandbox (201), or extends a running one's end, never shortening it (200). */
async function connect({ deps, req, res, id }: PlaneContext): Promise<void> {
  const body = parse(TimeoutBody, await readJson(req), 'connect request');
  let info = await deps.sandboxes.get(id);
  const resumed = info.state === 'paused';
  if (resumed) info = await deps.sandboxes.resume(id);
  if (info.state !== 'running') throw new E2bHttpError(404, `Sandbox '${id}' is ${info.state}; it cannot be connected to. Create a new sandbox.`);
  const wanted = Math.max(MIN_TTL_SECONDS, body.timeout ?? DEFAULT_TIMEOUT_SECONDS);
  const left = Math.ceil((Date.parse(info.expiresAt) - Date.now()) / 1000);
  if (wanted > left) info = await deps.sandboxes.setTimeout(id, wanted);
  json(res, resumed ? 201 : 200, { ...sandboxObject(info, info.labels[TEMPLATE_LABEL] ?? 'base'), envdAccessToken: deps.credentials.sandboxToken(id) });
}

async function pause({ deps, res, id }: PlaneContext): Promise<void> {
  if (deps.sandboxes.record(id).state === 'paused') throw new E2bHttpError(409, `Sandbox '${id}' is already paused.`);
  await deps.sandboxes.pause(id);
  res.writeHead(204).end();
}

/** E2B's Sandbox object (create and connect answers). */
function sandboxObject(info: SandboxInfo, templateID: string): Record<string, unknown> {
  return { sandboxID: info.id, templateID, alias: templateID, clientID: 'warren', envdVersion: ENVD_VERSION, trafficAccessToken: null, domain: null };
}

/** E2B's ListedSandbox (list answers; the detail adds its token). */
function listed(deps: HttpServerDeps, info: SandboxInfo): Record<string, unknown> {
  const { [TEMPLATE_LABEL]: template, ...metadata } = info.labels;
  return {
    sandboxID: info.id,
    templateID: template ?? info.image,
    alias: template ?? info.image,
    clientID: 'warren',
    startedAt: info.createdAt,
    endAt: info.expiresAt,
    state: info.state === 'paused' ? 'paused' : 'running',
    cpuCount: Math.max(1, Math.round(info.settings.cpus)),
    memoryMB: info.settings.memoryMb,
    diskSizeMB: info.settings.diskMb ?? 0,
    envdVersion: ENVD_VERSION,
    metadata,
    volumeMounts: [],
  };
}

/**
 * `?metadata=`: E2B's SDK sends `key=value&key2=value2`, each key and value URL-encoded, as one
 * more URL-encoded parameter; `URLSearchParams` undid the outer layer already.
 */
export function metadataFilter(raw: string | null): Record<string, string> {
  if (!raw) return {};
  const pairs: [string, string][] = [];
  for (const [key, value] of new URLSearchParams(raw)) pairs.push([safeDecode(key), safeDecode(value)]);
  return Object.fromEntries(pairs);
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    throw new E2bHttpError(400, `The metadata filter '${text}' is not URL-encoded text.`);
  }
}

function parse<T extends z.ZodType>(schema: T, body: unknown, what: string): z.output<T> {
  const parsed = schema.safeParse(body);
  if (!parsed.success)
    throw new E2bHttpError(400, `Invalid ${what}: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; ')}.`);
  return parsed.data;
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new E2bHttpError(413, `The request body exceeds ${MAX_BODY_BYTES} bytes.`);
    chunks.push(chunk);
  }
  if (size === 0) return {};
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new E2bHttpError(400, 'The request body is not valid JSON.');
  }
}

/** Answers with a JSON body. */
export function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text);
}
