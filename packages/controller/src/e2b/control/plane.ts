import { requireScope } from '../../tenancy/scopes.js';
import type { Scope } from '../../tenancy/principals.js';
import { listedTenant } from '../../tenancy/reach.js';
import { checkReach } from '../../tenancy/reach.js';
import { ownerOf, tenantOf, type Owner } from '../../tenancy/owner.js';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { CodedError, type CreateSandboxRequest, type SandboxInfo } from '@warren/protocol';
import { z } from 'zod';
import { callerFor, grantFor, routeRefusal, type Access, type Caller } from '../../grants.js';
import type { HttpServerDeps } from '../../server-context.js';
import { E2bHttpError } from '../errors.js';
import { serveE2bEvents } from './events.js';
import { serveE2bLogs } from './logs.js';
import { serveE2bWebhooks } from './webhooks.js';
import { json, parse, readJson } from '../http-util.js';
import { E2bNetwork, e2bFromEgress, egressFromE2b } from './network.js';
import { createSnapshot, createVolume, deleteTemplate, deleteVolume, fork, getVolume, listSnapshots, listVolumes, type StateContext } from './state.js';
import { ENVD_VERSION, TEMPLATE_LABEL, type E2bTemplate } from '../templates.js';
import { builtTemplate } from '../template-builds/names.js';
import { HELPER_LABEL, type VolumeContent } from './volume-content.js';

/** E2B's default timeout (seconds) when a create names none. */
const DEFAULT_TIMEOUT_SECONDS = 300;
/** Warren's shortest TTL; an E2B timeout below it is raised to it. */
const MIN_TTL_SECONDS = 10;

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
  autoPauseMemory: z.boolean().optional(),
  autoResume: z.looseObject({ enabled: z.boolean().optional() }).nullish(),
  allow_internet_access: z.boolean().optional(),
  network: E2bNetwork.nullish(),
  volumeMounts: z
    .array(z.looseObject({ name: z.string().max(256), path: z.string().max(4096) }))
    .max(16)
    .nullish(),
  mcp: z.record(z.string(), z.unknown()).nullish(),
  iam: z.looseObject({ tokens: z.record(z.string(), z.unknown()).optional() }).nullish(),
});
const TimeoutBody = z.looseObject({ timeout: Timeout.optional() });

/** What a handler gets: the request, the checked caller and the sandbox id in the path. */
interface PlaneContext {
  deps: HttpServerDeps;
  req: IncomingMessage;
  res: ServerResponse;
  query: URLSearchParams;
  id: string;
  /** Another resource in the path (a snapshot, template or volume), decoded; empty on routes without one. */
  ref: string;
  caller: Caller;
  /** The calling API key's id: it owns snapshots and volumes. */
  owner: Owner | undefined;
  volumeContent?: VolumeContent | undefined;
}

interface PlaneRoute {
  method: 'GET' | 'POST' | 'DELETE' | 'PUT' | 'PATCH';
  /** `(?<id>...)` captures a sandbox id (which must exist), `(?<ref>...)` another resource. */
  pattern: RegExp;
  access: Access;
  /** The scope a key needs besides (tenancy/principals.ts), as on Warren's own route that does the same. */
  scope?: Scope;
  handle(ctx: PlaneContext): Promise<void>;
}

const ID = '(?<id>[A-Za-z0-9]+)';
const REF = '(?<ref>[^/]+)';
const notServed =
  (what: string): PlaneRoute['handle'] =>
  async () => {
    throw new E2bHttpError(501, `${what} is not supported by Warren's E2B gateway (docs/e2b.md lists what is).`);
  };
