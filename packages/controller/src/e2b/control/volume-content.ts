import type { Owner } from '../../tenancy/owner.js';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { posix } from 'node:path';
import type { CreateSandboxRequest } from '@warren/protocol';
import type { HttpServerDeps } from '../../server-context.js';
import type { DaemonSession } from '../../daemon-session.js';
import { E2bHttpError } from '../errors.js';
import { withSession } from '../envd/scope.js';
import { json } from '../http-util.js';
import type { DaemonSessionPool } from '../../daemon-pool.js';

/** Where a helper sandbox mounts the volume; its file policy is exactly this folder. */
export const VOLUME_MOUNT = '/mnt/volume';
/** The label that marks a volume's helper sandbox (its value: the volume's name); the E2B list leaves these out. */
export const HELPER_LABEL = 'e2b-volume-helper';
/** A helper lives this long after its last call (Warren's shortest lifetime is 10 s). */
const HELPER_TTL_SECONDS = 60;
/** The largest file one `PUT .../file` writes, as `/files` uploads. */
const MAX_FILE_BYTES = 64 * 1024 * 1024;
/** Bytes read from the daemon per call. */
const PIECE_BYTES = 8 * 1024 * 1024;
/** The uid and gid of a volume's files: the sandbox user's (a volume's root belongs to 1000:1000). */
const OWNER = 1000;

/**
 * E2B's volume content API (`/volumecontent/{volumeID}/path|file|dir`: `Volume.readFile`,
 * `writeFile`, `list`, `makeDir`, `getInfo`, `exists`, `remove`) on a named volume of the API key
 * the volume token names. The controller never touches the volume's files itself: every operation
 * runs in a small helper sandbox of that key that mounts the volume at {@link VOLUME_MOUNT}, through
 * its daemon, with a file policy of exactly that folder. So the daemon's own checks apply as to
 * any file call: paths are resolved inside the volume (`..` and absolute paths cannot leave it),
 * a symbolic link in the volume that leads out of it is refused, and the sandbox's limits, audit
 * log and hardening are Warren's. A helper is made on the first call, counts against
 * `maxSandboxes` like any sandbox, and is killed {@link HELPER_TTL_SECONDS} after its last call or
 * when its volume is destroyed.
 */
export class VolumeContent {
  /** Helper sandboxes by key id and volume name: the one being made, or made. */
  private readonly helpers = new Map<string, Promise<string>>();

  constructor(
    private readonly deps: HttpServerDeps,
    private readonly pool: DaemonSessionPool,
  ) {}

