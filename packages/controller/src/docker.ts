import Docker from 'dockerode';
import { CodedError } from '@warren/protocol';
import { agentCommand, RUNTIME_DIR, runtimeTar, type AgentRuntime } from './runtime.js';

/** Labels Warren sets on its containers; the controller's whole state lives in these. */
export const LABELS = {
  sandbox: 'warren.sandbox',
  image: 'warren.image',
  createdAt: 'warren.created-at',
  expiresAt: 'warren.expires-at',
  userPrefix: 'warren.label.',
} as const;

/** Where a sandbox's socket folder is mounted; the daemon listens and finds its secret here. */
export const SOCKET_DIR_IN_SANDBOX = '/run/warren';
/** The uid:gid sandboxes run as unless asked otherwise. */
export const SANDBOX_USER = { uid: 1000, gid: 1000 };

/** What the controller decided a sandbox container must be. */
export interface SandboxContainerSpec {
  id: string;
  image: string;
  env: Record<string, string>;
  labels: Record<string, string>;
  createdAt: Date;
  expiresAt: Date;
  socketDirOnHost: string;
  runtimeVolume: string;
  limits: { memoryMb: number; cpus: number; pidsLimit: number };
}

/**
 * The exact container-create body for a sandbox: hardened by default (non-root, every capability
 * dropped, no-new-privileges, pids/memory/CPU limits with swap equal to memory, no network,
 * init). Pure, so a unit test can pin it.
 */