const state = (handler: (ctx: StateContext) => Promise<void>): PlaneRoute['handle'] => handler;

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
  {
    method: 'GET',
    pattern: new RegExp(`^/v2/sandboxes/${ID}/logs$`),
    access: 'audit',
    handle: (ctx) => serveE2bLogs(ctx.deps, ctx.res, ctx.id, ctx.query, ctx.caller, true),
  },
  {
    method: 'GET',
    pattern: new RegExp(`^/sandboxes/${ID}/logs$`),
    access: 'audit',
    handle: (ctx) => serveE2bLogs(ctx.deps, ctx.res, ctx.id, ctx.query, ctx.caller, false),
  },
  { method: 'PUT', pattern: new RegExp(`^/sandboxes/${ID}/network$`), access: 'lifecycle', handle: updateNetwork },
  { method: 'POST', pattern: new RegExp(`^/sandboxes/${ID}/network$`), access: 'lifecycle', handle: updateNetwork },
  // Snapshots and forks are the API key's, as on Warren's own routes (`operator`).
  { method: 'POST', pattern: new RegExp(`^/sandboxes/${ID}/snapshots$`), access: 'operator', scope: 'snapshots', handle: state(createSnapshot) },
  { method: 'POST', pattern: new RegExp(`^/sandboxes/${ID}/fork$`), access: 'operator', scope: 'snapshots', handle: (ctx) => fork(ctx, createdObject) },
  { method: 'GET', pattern: /^\/snapshots$/, access: 'operator', scope: 'snapshots', handle: state(listSnapshots) },
  { method: 'DELETE', pattern: new RegExp(`^/templates/${REF}$`), access: 'operator', scope: 'snapshots', handle: state(deleteTemplate) },
  { method: 'POST', pattern: /^\/volumes$/, access: 'operator', scope: 'volumes', handle: state(createVolume) },
  { method: 'GET', pattern: /^\/volumes$/, access: 'operator', scope: 'volumes', handle: state(listVolumes) },
  { method: 'GET', pattern: new RegExp(`^/volumes/${REF}$`), access: 'operator', scope: 'volumes', handle: state(getVolume) },
  { method: 'DELETE', pattern: new RegExp(`^/volumes/${REF}$`), access: 'operator', scope: 'volumes', handle: state(deleteVolume) },
  { method: 'POST', pattern: new RegExp(`^/sandboxes/${ID}/refreshes$`), access: 'lifecycle', handle: keepalive },
  // Events of sandboxes that may be gone: the id is a `ref`, not checked to exist.
  {
    method: 'GET',
    pattern: /^\/events\/sandboxes$/,
    access: 'operator',
    handle: async (ctx) => serveE2bEvents(ctx.deps, ctx.res, ctx.query, ctx.caller, undefined),
  },
  {
    method: 'GET',
    pattern: /^\/events\/sandboxes\/(?<ref>[A-Za-z0-9]+)$/,
    access: 'operator',
    handle: async (ctx) => serveE2bEvents(ctx.deps, ctx.res, ctx.query, ctx.caller, ctx.ref),
  },
  // Webhooks in E2B's words over Warren's registry (webhooks.ts).
  ...(['GET', 'POST'] as const).map((method): PlaneRoute => ({
    method,
    pattern: /^\/events\/webhooks$/,
    access: 'operator',
    handle: (ctx) => serveE2bWebhooks(ctx.deps, ctx.req, ctx.res, ctx.caller, undefined),
  })),
  ...(['GET', 'PATCH', 'DELETE'] as const).map((method): PlaneRoute => ({
    method,
    pattern: /^\/events\/webhooks\/(?<ref>[^/]+)$/,
    access: 'operator',
    handle: (ctx) => serveE2bWebhooks(ctx.deps, ctx.req, ctx.res, ctx.caller, ctx.ref),
  })),
  // Template builds, lists and their deletes are template-builds.ts's; what it does not serve is refused here.
  { method: 'POST', pattern: /^\/(v\d+\/)?templates(\/.*)?$/, access: 'operator', handle: notServed('This template route (tags, the v1 Dockerfile API)') },
  { method: 'GET', pattern: /^\/(v\d+\/)?templates(\/.*)?$/, access: 'operator', handle: notServed('This template route (build logs, ...)') },
  { method: 'PUT', pattern: /^\/(v\d+\/)?templates(\/.*)?$/, access: 'operator', handle: notServed('Changing templates') },
  {
    method: 'GET',
    pattern: /^\/secrets(\/[^/]+)?$/,
    access: 'operator',
    handle: notServed("E2B's secrets (Secret.*; use Warren's brokered secrets, POST /v1/sandboxes with secrets)"),
  },
  {
    method: 'POST',
    pattern: /^\/secrets(\/[^/]+)?$/,
    access: 'operator',
    handle: notServed("E2B's secrets (Secret.*; use Warren's brokered secrets, POST /v1/sandboxes with secrets)"),
  },
  {
    method: 'DELETE',
    pattern: /^\/secrets(\/[^/]+)?$/,
    access: 'operator',
    handle: notServed("E2B's secrets (Secret.*; use Warren's brokered secrets, POST /v1/sandboxes with secrets)"),
  },
];

/** Whether a gateway path (after the prefix) is the control plane's: `/sandboxes...`, `/v2/...`, templates, volumes. */
export function isControlPlanePath(path: string): boolean {
  return /^\/(v\d+\/)?(sandboxes|templates|volumes|secrets|snapshots|teams|api-keys|access-tokens|events)(\/|$)/.test(path);
}

