import type { Owner } from '../../tenancy/owner.js';
import type { ServerResponse } from 'node:http';
import type { CreateSandboxResponse } from '@warren/protocol';
import { z } from 'zod';
import type { HttpServerDeps } from '../../server-context.js';
import { E2bHttpError, toE2bHttpError } from '../errors.js';
import { json, parse, readJson } from '../http-util.js';
import type { VolumeContent } from './volume-content.js';

/**
 * E2B's snapshots, forks and volumes on Warren's own services (docs/e2b.md#snapshots-forks-and-volumes):
 * each handler calls the same {@link SnapshotService} and {@link VolumeService} method as Warren's
 * REST route for it, with the calling API key, so ownership (a key sees only its own snapshots and
 * volumes), quotas, limits and the audit are Warren's.
 */
export interface StateContext {
  deps: HttpServerDeps;
  req: import('node:http').IncomingMessage;
  res: ServerResponse;
  query: URLSearchParams;
  /** The sandbox id in the path, or empty. */
  id: string;
  /** The other resource in the path (a snapshot, template or volume id), decoded, or empty. */
  ref: string;
  /** The calling API key's id: it owns snapshots and volumes. */
  owner: Owner | undefined;
  /** The volume content API's helpers, when the gateway serves it. */
  volumeContent?: VolumeContent | undefined;
}

/** How a created or forked sandbox is answered (E2B's `Sandbox` object with its access token). */
export type SandboxAnswer = (created: CreateSandboxResponse, templateID: string) => Record<string, unknown>;

const SnapshotBody = z.looseObject({ name: z.string().max(256).optional() });
const ForkBody = z.looseObject({
  count: z.number().int().min(1).max(100).optional(),
  timeout: z
    .number()
    .int()
    .min(0)
    .max(30 * 24 * 3600)
    .optional(),
});
const VolumeBody = z.looseObject({ name: z.string().max(256) });

/** The snapshot service, or E2B's 501 where this controller runs without one (the Kubernetes provider, an in-process server). */
function snapshotsOf(deps: HttpServerDeps): NonNullable<HttpServerDeps['snapshots']> {
  if (!deps.snapshots)
    throw new E2bHttpError(
      501,
      'Snapshots and forks are not supported by this Warren controller (it runs without a snapshot service; the Docker provider has one).',
    );
  return deps.snapshots;
}

function volumesOf(deps: HttpServerDeps): NonNullable<HttpServerDeps['volumes']> {
  if (!deps.volumes)
    throw new E2bHttpError(501, 'Volumes are not supported by this Warren controller (it runs without named volumes; the Docker provider has them).');
  return deps.volumes;
}

/** `POST /sandboxes/{id}/snapshots` (`sandbox.createSnapshot`): Warren's snapshot of the sandbox's files, for the calling key. */
export async function createSnapshot({ deps, req, res, id, owner }: StateContext): Promise<void> {
  const body = parse(SnapshotBody, await readJson(req), 'snapshot request');
  const info = await snapshotsOf(deps).take(id, owner, body.name === undefined ? {} : { name: body.name });
  deps.logger.info({ sandboxId: id, snapshotId: info.id, sizeBytes: info.sizeBytes }, 'snapshot.created');
  json(res, 201, snapshotObject(info));
}

/** `GET /snapshots` (`Sandbox.listSnapshots`): the calling key's snapshots, newest first, narrowed by `sandboxID` and `name`, in pages. */
export async function listSnapshots({ deps, res, query, owner }: StateContext): Promise<void> {
  const sandboxID = query.get('sandboxID');
  const name = query.get('name');
  const all = snapshotsOf(deps)
    .list(owner)
    .filter((s) => (sandboxID === null || s.sandboxId === sandboxID) && (name === null || s.name === name || s.id === name));
  page(res, query, all.map(snapshotObject));
}

/**
 * `DELETE /templates/{id}` (`Sandbox.deleteSnapshot`, which E2B serves as a template): deletes the
 * calling key's snapshot of that id or name. A configured template cannot be deleted through E2B
 * (501); anything else is not found (404, which the SDK answers as `false`).
 */