export function containerCreateBody(spec: SandboxContainerSpec): Docker.ContainerCreateOptions {
  const memoryBytes = spec.limits.memoryMb * 1024 * 1024;
  const labels: Record<string, string> = {
    [LABELS.sandbox]: spec.id,
    [LABELS.image]: spec.image,
    [LABELS.createdAt]: spec.createdAt.toISOString(),
    [LABELS.expiresAt]: spec.expiresAt.toISOString(),
  };
  for (const [key, value] of Object.entries(spec.labels)) labels[`${LABELS.userPrefix}${key}`] = value;
  return {
    name: `warren-${spec.id}`,
    Image: spec.image,
    Entrypoint: agentCommand([
      '--socket',
      `${SOCKET_DIR_IN_SANDBOX}/agent.sock`,
      '--secret-file',
      `${SOCKET_DIR_IN_SANDBOX}/secret`,
      '--root',
      '/workspace',
      '--home',
      '/workspace',
    ]),
    Cmd: [],
    User: `${SANDBOX_USER.uid}:${SANDBOX_USER.gid}`,
    WorkingDir: '/workspace',
    Env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`),
    Labels: labels,
    NetworkDisabled: true,
    HostConfig: {
      Init: true,
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges:true'],
      Privileged: false,
      NetworkMode: 'none',
      PidsLimit: spec.limits.pidsLimit,
      Memory: memoryBytes,
      MemorySwap: memoryBytes,
      NanoCpus: Math.round(spec.limits.cpus * 1e9),
      Binds: [`${spec.socketDirOnHost}:${SOCKET_DIR_IN_SANDBOX}:rw`],
      Mounts: [{ Type: 'volume', Source: spec.runtimeVolume, Target: RUNTIME_DIR, ReadOnly: true }],
      AutoRemove: false,
    },
  };
}

/** A Warren container as Docker lists it. */
export interface SandboxContainer {
  containerId: string;
  labels: Record<string, string>;
  state: string;
}

/**
 * The one adapter between Warren and the Docker engine: every dockerode call goes through here,
 * and every Docker failure comes out as a {@link CodedError}.
 */
export class DockerProvider {
  constructor(readonly docker: Docker = new Docker()) {}

  async ping(): Promise<void> {
    await this.docker.ping().catch((err: unknown) => rethrow(err, 'ping the Docker engine'));
  }

  /**
   * Makes sure the runtime volume for this runtime exists and is complete, filling it through a
   * created (never started) helper container. A half-filled volume (no `.complete`) is refilled.
   */
  async ensureRuntimeVolume(runtime: AgentRuntime, helperImage: string): Promise<string> {
    const name = `warren-runtime-${runtime.hash}`;
    const existing = await this.docker.getVolume(name).inspect().catch(() => undefined);
    if (existing && (await this.volumeIsComplete(name, helperImage))) return name;
    if (!existing) await this.docker.createVolume({ Name: name, Labels: { 'warren.runtime': runtime.hash } }).catch((e: unknown) => rethrow(e, `create volume ${name}`));
    await this.withHelper(name, helperImage, async (helper) => {
      await helper.putArchive(await runtimeTar(runtime), { path: RUNTIME_DIR });
    });
    return name;
  }

  private async volumeIsComplete(volume: string, helperImage: string): Promise<boolean> {
    return this.withHelper(volume, helperImage, async (helper) => {
      const archive = await helper.getArchive({ path: `${RUNTIME_DIR}/.complete` }).catch(() => undefined);
      archive?.resume();
      return archive !== undefined;
    });
  }

  private async withHelper<T>(volume: string, image: string, use: (c: Docker.Container) => Promise<T>): Promise<T> {
    const helper = await this.docker
      .createContainer({ Image: image, Entrypoint: ['/bin/true'], Cmd: [], HostConfig: { Mounts: [{ Type: 'volume', Source: volume, Target: RUNTIME_DIR }], NetworkMode: 'none' } })
      .catch((e: unknown) => rethrow(e, `create a helper container from ${image}`));
    try {
      return await use(helper);
    } finally {
      await helper.remove({ force: true }).catch(() => undefined);
    }
  }

  /** Creates and starts a sandbox container; returns its id. A failed start leaves nothing behind. */
  async startSandbox(spec: SandboxContainerSpec): Promise<string> {
    const container = await this.docker.createContainer(containerCreateBody(spec)).catch((e: unknown) => rethrow(e, `create a container from ${spec.image}`));
    try {
      await container.start();
    } catch (err) {
      await container.remove({ force: true }).catch(() => undefined);
      rethrow(err, `start the container for sandbox ${spec.id}`);
    }
    return container.id;
  }

  /** Removes a sandbox's container and its anonymous volumes; an absent one is not an error. */
  async removeSandbox(containerId: string): Promise<void> {
    await this.docker
      .getContainer(containerId)
      .remove({ force: true, v: true })
      .catch((err: { statusCode?: number }) => {
        if (err.statusCode !== 404) rethrow(err, `remove container ${containerId}`);
      });
  }

  /** Every Warren sandbox container, running or not. */
  async listSandboxes(): Promise<SandboxContainer[]> {
    const containers = await this.docker.listContainers({ all: true, filters: { label: [LABELS.sandbox] } }).catch((e: unknown) => rethrow(e, 'list containers'));
    return containers.map((c) => ({ containerId: c.Id, labels: c.Labels, state: c.State }));
  }

  /** The container's state (`running`, `paused`, `exited`, ...), or undefined when it is gone. */
  async containerState(containerId: string): Promise<string | undefined> {
    try {
      const info = await this.docker.getContainer(containerId).inspect();
      return info.State.Status;
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return undefined;
      return rethrow(err, `inspect container ${containerId}`);
    }
  }

  /** The last lines the container wrote, for error messages when its daemon does not come up. */
  async logsTail(containerId: string, lines = 20): Promise<string> {
    try {
      const raw = (await this.docker.getContainer(containerId).logs({ stdout: true, stderr: true, tail: lines })) as unknown as Buffer;
      return demuxToText(raw);
    } catch {
      return '';
    }
  }
}

/** Docker's log stream interleaves 8-byte frame headers with the text; drop them. */
function demuxToText(raw: Buffer): string {
  const parts: Buffer[] = [];
  let offset = 0;
  while (offset + 8 <= raw.length && raw[offset]! <= 2 && raw[offset + 1] === 0) {
    const size = raw.readUInt32BE(offset + 4);
    parts.push(raw.subarray(offset + 8, offset + 8 + size));
    offset += 8 + size;
  }
  return (offset === 0 ? raw : Buffer.concat(parts)).toString('utf8').trim();
}

/** Maps a dockerode failure to a Warren error that says what to do. */
function rethrow(err: unknown, doing: string): never {
  const e = err as { statusCode?: number; json?: { message?: string }; reason?: string; code?: string; message?: string };
  const detail = e.json?.message ?? e.reason ?? e.message ?? String(err);
  if (e.code === 'ECONNREFUSED' || e.code === 'ENOENT' || e.code === 'EACCES') {
    throw new CodedError('UPSTREAM_UNAVAILABLE', `Could not ${doing}: the Docker engine is not reachable (${e.code}). Start Docker (scripts/start does) or set DOCKER_HOST.`);
  }
  if (e.statusCode === 404 && /image/i.test(detail)) {
    throw new CodedError('NOT_FOUND', `Could not ${doing}: ${detail}. Build Warren's images with scripts/build-images, or docker pull the image.`);
  }
  if (e.statusCode === 404) throw new CodedError('SANDBOX_NOT_FOUND', `Could not ${doing}: ${detail}`);
  if (e.statusCode === 409) throw new CodedError('CONFLICT', `Could not ${doing}: ${detail}`);
  throw new CodedError('UPSTREAM_UNAVAILABLE', `Could not ${doing}: ${detail}`);
}