/**
 * Serves one control-plane request. Authentication is Warren's own: E2B's `X-API-Key` header is
 * checked by the same `callerFor` as `Authorization: Bearer` on Warren's routes, and each route
 * names its kind of access for the same rule table.
 */
export async function serveControlPlane(
  deps: HttpServerDeps,
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  query: URLSearchParams,
  volumeContent?: VolumeContent,
): Promise<void> {
  const method = req.method ?? 'GET';
  const candidates = PLANE_ROUTES.filter((r) => r.pattern.test(path));
  if (candidates.length === 0) throw new E2bHttpError(501, `${method} ${path} is not supported by Warren's E2B gateway (docs/e2b.md lists what is).`);
  const route = candidates.find((r) => r.method === method);
  if (!route) throw new E2bHttpError(405, `${method} is not supported on ${path}; use ${candidates.map((r) => r.method).join(', ')}.`);
  const groups = route.pattern.exec(path)?.groups ?? {};
  const id = groups.id ?? '';
  const ref = decodeRef(groups.ref);
  const key = req.headers['x-api-key'];
  const caller = typeof key === 'string' ? callerFor(deps.credentials, key, id || undefined) : undefined;
  if (!caller) throw new E2bHttpError(401, 'Missing or invalid API key: set E2B_API_KEY to a Warren API key (it travels as X-API-Key).');
  if (caller.kind !== 'operator')
    throw new E2bHttpError(401, 'The control plane takes the API key only; a sandbox access token reaches that sandbox envd routes.');
  // A sandbox that does not exist is a 404 whatever the method (throws SANDBOX_NOT_FOUND), and so is another tenant's.
  if (id) checkReach(deps.credentials.keys, caller, deps.sandboxes.record(id));
  const refusal = routeRefusal({ caller, grant: () => grantFor(deps.sandboxes.record(id), caller) }, route.access, `${method} ${path}`);
  if (refusal) throw new E2bHttpError(403, refusal.message);
  if (route.scope) requireScope(caller, route.scope, `${method} ${path}`, id ? deps.sandboxes.record(id) : undefined);
  await route.handle({ deps, req, res, query, id, ref, caller, owner: ownerOf(caller), volumeContent });
}

/** A resource segment of a path, percent-decoded (the services check it is a plain name). */
function decodeRef(segment: string | undefined): string {
  if (segment === undefined) return '';
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new E2bHttpError(400, `'${segment.slice(0, 64)}' in the path is not valid percent-encoding.`);
  }
}

/** The configured template a name maps to, or E2B's 404 naming the templates there are. */
export function templateFor(deps: HttpServerDeps, name: string): E2bTemplate {
  const templates = deps.config.e2bTemplates;
  const template = Object.hasOwn(templates, name) ? templates[name] : undefined;
  if (!template)
    throw new E2bHttpError(
      404,
      `Template '${name}' not found. This Warren serves: ${Object.keys(templates).join(', ')} (e2bTemplates in the controller's configuration), the templates this tenant built (Template.build), and its snapshots by id or name.`,
    );
  return template;
}