export async function deleteTemplate({ deps, res, ref, owner }: StateContext): Promise<void> {
  if (Object.hasOwn(deps.config.e2bTemplates, ref))
    throw new E2bHttpError(501, `Template '${ref}' is configured on the controller (e2bTemplates); it cannot be deleted through E2B's API.`);
  await snapshotsOf(deps).remove(owner, ref);
  res.writeHead(204).end();
}

/**
 * `POST /sandboxes/{id}/fork` (`sandbox.fork`): Warren's fork into `count` sandboxes, all or none
 * (a fork that cannot make every sandbox kills those it made and answers the error).
 */
export async function fork(ctx: StateContext, answer: SandboxAnswer): Promise<void> {
  const { deps, req, res, id, owner } = ctx;
  const body = parse(ForkBody, await readJson(req), 'fork request');
  const outcomes = await snapshotsOf(deps).fork(id, owner, {
    count: body.count ?? 1,
    ...(body.timeout === undefined ? {} : { ttlSeconds: Math.max(10, body.timeout) }),
  });
  deps.logger.info({ sandboxId: id, forks: outcomes.flatMap((o) => ('sandbox' in o ? [o.sandbox.id] : [])) }, 'sandbox.forked');
  // E2B's SandboxForkResult: each fork settles alone, its entry the sandbox or E2B's error body (the SDK maps its code as on any route).
  json(
    res,
    201,
    outcomes.map((o) => {
      if ('sandbox' in o) return { sandbox: answer(o.sandbox, o.sandbox.labels['e2b-template'] ?? 'base') };
      const { status, message } = toE2bHttpError(o.error);
      return { error: { code: status, message } };
    }),
  );
}

/** `POST /volumes` (`Volume.create`): a named volume of the calling key; its E2B id is its name. */
export async function createVolume({ deps, req, res, owner }: StateContext): Promise<void> {
  const body = parse(VolumeBody, await readJson(req), 'volume request');
  const info = await volumesOf(deps).create(owner, { name: body.name });
  json(res, 201, volumeObject(deps, owner, info.name));
}

/** `GET /volumes` (`Volume.list`): the calling key's volumes. */
export async function listVolumes({ deps, res, owner }: StateContext): Promise<void> {
  json(
    res,
    200,
    (await volumesOf(deps).list(owner)).map((v) => ({ volumeID: v.name, name: v.name })),
  );
}

/** `GET /volumes/{id}` (`Volume.getInfo`, `Volume.connect`): one of the calling key's volumes; another key's is not found. */
export async function getVolume({ deps, res, ref, owner }: StateContext): Promise<void> {
  const info = await volumesOf(deps).get(owner, ref);
  json(res, 200, volumeObject(deps, owner, info.name));
}

/** `DELETE /volumes/{id}` (`Volume.destroy`): deletes the volume and its data (its content helper first); 409 while a sandbox mounts it. */
export async function deleteVolume({ deps, res, ref, owner, volumeContent }: StateContext): Promise<void> {
  await volumesOf(deps).get(owner, ref);
  if (owner !== undefined) await volumeContent?.release(owner.tenant, ref);
  await volumesOf(deps).remove(owner, ref);
  res.writeHead(204).end();
}

/** E2B's volume with its token: the token opens this key's volume's content API (`/volumecontent/...`) and nothing else. */
function volumeObject(deps: HttpServerDeps, owner: Owner | undefined, name: string): Record<string, unknown> {
  return { volumeID: name, name, token: owner === undefined ? '' : deps.credentials.volumeToken(owner.keyId, name) };
}

function snapshotObject(info: { id: string; name?: string | undefined }): Record<string, unknown> {
  return { snapshotID: info.id, names: info.name === undefined ? [] : [info.name] };
}

/** One page of a list: `limit` (1-1000, default 100) from the offset in `nextToken`, the next offset in `X-Next-Token`. */
export function page(res: ServerResponse, query: URLSearchParams, all: readonly unknown[]): void {
  const limit = Math.min(Math.max(Number.parseInt(query.get('limit') ?? '100', 10) || 100, 1), 1000);
  const start = Math.max(Number.parseInt(query.get('nextToken') ?? '0', 10) || 0, 0);
  if (start + limit < all.length) res.setHeader('x-next-token', String(start + limit));
  json(res, 200, all.slice(start, start + limit));
}
