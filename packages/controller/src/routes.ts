import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  BuildImageQuery,
  CodedError,
  ERROR_CODES,
  ImageEvent,
  ListImagesResponse,
  PullImageRequest,
  CreateSandboxRequest,
  CreateSandboxResponse,
  DeriveTokenRequest,
  DeriveTokenResponse,
  ListSandboxesResponse,
  METHODS,
  SandboxInfo,
  SandboxState,
  SetTimeoutRequest,
  UpdateNetworkRequest,
  NetworkPolicyResponse,
  EgressLogResponse,
  SandboxMetricsWithHistory,
  PublicPortRequest,
  PublicPortsResponse,
  PortUrlRequest,
  PortUrlResponse,
  issueText,
  CreateSnapshotRequest,
  SnapshotInfo,
  ForkSandboxRequest,
  ForkSandboxResponse,
  ListSnapshotsResponse,
  PruneSnapshotsRequest,
  PruneSnapshotsResponse,
  CreateVolumeRequest,
  VolumeInfo,
  ListVolumesResponse,
} from '@warren/protocol';
import { mintPortUrl } from './ports/port-links.js';
import { z } from 'zod';
import { deriveGrant, type Access, type Caller } from './grants.js';
import type { HttpServerDeps } from './http.js';
import { openApiDocument } from './openapi.js';

const MAX_BODY_BYTES = 1024 * 1024;

/** The HTTP methods Warren's routes use. */
export type HttpMethod = 'GET' | 'POST' | 'DELETE';

/**
 * Who may use a route: `public` needs no credential; any other value is a kind of access that the
 * rule table in grants.ts decides for the caller (`operator` is the API key only; the rest are
 * decided on the sandbox the path names).
 */
export type RouteAccess = 'public' | Access;

/** What a route's handler gets: the request, the answer, and what the router already checked. */
export interface RouteContext {
  deps: HttpServerDeps;
  req: IncomingMessage;
  res: ServerResponse;
  query: URLSearchParams;
  /** The sandbox id in the path (`{id}`); empty on routes without one. */
  id: string;
  /** Who is calling; undefined on public routes. */
  caller: Caller | undefined;
}

/** One query parameter, documented in the OpenAPI document. */
export interface QueryParameter {
  name: string;
  description: string;
  schema: z.ZodType;
  /** Whether it may be given more than once (`?label=a=1&label=b=2`). */
  repeated?: boolean;
}

/** One answer a route gives: JSON with a schema, another content type, or no body. */
export interface RouteResponse {
  description: string;
  schema?: z.ZodType;
  /** A content type other than JSON (with a schema: of each line or part; without one the body is described in words only). */
  contentType?: string;
}

/**
 * One route of the controller's HTTP server. The router dispatches on this table, and the OpenAPI
 * document (`GET /v1/openapi.json`, docs/openapi.json) is made from it, so a route cannot exist
 * without being documented.
 */
export interface Route {
  method: HttpMethod;
  /** The path, with `{id}` where a sandbox id goes (OpenAPI's template syntax). */
  path: string;
  operationId: string;
  summary: string;
  access: RouteAccess;
  query?: readonly QueryParameter[];
  /** The JSON body's schema, for routes that take one. */
  body?: z.ZodType;
  /** A body that is not JSON (a tar archive), described in words. */
  rawBody?: { contentType: string; description: string };
  /** The answers on success, by status; every route may also answer an error (`RestErrorBody`). */
  responses: Readonly<Record<number, RouteResponse>>;
  /** A WebSocket upgrade: the upgrade handler serves it; a plain request gets a typed refusal. */
  websocket?: boolean;
  handle(ctx: RouteContext): Promise<void>;
}

/** `GET /healthz`: the process answers. */
export const HealthResponse = z.strictObject({ status: z.literal('ok') });
/** `GET /readyz`: the engine answers and the default image is there, with what the controller knows of the host. */
export const ReadyResponse = z.looseObject({ status: z.literal('ready'), provider: z.string(), defaultImage: z.string() });

let document: Record<string, unknown> | undefined;