  /** Serves one `/volumecontent/...` request (`path` below the gateway's prefix). */
  async serve(req: IncomingMessage, res: ServerResponse, path: string, query: URLSearchParams): Promise<void> {
    const match = /^\/volumecontent\/([^/]+)\/(path|file|dir)$/.exec(path);
    if (!match) throw new E2bHttpError(404, `No volume content route ${path}; they are /volumecontent/{volumeID}/path, /file and /dir.`);
    const volume = decode(match[1]!);
    const bearer = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
    const token = bearer === undefined ? undefined : this.deps.credentials.readVolumeToken(bearer);
    const principal = token === undefined ? undefined : this.deps.credentials.keys.byId(token.keyId);
    // A token of another volume (or key, or of a key that ended) is refused exactly as a bad one.
    if (token === undefined || principal === undefined || token.volume !== volume)
      throw new E2bHttpError(
        401,
        "Missing or invalid volume token: send the token of this volume (Volume.create or Volume.connect's) as Authorization: Bearer.",
      );
    const method = req.method ?? 'GET';
    const target = volumePath(query.get('path'));
    checkOwner(query);
    const sandboxId = await this.helperFor({ tenant: principal.tenant, keyId: principal.keyId }, volume);
    const scope = { deps: this.deps, sandboxId, caller: { kind: 'operator' as const, ...principal }, home: VOLUME_MOUNT };
    await withSession(this.pool, scope, async (session) => {
      const route = `${method} ${match[2]}`;
      if (route === 'GET path') return json(res, 200, await stat(session, target));
      if (route === 'DELETE path') {
        await session.call('fs.delete', { path: target, recursive: true });
        return void res.writeHead(204).end();
      }
      if (route === 'PATCH path')
        throw new E2bHttpError(501, "Changing a volume file's owner or mode (Volume.updateMetadata) is not supported by Warren's E2B gateway.");
      if (route === 'GET dir') return json(res, 200, await list(session, target, query.get('depth')));
      if (route === 'POST dir') {
        await session.call('fs.mkdir', { path: target, parents: true });
        return json(res, 201, await stat(session, target));
      }
      if (route === 'GET file') return await download(session, target, res);
      if (route === 'PUT file') {
        const data = await readBody(req);
        await session.call('fs.mkdir', { path: posix.dirname(target), parents: true });
        const mode = query.get('mode');
        const bits = mode === null ? undefined : Number.parseInt(mode, 8);
        if (bits !== undefined && !(bits >= 0 && bits <= 0o777)) throw new E2bHttpError(400, `mode '${mode}' is not octal permission bits.`);
        await session.call('fs.write', { path: target, ...(bits === undefined ? {} : { mode: bits }) }, { payload: data.subarray(0, PIECE_BYTES) });
        for (let offset = PIECE_BYTES; offset < data.length; offset += PIECE_BYTES)
          await session.call('fs.write', { path: target, offset }, { payload: data.subarray(offset, offset + PIECE_BYTES) });
        return json(res, 201, await stat(session, target));
      }
      throw new E2bHttpError(405, `${method} is not supported on /volumecontent/{volumeID}/${match[2]}.`);
    });
  }

  /** Kills the helper of a volume (before it is destroyed: a mounted volume cannot be). */
  async release(tenant: string, volume: string): Promise<void> {
    const key = `${tenant}\0${volume}`;
    const made = this.helpers.get(key);
    this.helpers.delete(key);
    const id = await made?.catch(() => undefined);
    if (id !== undefined) await this.deps.sandboxes.kill(id).catch(() => undefined);
  }

  /** The running helper of this tenant's volume, keeping it alive; a new one when there is none. */
  private async helperFor(owner: Owner, volume: string): Promise<string> {
    const key = `${owner.tenant}\0${volume}`;
    const existing = this.helpers.get(key);
    if (existing) {
      const id = await existing.catch(() => undefined);
      if (id !== undefined && this.alive(id)) {
        await this.deps.sandboxes.keepalive(id);
        return id;
      }
      if (this.helpers.get(key) === existing) this.helpers.delete(key);
      return this.helperFor(owner, volume);
    }
    const made = this.make(owner, volume);
    this.helpers.set(key, made);
    made.catch(() => this.helpers.get(key) === made && this.helpers.delete(key));
    return made;
  }

  private alive(id: string): boolean {
    try {
      return this.deps.sandboxes.record(id).state !== 'exited';
    } catch {
      return false;
    }
  }

  private async make(owner: Owner, volume: string): Promise<string> {
    const volumes = this.deps.volumes;
    if (!volumes) throw new E2bHttpError(501, 'Volumes are not supported by this Warren controller (it runs without named volumes).');
    const volumeIds = volumes.resolve(owner, [volume]);
    const image = this.deps.config.e2bTemplates.base?.create?.image ?? this.deps.config.defaultImage;
    const request: CreateSandboxRequest = {
      image,
      volumes: [{ name: volume, path: VOLUME_MOUNT }],
      policy: { root: VOLUME_MOUNT, readOnly: false },
      ttlSeconds: HELPER_TTL_SECONDS,
      labels: { [HELPER_LABEL]: volume },
      network: 'none',
    };
    const created = await this.deps.sandboxes.create(request, { volumeIds, owner });
    this.deps.logger.info({ sandboxId: created.id, volume }, 'e2b.volume-helper');
    return created.id;
  }
}