async function create({ deps, req, res, owner }: PlaneContext): Promise<void> {
  const body = parse(NewSandbox, await readJson(req), 'create request');
  const lifecycle = lifecycleOf(body);
  if (body.mcp !== undefined && body.mcp !== null && Object.keys(body.mcp).length > 0)
    throw new E2bHttpError(
      501,
      // The SDK's own words when its MCP gateway does not start, so programs that look for them see them.
      "Failed to start MCP gateway: E2B's MCP gateway (mcp, the mcp-gateway template) is not supported by Warren's E2B gateway; run MCP servers as commands in the sandbox. Create it without mcp.",
    );
  if (body.iam?.tokens !== undefined && Object.keys(body.iam.tokens).length > 0)
    throw new E2bHttpError(
      501,
      "Workload identity tokens (iam) are not supported by Warren's E2B gateway; use Warren's brokered secrets. Create it without iam.",
    );
  const templateID = body.templateID ?? 'base';
  const timeout = Math.max(MIN_TTL_SECONDS, body.timeout ?? DEFAULT_TIMEOUT_SECONDS);
  const volumes = (body.volumeMounts ?? []).map((mount) => ({ name: mount.name, path: mount.path, readOnly: false }));
  const named = body.network !== undefined && body.network !== null;
  const egress = named || body.allow_internet_access !== undefined ? egressFromE2b(body.network ?? {}, body.allow_internet_access) : undefined;
  // A create that names its network gets a relay to the egress gateway even when it denies everything, so updateNetwork can open it later.
  let relay = egress !== undefined && deps.sandboxes.egress !== undefined;
  let request: CreateSandboxRequest;
  // A configured template first, then one the caller's tenant built (docs/e2b.md#templates), then a snapshot.
  const built = Object.hasOwn(deps.config.e2bTemplates, templateID) ? undefined : await builtTemplate(deps, owner, templateID);
  if (built !== undefined || Object.hasOwn(deps.config.e2bTemplates, templateID) || !deps.snapshots) {
    const base = built ?? templateFor(deps, templateID).create ?? {};
    request = {
      ...base,
      env: { ...base.env, ...body.envVars },
      labels: { ...base.labels, ...body.metadata, [TEMPLATE_LABEL]: templateID },
      ttlSeconds: timeout,
      ...lifecycle,
      ...rootFor(deps, owner),
      ...(volumes.length > 0 ? { volumes: [...(base.volumes ?? []), ...volumes] } : {}),
      ...(egress === undefined ? {} : { egress }),
    };
  } else {
    // Not a configured template: one of the calling key's snapshots (Sandbox.create(snapshotId)), with its own settings and labels.
    const snapshot = snapshotFor(deps, owner, templateID);
    // A snapshot of a sandbox linked to the egress gateway gives the new sandbox that link too.
    relay ||= snapshot.linked && deps.sandboxes.egress !== undefined;
    request = {
      snapshot: snapshot.id,
      labels: { ...snapshot.sandboxLabels, ...body.metadata },
      ttlSeconds: timeout,
      ...lifecycle,
      ...(body.envVars === undefined ? {} : { env: body.envVars }),
      ...(volumes.length > 0 ? { volumes } : {}),
      ...(egress === undefined ? {} : { egress }),
    };
  }
  const created = await (
    deps.snapshots ? deps.snapshots.createSandbox(request, owner, relay ? { relay } : {}) : deps.sandboxes.create(request, relay ? { relay, owner } : { owner })
  ).catch((err: unknown) => {
    throw egress?.mode === 'open' ? openRefused(err) : err;
  });
  deps.logger.info({ sandboxId: created.id, image: created.image, template: templateID, readyMs: created.readyMs }, 'sandbox.created');
  json(res, 201, createdObject(created, templateID));
}

/**
 * E2B's lifecycle as Warren's: `autoPause` (the SDK's `lifecycle.onTimeout: 'pause'`) is
 * `onTimeout: 'hibernate'`, a sandbox hibernated instead of killed when its time runs out;
 * `autoResume.enabled` is `wakeOnCall` (off unless asked, as on E2B: then only `Sandbox.connect`
 * resumes it). Memory and processes are not kept either way (docs/e2b.md#lifecycle).
 */
function lifecycleOf(body: z.infer<typeof NewSandbox>): Pick<CreateSandboxRequest, 'onTimeout' | 'wakeOnCall'> {
  const autoResume = body.autoResume?.enabled === true;
  if (autoResume && body.autoPause !== true)
    throw new E2bHttpError(400, "autoResume can only be true when the sandbox pauses on timeout (lifecycle.onTimeout: 'pause', autoPause: true).");
  if (autoResume && body.autoPauseMemory === false)
    throw new E2bHttpError(400, 'autoResume cannot be combined with autoPauseMemory: false (keepMemory: false); resume such a sandbox with Sandbox.connect.');
  return body.autoPause === true ? { onTimeout: 'hibernate', wakeOnCall: autoResume } : {};
}

/** The calling key's snapshot a template id names, or E2B's 404 naming the templates there are (never another key's). */
/**
 * E2B gives root (user 'root', sudo) in every sandbox; Warren where the operator allows it for the
 * tenant and the engine maps a container's root to an unprivileged host uid. Not under gVisor:
 * there `sudo` meets a no-new-privileges flag it cannot clear, so E2B programs would half work.
 */
function rootFor(deps: HttpServerDeps, owner: Owner | undefined): Pick<CreateSandboxRequest, 'root'> {
  return deps.sandboxes.launcher.rootRuntime(tenantOf(owner)) === 'runc' ? { root: true } : {};
}