const AuditQuery = {
  since: z.number().int().min(0),
  limit: z.number().int().min(0),
};

/** The sandbox's info, after an action that changes it. */
const infoAnswer = (description: string): Record<number, RouteResponse> => ({ 200: { description, schema: SandboxInfo } });

/**
 * Every route the controller's HTTP server answers, in the order the OpenAPI document lists them.
 * Each route names its kind of access; the rule table in grants.ts decides, as it does for the
 * WebSocket methods that do the same things (audit.list, system.info).
 */
export const ROUTES: readonly Route[] = [
  {
    method: 'GET',
    path: '/healthz',
    operationId: 'health',
    summary: 'Liveness: the controller process answers.',
    access: 'public',
    responses: { 200: { description: 'The process is up.', schema: HealthResponse } },
    handle: async ({ res }) => sendJson(res, 200, { status: 'ok' }),
  },
  {
    method: 'GET',
    path: '/readyz',
    operationId: 'ready',
    summary: 'Readiness: the Docker engine answers and the default image is present (503 SANDBOX_NOT_READY otherwise).',
    access: 'public',
    responses: { 200: { description: 'Ready, with the engine isolation report and the default sandbox hardening.', schema: ReadyResponse } },
    handle: async ({ deps, res }) => {
      const checks = await deps.readiness().catch((err: unknown) => {
        throw new CodedError('SANDBOX_NOT_READY', `Not ready: ${(err as Error).message}`);
      });
      sendJson(res, 200, { status: 'ready', ...checks });
    },
  },
  {
    method: 'GET',
    path: '/metrics',
    operationId: 'metrics',
    summary: "Prometheus metrics: Warren's own and the process's (CPU, memory, event loop, file descriptors).",
    access: 'operator',
    responses: { 200: { description: 'The Prometheus text exposition format.', contentType: 'text/plain; version=0.0.4' } },
    handle: async ({ deps, res }) => {
      const text = await deps.metrics.registry.metrics();
      res.writeHead(200, { 'content-type': deps.metrics.registry.contentType }).end(text);
    },
  },
  {
    method: 'GET',
    path: '/v1/openapi.json',
    operationId: 'openapi',
    summary: 'This OpenAPI document. Public: it describes the API and holds no secret.',
    access: 'public',
    responses: { 200: { description: 'An OpenAPI 3.1 document.', schema: z.looseObject({ openapi: z.string() }) } },
    handle: async ({ res }) => sendJson(res, 200, (document ??= openApiDocument(ROUTES))),
  },
  {
    method: 'POST',
    path: '/v1/sandboxes',
    operationId: 'createSandbox',
    summary: 'Create a sandbox; the answer carries its token, shown only here.',
    access: 'operator',
    body: CreateSandboxRequest,
    responses: { 201: { description: 'The sandbox is running and its daemon answered.', schema: CreateSandboxResponse } },
    handle: async ({ deps, req, res, caller }) => {
      const body = await readJson(req);
      const created = deps.snapshots ? await deps.snapshots.createSandbox(body, keyOf(caller)) : await deps.sandboxes.create(body);
      deps.logger.info({ sandboxId: created.id, image: created.image, readyMs: created.readyMs, pooled: created.pooled }, 'sandbox.created');
      sendJson(res, 201, created);
    },
  },
  {
    method: 'GET',
    path: '/v1/sandboxes',
    operationId: 'listSandboxes',
    summary: 'List the sandboxes that match every filter.',
    access: 'operator',
    query: [
      { name: 'label', description: 'Only sandboxes with this label, as key=value.', schema: z.string(), repeated: true },
      { name: 'state', description: 'Only sandboxes in this state.', schema: SandboxState },
    ],
    responses: { 200: { description: 'The matching sandboxes.', schema: ListSandboxesResponse } },
    handle: async ({ deps, res, query }) => sendJson(res, 200, { sandboxes: await deps.sandboxes.find(listFilter(query)) }),
  },
  {
    method: 'GET',
    path: '/v1/sandboxes/{id}',
    operationId: 'getSandbox',
    summary: 'Describe one sandbox.',
    access: 'info',
    responses: infoAnswer('The sandbox.'),
    handle: async ({ deps, res, id }) => sendJson(res, 200, await deps.sandboxes.get(id)),
  },
  {
    method: 'DELETE',
    path: '/v1/sandboxes/{id}',
    operationId: 'killSandbox',
    summary: 'Kill the sandbox and remove its container and disk.',
    access: 'lifecycle',
    responses: { 204: { description: 'Gone.' } },
    handle: async ({ deps, res, id }) => {
      await deps.sandboxes.kill(id);
      deps.logger.info({ sandboxId: id }, 'sandbox.killed');
      res.writeHead(204).end();
    },
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/{id}/keepalive',
    operationId: 'keepalive',
    summary: 'Move the expiry to a full TTL from now.',
    access: 'lifecycle',
    responses: infoAnswer('The sandbox, with its new expiry.'),
    handle: async ({ deps, res, id }) => sendJson(res, 200, await deps.sandboxes.keepalive(id)),
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/{id}/timeout',
    operationId: 'setTimeout',
    summary: 'Set the expiry to ttlSeconds from now.',
    access: 'lifecycle',
    body: SetTimeoutRequest,
    responses: infoAnswer('The sandbox, with its new expiry.'),
    handle: async ({ deps, req, res, id }) => {
      const body = SetTimeoutRequest.safeParse(await readJson(req));
      if (!body.success)
        throw new CodedError(
          'INVALID_PARAMS',
          `Invalid timeout request: ${body.error.issues.map(issueText).join('; ')}. Send { "ttlSeconds": <seconds from now> }.`,
        );
      sendJson(res, 200, await deps.sandboxes.setTimeout(id, body.data.ttlSeconds));
    },
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/{id}/hibernate',
    operationId: 'hibernate',
    summary: 'Stop the sandbox to free its memory, keeping its id, token and files; any call or connection starts it again.',
    access: 'lifecycle',
    responses: infoAnswer('The hibernated sandbox.'),
    handle: async ({ deps, res, id }) => {
      const info = await deps.sandboxes.hibernate(id);
      deps.logger.info({ sandboxId: id }, 'sandbox.hibernated');
      sendJson(res, 200, info);
    },
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/{id}/snapshot',
    operationId: 'snapshotSandbox',
    summary:
      "Snapshot the sandbox's files (its container's changes and its workspace) for the calling API key; the sandbox is frozen for the capture and keeps running.",
    access: 'operator',
    body: CreateSnapshotRequest,
    responses: { 201: { description: 'The stored snapshot.', schema: SnapshotInfo } },
    handle: async ({ deps, req, res, id, caller }) => {
      const info = await snapshotsOf(deps).take(id, keyOf(caller), await readJson(req));
      deps.logger.info({ sandboxId: id, snapshotId: info.id, sizeBytes: info.sizeBytes }, 'snapshot.created');
      sendJson(res, 201, info);
    },
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/{id}/fork',
    operationId: 'forkSandbox',
    summary: "Make count independent sandboxes from the sandbox's current state (limits apply to each as to a create).",
    access: 'operator',
    body: ForkSandboxRequest,
    responses: { 201: { description: 'The forks, each with its token.', schema: ForkSandboxResponse } },
    handle: async ({ deps, req, res, id, caller }) => {
      const forks = await snapshotsOf(deps).fork(id, keyOf(caller), await readJson(req));
      deps.logger.info({ sandboxId: id, forks: forks.map((f) => f.id) }, 'sandbox.forked');
      sendJson(res, 201, { sandboxes: forks });
    },
  },
  {
    method: 'GET',
    path: '/v1/snapshots',
    operationId: 'listSnapshots',
    summary: "The calling API key's snapshots, newest first.",
    access: 'operator',
    responses: { 200: { description: 'The snapshots.', schema: ListSnapshotsResponse } },
    handle: async ({ deps, res, caller }) => sendJson(res, 200, { snapshots: snapshotsOf(deps).list(keyOf(caller)) }),
  },
  {
    method: 'POST',
    path: '/v1/snapshots/prune',
    operationId: 'pruneSnapshots',
    summary: "Delete the calling key's snapshots older than olderThanSeconds (with every given label), and images no snapshot names.",
    access: 'operator',
    body: PruneSnapshotsRequest,
    responses: { 200: { description: 'What was deleted.', schema: PruneSnapshotsResponse } },
    handle: async ({ deps, req, res, caller }) => sendJson(res, 200, await snapshotsOf(deps).prune(keyOf(caller), await readJson(req))),
  },
  {
    method: 'GET',
    path: '/v1/snapshots/{snapshot}',
    operationId: 'getSnapshot',
    summary: "Describe one of the calling key's snapshots (by id or name).",
    access: 'operator',
    responses: { 200: { description: 'The snapshot.', schema: SnapshotInfo } },
    handle: async ({ deps, req, res, caller }) => sendJson(res, 200, snapshotsOf(deps).get(keyOf(caller), snapshotParam(req))),
  },
  {
    method: 'DELETE',
    path: '/v1/snapshots/{snapshot}',
    operationId: 'deleteSnapshot',
    summary: "Delete one of the calling key's snapshots (sandboxes made from it keep their files).",
    access: 'operator',
    responses: { 204: { description: 'Gone.' } },
    handle: async ({ deps, req, res, caller }) => {
      await snapshotsOf(deps).remove(keyOf(caller), snapshotParam(req));
      res.writeHead(204).end();
    },
  },
  {
    method: 'POST',
    path: '/v1/volumes',
    operationId: 'createVolume',
    summary: 'Create a named volume for the calling API key: storage that outlives sandboxes, with a size limit where the host gives quotas.',
    access: 'operator',
    body: CreateVolumeRequest,
    responses: { 201: { description: 'The volume.', schema: VolumeInfo } },
    handle: async ({ deps, req, res, caller }) => sendJson(res, 201, await volumesOf(deps).create(keyOf(caller), await readJson(req))),
  },
  {
    method: 'GET',
    path: '/v1/volumes',
    operationId: 'listVolumes',
    summary: "The calling API key's volumes.",
    access: 'operator',
    responses: { 200: { description: 'The volumes.', schema: ListVolumesResponse } },
    handle: async ({ deps, res, caller }) => sendJson(res, 200, { volumes: await volumesOf(deps).list(keyOf(caller)) }),
  },
  {
    method: 'GET',
    path: '/v1/volumes/{volume}',
    operationId: 'getVolume',
    summary: "Describe one of the calling key's volumes.",
    access: 'operator',
    responses: { 200: { description: 'The volume.', schema: VolumeInfo } },
    handle: async ({ deps, req, res, caller }) => sendJson(res, 200, await volumesOf(deps).get(keyOf(caller), snapshotParam(req))),
  },
  {
    method: 'DELETE',
    path: '/v1/volumes/{volume}',
    operationId: 'deleteVolume',
    summary: "Delete one of the calling key's volumes and its data (refused while a sandbox mounts it).",
    access: 'operator',
    responses: { 204: { description: 'Gone.' } },
    handle: async ({ deps, req, res, caller }) => {
      await volumesOf(deps).remove(keyOf(caller), snapshotParam(req));
      res.writeHead(204).end();
    },
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/{id}/pause',
    operationId: 'pause',
    summary: 'Freeze every process of the sandbox.',
    access: 'lifecycle',
    responses: infoAnswer('The paused sandbox.'),
    handle: async ({ deps, res, id }) => sendJson(res, 200, await deps.sandboxes.pause(id)),
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/{id}/resume',
    operationId: 'resume',
    summary: 'Thaw a paused sandbox.',
    access: 'lifecycle',
    responses: infoAnswer('The running sandbox.'),
    handle: async ({ deps, res, id }) => sendJson(res, 200, await deps.sandboxes.resume(id)),
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/{id}/derive',
    operationId: 'deriveToken',
    summary: "A token for the same sandbox with a narrower grant than the caller's own.",
    access: 'derive',
    body: DeriveTokenRequest,
    responses: { 201: { description: 'The derived token and the grant it carries.', schema: DeriveTokenResponse } },
    handle: async ({ deps, req, res, id, caller }) =>
      sendJson(res, 201, deriveGrant(deps.credentials, deps.sandboxes.record(id), caller!, await readJson(req))),
  },
  {
    method: 'GET',
    path: '/v1/sandboxes/{id}/audit',
    operationId: 'auditLog',
    summary: "The daemon's audit log: every call it served, oldest first, in pages.",
    access: 'audit',
    query: [
      { name: 'since', description: 'Entries after this sequence number.', schema: AuditQuery.since },
      { name: 'limit', description: 'At most this many entries.', schema: AuditQuery.limit },
    ],
    responses: { 200: { description: 'One page of the audit log.', schema: METHODS['audit.list'].result } },
    handle: async ({ deps, res, id, query }) => sendJson(res, 200, await deps.audit(id, query)),
  },
  {
    method: 'GET',
    path: '/v1/sandboxes/{id}/network',
    operationId: 'getNetwork',
    summary: "The sandbox's egress policy and its version (version 0: created without egress, so it has no way out and no relay).",
    access: 'lifecycle',
    responses: { 200: { description: 'The policy the gateway enforces now.', schema: NetworkPolicyResponse } },
    handle: async ({ deps, res, id }) => {
      // A sandbox created without egress has no relay at all: its policy is none, version 0.
      const current = (await deps.sandboxes.networkOf(id)) ?? { policy: { mode: 'none' as const }, version: 0 };
      sendJson(res, 200, { egress: current.policy, version: current.version });
    },
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/{id}/network',
    operationId: 'updateNetwork',
    summary: "Replace the sandbox's egress policy without a restart; connections it no longer allows are closed before the answer.",
    access: 'lifecycle',
    body: UpdateNetworkRequest,
    responses: { 200: { description: 'The new policy and its version.', schema: NetworkPolicyResponse } },
    handle: async ({ deps, req, res, id }) => {
      const body = UpdateNetworkRequest.safeParse(await readJson(req));
      if (!body.success)
        throw new CodedError(
          'INVALID_PARAMS',
          `Invalid network update: ${body.error.issues.map(issueText).join('; ')}. Send { "egress": { "mode": "allow", "rules": [{ "host": "pypi.org" }] } } (or mode none / open).`,
        );
      const updated = await deps.sandboxes.updateEgress(id, body.data.egress);
      deps.logger.info({ sandboxId: id, mode: updated.policy.mode, version: updated.version }, 'sandbox.egress-updated');
      sendJson(res, 200, { egress: updated.policy, version: updated.version });
    },
  },
  {
    method: 'GET',
    path: '/v1/sandboxes/{id}/egress',
    operationId: 'egressLog',
    summary: "The sandbox's recent egress events: every connection attempt through the gateway, allowed or denied, and by which rule.",
    access: 'audit',
    query: [
      { name: 'since', description: 'Entries after this sequence number.', schema: AuditQuery.since },
      { name: 'limit', description: 'At most this many entries.', schema: AuditQuery.limit },
    ],
    responses: { 200: { description: 'The events, oldest first.', schema: EgressLogResponse } },
    handle: async ({ deps, res, id, query }) => {
      const record = deps.sandboxes.record(id);
      const number = (name: string): number | undefined => {
        const raw = query.get(name);
        if (raw === null) return undefined;
        const value = Number(raw);
        if (!Number.isInteger(value) || value < 0) throw new CodedError('INVALID_PARAMS', `?${name}= must be a whole number, got '${raw}'.`);
        return value;
      };
      const since = number('since');
      const limit = number('limit');
      const page = deps.egressLog?.list(record.agentId, { ...(since === undefined ? {} : { since }), ...(limit === undefined ? {} : { limit }) });
      sendJson(res, 200, page ?? { entries: [], lastSeq: -1 });
    },
  },
  {
    method: 'GET',
    path: '/v1/sandboxes/{id}/metrics',
    operationId: 'sandboxMetrics',
    summary: 'What the sandbox uses now (CPU, memory, pids, network), as the engine measures it.',
    access: 'info',
    query: [
      {
        name: 'history',
        description: "`true` adds the controller's last samples of this sandbox (`history`, oldest first; see usage.sampleSeconds).",
        schema: z.enum(['true', 'false']).optional(),
      },
    ],
    responses: { 200: { description: 'One sample, with the short history when asked.', schema: SandboxMetricsWithHistory } },
    handle: async ({ deps, res, id, query }) => {
      const history = query.get('history');
      if (history !== null && history !== 'true' && history !== 'false')
        throw new CodedError('INVALID_PARAMS', `?history= must be true or false, got '${history.slice(0, 20)}'.`);
      const sample = await deps.sandboxes.usage(id);
      sendJson(res, 200, history === 'true' ? { ...sample, history: deps.sandboxes.usageHistory.list(id) } : sample);
    },
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/{id}/port-urls',
    operationId: 'signPortUrl',
    summary: 'A signed, expiring URL that opens one port of the sandbox in a browser (see /v1/sandboxes/{id}/ports/{port}/).',
    access: 'exec',
    body: PortUrlRequest,
    responses: { 201: { description: 'The URL path and when it stops working.', schema: PortUrlResponse } },
    handle: async ({ deps, req, res, id, caller }) => {
      deps.sandboxes.record(id);
      const body = PortUrlRequest.safeParse(await readJson(req));
      if (!body.success) throw new CodedError('INVALID_PARAMS', `Invalid port URL request: ${body.error.issues.map(issueText).join('; ')}`);
      // Never past the end of the credential that asks (a derived token's lifetime).
      sendJson(res, 201, mintPortUrl(deps, caller!, id, body.data.port, body.data.ttlSeconds));
    },
  },
  {
    method: 'POST',
    path: '/v1/sandboxes/{id}/public-ports',
    operationId: 'setPortPublic',
    summary: "Open one of the sandbox's ports to anyone without a credential (public: true), or close it again.",
    access: 'lifecycle',
    body: PublicPortRequest,
    responses: { 200: { description: "The sandbox's public ports after the change.", schema: PublicPortsResponse } },
    handle: async ({ deps, req, res, id }) => {
      const body = PublicPortRequest.safeParse(await readJson(req));
      if (!body.success) throw new CodedError('INVALID_PARAMS', `Invalid public port request: ${body.error.issues.map(issueText).join('; ')}`);
      sendJson(res, 200, { publicPorts: await deps.sandboxes.setPortPublic(id, body.data.port, body.data.public) });
    },
  },
  {
    method: 'GET',
    path: '/v1/images',
    operationId: 'listImages',
    summary: 'The images Warren built (labelled warren.build), newest first.',
    access: 'operator',
    responses: { 200: { description: 'The built images.', schema: ListImagesResponse } },
    handle: async ({ deps, res }) => sendJson(res, 200, { images: await deps.sandboxes.images.list() }),
  },
  {
    method: 'DELETE',
    path: '/v1/images',
    operationId: 'removeImage',
    summary: 'Remove an image Warren built, by id or name; other images are refused.',
    access: 'operator',
    query: [{ name: 'image', description: 'The image id (sha256:...) or name, as GET /v1/images lists it.', schema: z.string().min(1).max(512) }],
    responses: { 204: { description: 'Gone.' } },
    handle: async ({ deps, res, query }) => {
      const image = query.get('image');
      if (!image) throw new CodedError('INVALID_PARAMS', 'Name the image to remove: DELETE /v1/images?image=<id or name>.');
      await deps.sandboxes.images.remove(image);
      res.writeHead(204).end();
    },
  },
  {
    method: 'POST',
    path: '/v1/images/pull',
    operationId: 'pullImage',
    summary:
      'Pull an image onto the engine ahead of a create, with progress. Refused before anything is fetched when its registry is not allowed. ' +
      'The answer is NDJSON: progress lines, then one done or error line.',
    access: 'operator',
    body: PullImageRequest,
    responses: { 200: { description: 'One ImageEvent per line: progress, then done or error.', contentType: 'application/x-ndjson', schema: ImageEvent } },
    handle: async ({ deps, req, res }) => {
      const body = PullImageRequest.safeParse(await readJson(req));
      if (!body.success)
        throw new CodedError('INVALID_PARAMS', `Invalid pull request: ${body.error.issues.map(issueText).join('; ')}. Send { "image": "<reference>" }.`);
      const stream = eventStream(res);
      await stream.run(async () => {
        await deps.sandboxes.images.ensure(body.data.image, {
          onStart: stream.start,
          onProgress: (p) => stream.send({ type: 'progress', ...p }),
        });
        return { type: 'done', image: body.data.image };
      });
    },
  },
  {
    method: 'POST',
    path: '/v1/images/build',
    operationId: 'buildImage',
    summary:
      'Build a template image from a Dockerfile; the body is the build context as a tar archive (application/x-tar), checked before the build. ' +
      'The answer is NDJSON: the build output, then one done or error line.',
    access: 'operator',
    rawBody: {
      contentType: 'application/x-tar',
      description: 'The build context: a tar archive of regular files, folders and relative links that stay inside it.',
    },
    query: [
      { name: 'tag', description: 'The name the image gets, name[:tag] without a registry host.', schema: BuildImageQuery.shape.tag },
      { name: 'dockerfile', description: "The Dockerfile's path inside the context (default Dockerfile).", schema: BuildImageQuery.shape.dockerfile.unwrap() },
    ],
    responses: { 200: { description: 'One ImageEvent per line: output, then done or error.', contentType: 'application/x-ndjson', schema: ImageEvent } },
    handle: async ({ deps, req, res, query }) => {
      const parsed = BuildImageQuery.safeParse({ tag: query.get('tag') ?? undefined, dockerfile: query.get('dockerfile') ?? undefined });
      if (!parsed.success)
        throw new CodedError(
          'INVALID_PARAMS',
          `Invalid build request: ${parsed.error.issues.map(issueText).join('; ')}. Use ?tag=<name[:tag]>&dockerfile=<path>.`,
        );
      const images = deps.sandboxes.images;
      // The slot is taken before the body is read, so waiting builds hold no context in memory.
      await images.withBuildSlot(async () => {
        const context = await readContext(req, deps.config.images.maxBuildContextMb);
        const abort = new AbortController();
        res.once('close', () => res.writableFinished || abort.abort());
        const stream = eventStream(res);
        await stream.run(async () => {
          const built = await images.build(context, parsed.data, {
            onStart: stream.start,
            onProgress: (p) => stream.send({ type: 'progress', ...p }),
            onOutput: (text) => stream.send({ type: 'output', text }),
            signal: abort.signal,
          });
          return { type: 'done', image: built.image, id: built.id };
        });
      });
    },
  },
  {
    method: 'GET',
    path: '/v1/sandboxes/{id}/connect',
    operationId: 'connect',
    summary:
      "WebSocket upgrade: the sandbox's method channel (binary frames; the methods are in docs/protocol.schema.json). " +
      "Any credential of this sandbox may connect; each request frame is then checked by its method's access class. " +
      'Browsers are refused unless their Origin is allowed.',
    access: 'info',
    websocket: true,
    responses: { 101: { description: 'Switching protocols: the connection now carries frames to and from the sandbox daemon.' } },
    handle: async () => {
      throw new CodedError('INVALID_PARAMS', 'This route is a WebSocket: connect with an upgrade request (the SDK and `warren shell` do).');
    },
  },
];