/** A volume path as the helper's path: `/` is the volume's root, relative paths start there, `..` stops at it. */
export function volumePath(raw: string | null): string {
  if (raw === null || raw === '') throw new E2bHttpError(400, 'Name the path in the volume: ?path=<path>.');
  if (raw.includes('\0')) throw new E2bHttpError(400, 'A path may not contain NUL.');
  return posix.join(VOLUME_MOUNT, posix.normalize(`/${raw}`)).replace(/\/+$/, '');
}

function decode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new E2bHttpError(400, `'${segment.slice(0, 64)}' is not valid percent-encoding.`);
  }
}

/** uid and gid other than the sandbox user's cannot be given: Warren runs nothing as another user. */
function checkOwner(query: URLSearchParams): void {
  for (const name of ['uid', 'gid']) {
    const value = query.get(name);
    if (value !== null && Number(value) !== OWNER)
      throw new E2bHttpError(400, `${name} ${value.slice(0, 16)} is not available: a volume's files belong to the sandbox user (${OWNER}). Leave ${name} out.`);
  }
}

type EntryType = 'file' | 'directory' | 'symlink' | 'unknown';

/** E2B's VolumeEntryStat of one path (a symbolic link is described, not followed). */
async function stat(session: DaemonSession, path: string): Promise<Record<string, unknown>> {
  const { result } = await session.call('fs.stat', { path, followLinks: false });
  const time = new Date(result.mtimeMs).toISOString();
  return {
    name: posix.basename(path),
    path: relative(path),
    type: entryType(result.type),
    size: result.size,
    mode: result.mode,
    uid: OWNER,
    gid: OWNER,
    atime: time,
    mtime: time,
    ctime: time,
    ...(result.linkTarget === undefined ? {} : { target: result.linkTarget }),
  };
}

async function list(session: DaemonSession, path: string, depthText: string | null): Promise<Record<string, unknown>[]> {
  const depth = depthText === null ? 1 : Number(depthText);
  if (!Number.isInteger(depth) || depth < 1 || depth > 64)
    throw new E2bHttpError(400, `depth '${depthText?.slice(0, 16)}' is not a whole number from 1 to 64.`);
  const { result } = await session.call('fs.list', { path, recursive: depth > 1, maxDepth: depth, maxEntries: 10_000 });
  return result.entries.map((entry) => {
    const time = new Date(entry.mtimeMs).toISOString();
    const full = posix.join(path, entry.path);
    return {
      name: posix.basename(entry.path),
      path: relative(full),
      type: entryType(entry.type),
      size: entry.size,
      // A daemon older than listings with modes gives none: 0, as before.
      mode: entry.mode ?? 0,
      uid: OWNER,
      gid: OWNER,
      atime: time,
      mtime: time,
      ctime: time,
      ...(entry.linkTarget === undefined ? {} : { target: entry.linkTarget }),
    };
  });
}

async function download(session: DaemonSession, path: string, res: ServerResponse): Promise<void> {
  const { result } = await session.call('fs.stat', { path });
  if (result.type === 'directory') throw new E2bHttpError(400, `'${relative(path)}' is a folder; read files one at a time.`);
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': result.size });
  for (let offset = 0; offset < result.size; offset += PIECE_BYTES) {
    const length = Math.min(PIECE_BYTES, result.size - offset);
    const { payload } = await session.call('fs.read', { path, range: { unit: 'bytes', offset, length } });
    if (!payload || payload.length === 0) break;
    if (!res.write(payload)) await new Promise((resolve) => (res.once('drain', resolve), res.once('close', resolve)));
    if (res.destroyed) return;
  }
  res.end();
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > MAX_FILE_BYTES) throw new E2bHttpError(413, `The file is ${declared} bytes; Warren writes at most ${MAX_FILE_BYTES} per request.`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_FILE_BYTES) throw new E2bHttpError(413, `The file exceeds ${MAX_FILE_BYTES} bytes; Warren writes at most that per request.`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** A helper's path as the volume's own (`/mnt/volume/a/b` is `/a/b`). */
function relative(path: string): string {
  return `/${posix.relative(VOLUME_MOUNT, path)}`;
}

function entryType(type: string): EntryType {
  return type === 'file' || type === 'directory' || type === 'symlink' ? type : 'unknown';
}