function snapshotFor(deps: HttpServerDeps, owner: Owner | undefined, ref: string): { id: string; sandboxLabels: Record<string, string>; linked: boolean } {
  try {
    if (owner === undefined) throw new CodedError('SNAPSHOT_NOT_FOUND', 'no key');
    const record = deps.snapshots!.store.require(owner.tenant, ref);
    return { id: record.id, sandboxLabels: record.sandboxLabels ?? {}, linked: record.egress !== undefined };
  } catch (err) {
    if (err instanceof CodedError && (err.code === 'SNAPSHOT_NOT_FOUND' || err.code === 'INVALID_PARAMS')) templateFor(deps, ref);
    throw err;
  }
}

/** The operator's refusal of an open network, with what an E2B program should send instead; any other error as it is. */
function openRefused(err: unknown): unknown {
  if (!(err instanceof CodedError) || err.code !== 'FORBIDDEN' || !/Egress mode 'open'/.test(err.message)) return err;
  return new E2bHttpError(
    403,
    `${err.message} On E2B a network that does not deny all traffic allows all of it; to allow only some hosts, send allowOut with the host names and denyOut: ['0.0.0.0/0'].`,
  );
}

/** E2B's answer to a create or fork: the Sandbox object with its access token. */
function createdObject(created: SandboxInfo & { token: string }, templateID: string): Record<string, unknown> {
  return sandboxObject(created, templateID, created.token);
}

/**
 * `PUT /sandboxes/{id}/network` (`Sandbox.updateNetwork`, which replaces the whole configuration):
 * E2B's settings as Warren's egress policy (see {@link egressFromE2b}), through the same
 * `updateEgress` as `POST /v1/sandboxes/{id}/network`, within the operator's `egress.maxMode`.
 */
async function updateNetwork({ deps, req, res, id, caller }: PlaneContext): Promise<void> {
  const body = parse(E2bNetwork, await readJson(req), 'network update');
  const policy = egressFromE2b(body);
  if (policy.mode === 'open') requireScope(caller, 'egress:open', "Egress mode 'open'", deps.sandboxes.record(id));
  if (!deps.sandboxes.egressOf(id))
    throw new E2bHttpError(
      400,
      deps.sandboxes.egress
        ? `Sandbox '${id}' was created without a network configuration, so it has no link to Warren's egress gateway and its network cannot change. Create it with network (e.g. { denyOut: ['0.0.0.0/0'] }) or allowInternetAccess to update it later.`
        : "This Warren controller runs no egress gateway, so a sandbox's network cannot change.",
    );
  try {
    const updated = await deps.sandboxes.updateEgress(id, policy);
    deps.logger.info({ sandboxId: id, mode: updated.policy.mode, version: updated.version }, 'sandbox.egress-updated');
  } catch (err) {
    throw policy.mode === 'open' ? openRefused(err) : err;
  }
  res.writeHead(204).end();
}

/**
 * `GET /v2/sandboxes` (`Sandbox.list`) and the older `GET /sandboxes`: the caller's tenant's
 * sandboxes, filtered by `state` (running and paused by default, repeated or comma-separated),
 * `metadata`, `template` (the template name or, for a sandbox made from a snapshot, the image)
 * and `startedAfter`, sorted by start time, newest first unless `order=asc`, across the whole
 * set before paging, as E2B does. `nextToken` is the offset of the next page.
 */
async function list({ deps, res, query, caller }: PlaneContext, paged: boolean): Promise<void> {
  const states = query
    .getAll('state')
    .flatMap((s) => s.split(','))
    .filter(Boolean);
  const wanted = states.length > 0 ? states : ['running', 'paused'];
  const metadata = metadataFilter(query.get('metadata'));
  const template = query.get('template');
  const order = query.get('order') ?? 'desc';
  if (order !== 'asc' && order !== 'desc') throw new E2bHttpError(400, `order must be asc or desc, not '${order.slice(0, 32)}'.`);
  const startedAfter = timeFilter(query.get('startedAfter'));
  // A volume's content helper (docs/e2b.md#volumes) is the gateway's own, not the program's.
  let all = (await deps.sandboxes.find({ labels: metadata, tenant: listedTenant(caller) })).filter(
    (s) =>
      wanted.includes(e2bState(s)) &&
      !Object.hasOwn(s.labels, HELPER_LABEL) &&
      (template === null || (s.labels[TEMPLATE_LABEL] ?? s.image) === template) &&
      (startedAfter === undefined || Date.parse(s.createdAt) >= startedAfter),
  );
  const direction = order === 'asc' ? 1 : -1;
  all = all.sort((a, b) => direction * (Date.parse(a.createdAt) - Date.parse(b.createdAt) || a.id.localeCompare(b.id)));
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
  const { network, allowInternetAccess } = e2bFromEgress(deps.sandboxes.egressOf(id)?.policy);
  const pauses = info.settings.onTimeout === 'hibernate';
  json(res, 200, {
    ...listed(deps, info),
    envdAccessToken: deps.credentials.sandboxToken(id),
    domain: null,
    network,
    allowInternetAccess,
    lifecycle: { onTimeout: pauses ? 'pause' : 'kill', autoResume: pauses && info.settings.wakeOnCall !== false },
  });
}