/** A route's path as a pattern: `{id}` takes a sandbox id (letters and digits), `{snapshot}` one path segment (checked by its handler). */
const patterns = new Map(
  ROUTES.map((route) => [
    route,
    new RegExp(`^${route.path.replace('{id}', '([A-Za-z0-9]+)').replace('{snapshot}', '(?:[^/]+)').replace('{volume}', '(?:[^/]+)')}$`),
  ]),
);

/** The snapshot service, or NOT_SUPPORTED where this server runs without one. */
function snapshotsOf(deps: HttpServerDeps): NonNullable<HttpServerDeps['snapshots']> {
  if (!deps.snapshots) throw new CodedError('NOT_SUPPORTED', 'This server runs without snapshots; start the controller with warren serve.');
  return deps.snapshots;
}

/** The volume service, or NOT_SUPPORTED where this server runs without one. */
function volumesOf(deps: HttpServerDeps): NonNullable<HttpServerDeps['volumes']> {
  if (!deps.volumes) throw new CodedError('NOT_SUPPORTED', 'This server runs without named volumes; start the controller with warren serve.');
  return deps.volumes;
}

/** The API key id of an operator caller (it owns snapshots), undefined for any other credential. */
function keyOf(caller: Caller | undefined): string | undefined {
  return caller?.kind === 'operator' ? caller.keyId : undefined;
}