async function kill({ deps, res, id }: PlaneContext): Promise<void> {
  await deps.sandboxes.kill(id);
  deps.logger.info({ sandboxId: id }, 'sandbox.killed');
  res.writeHead(204).end();
}

/** `setTimeout`: the end becomes now + timeout, shorter or longer, as on E2B (the SDK sends whole seconds; at least 1). */
async function setTimeoutRoute({ deps, req, res, id }: PlaneContext): Promise<void> {
  const body = parse(TimeoutBody, await readJson(req), 'timeout request');
  await deps.sandboxes.setTimeout(id, Math.max(1, body.timeout ?? DEFAULT_TIMEOUT_SECONDS));
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
  // Paused by the caller, or hibernated when its time ran out (autoPause): either resumes here.
  const resumed = info.state === 'paused' || info.timedOut === true;
  if (resumed) info = await deps.sandboxes.resume(id);
  if (info.state !== 'running') throw new E2bHttpError(404, `Sandbox '${id}' is ${info.state}; it cannot be connected to. Create a new sandbox.`);
  const wanted = Math.max(MIN_TTL_SECONDS, body.timeout ?? DEFAULT_TIMEOUT_SECONDS);
  const left = Math.ceil((Date.parse(info.expiresAt) - Date.now()) / 1000);
  if (wanted > left) info = await deps.sandboxes.setTimeout(id, wanted);
  json(res, resumed ? 201 : 200, sandboxObject(info, info.labels[TEMPLATE_LABEL] ?? 'base', deps.credentials.sandboxToken(id)));
}

async function pause({ deps, res, id }: PlaneContext): Promise<void> {
  const record = deps.sandboxes.record(id);
  if (record.state === 'paused' || record.timedOut === true) throw new E2bHttpError(409, `Sandbox '${id}' is already paused.`);
  await deps.sandboxes.pause(id);
  res.writeHead(204).end();
}

/**
 * E2B's Sandbox object (create and connect answers), with the sandbox's token as both access
 * tokens: envd's, and the traffic token, which E2B gives sandboxes whose ports are not public.
 * Warren's ports never are, and `@e2b/code-interpreter` authenticates its `/contexts` calls with
 * the traffic token alone.
 */
function sandboxObject(info: SandboxInfo, templateID: string, token: string): Record<string, unknown> {
  return {
    sandboxID: info.id,
    templateID,
    alias: templateID,
    clientID: 'warren',
    envdVersion: ENVD_VERSION,
    envdAccessToken: token,
    trafficAccessToken: token,
    domain: null,
  };
}

/**
 * A Warren state as E2B names it: a sandbox hibernated when its time ran out (autoPause) is
 * paused, as on E2B; one hibernated while idle (woken by its next call) is running; exited and
 * gone ones match neither E2B state.
 */
function e2bState(info: SandboxInfo): string {
  if (info.timedOut === true) return 'paused';
  return info.state === 'running' || info.state === 'hibernated' ? 'running' : info.state;
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
    state: e2bState(info) === 'paused' ? 'paused' : 'running',
    cpuCount: Math.max(1, Math.round(info.settings.cpus)),
    memoryMB: info.settings.memoryMb,
    diskSizeMB: info.settings.diskMb ?? 0,
    envdVersion: ENVD_VERSION,
    metadata,
    volumeMounts: (info.settings.volumes ?? []).map((v) => ({ name: v.name, path: v.path })),
  };
}

/** `?startedAfter=`: an RFC 3339 time (the SDK sends `toISOString()`), as milliseconds; absent when not given. */
function timeFilter(raw: string | null): number | undefined {
  if (raw === null || raw === '') return undefined;
  const ms = Date.parse(raw);
  if (!Number.isFinite(ms)) throw new E2bHttpError(400, `startedAfter must be an RFC 3339 time such as 2026-01-01T00:00:00Z, not '${raw.slice(0, 64)}'.`);
  return ms;
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