/** The `{snapshot}` segment of a request's path, decoded; the snapshot service checks it is a plain name. */
function snapshotParam(req: IncomingMessage): string {
  const segment = new URL(req.url ?? '/', 'http://controller').pathname.split('/').pop() ?? '';
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new CodedError('INVALID_PARAMS', 'The snapshot in the path is not valid percent-encoding; name it by its id or name.', { field: 'snapshot' });
  }
}

/** The routes whose path matches `pathname`, with the sandbox id it names (empty when none). */
export function routesAt(pathname: string): { routes: Route[]; id: string } {
  let id = '';
  const routes = ROUTES.filter((route) => {
    const match = patterns.get(route)!.exec(pathname);
    if (match) id = match[1] ?? '';
    return match !== null;
  });
  // A path of its own (`/v1/snapshots/prune`) is never also a snapshot's name.
  const literal = routes.filter((route) => !route.path.includes('{snapshot}') && !route.path.includes('{volume}'));
  return { routes: literal.length > 0 ? literal : routes, id };
}

/** Every route, as `METHOD path` lines for a NOT_FOUND message. */
export function routeList(): string {
  return ROUTES.map((route) => `${route.method} ${route.path}`).join(', ');
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

/**
 * An NDJSON answer of {@link ImageEvent} lines. Before `start` a failure is an ordinary error
 * answer with its status; after it, the status is sent, so a failure is the last line, an
 * `error` event with the same body an error answer has.
 */
function eventStream(res: ServerResponse) {
  let started = false;
  const start = () => {
    if (started) return;
    started = true;
    res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' });
  };
  const send = (event: ImageEvent) => {
    start();
    if (!res.writableEnded) res.write(`${JSON.stringify(event)}\n`);
  };
  return {
    start,
    send,
    async run(work: () => Promise<ImageEvent>): Promise<void> {
      try {
        send(await work());
      } catch (err) {
        if (!started) throw err;
        const coded = err instanceof CodedError ? err : new CodedError('INTERNAL', err instanceof Error ? err.message : String(err));
        const error = {
          code: coded.code,
          message: coded.message,
          suggestion: ERROR_CODES[coded.code].suggestion,
          ...(coded.details ? { details: coded.details } : {}),
        };
        send({ type: 'error', error });
      }
      res.end();
    },
  };
}

/** Reads a build context (a tar archive) of at most `maxMb` MiB; a larger one is refused before it is read to the end. */
async function readContext(req: IncomingMessage, maxMb: number): Promise<Buffer> {
  const max = maxMb * 1024 * 1024;
  const tooLarge = () =>
    new CodedError(
      'BUILD_CONTEXT_TOO_LARGE',
      `The build context is larger than this controller's ${maxMb} MiB (images.maxBuildContextMb); build from a smaller folder.`,
      {
        maxBytes: max,
      },
    );
  if (Number(req.headers['content-length'] ?? 0) > max) throw tooLarge();
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > max) {
      req.destroy();
      throw tooLarge();
    }
    chunks.push(chunk);
  }
  if (size === 0)
    throw new CodedError('INVALID_PARAMS', 'The build request has no body; send the build context as a tar archive (warren image build packs a folder).');
  return Buffer.concat(chunks);
}

/** Reads a JSON body of at most 1 MiB; an empty body is `{}`. */
export async function readJson(req: IncomingMessage): Promise<unknown> {
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

/** Answers with a JSON body. */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text);
}
