import { createHash, randomBytes } from 'node:crypto';
import { constants as fsConstants } from 'node:fs';
import { access, chown, mkdir, mkdtemp, open, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { tmpdir } from 'node:os';
import { Duplex, Readable } from 'node:stream';
import Docker from 'dockerode';
import {
  CodedError,
  containerEnv,
  DEFAULT_ROOT,
  EGRESS_TRANSPARENT_ADDRESS,
  EGRESS_TRUST_DIR,
  SandboxSettings as SandboxSettingsSchema,
} from '@warren/protocol';
import type { SandboxSettings } from '@warren/protocol';
import { AgentDirs, type HostIdentity } from './agent-dir.js';
import { CPU_CGROUP_IN_SANDBOX, CpuCgroups, DAEMON_CPUS } from './cpu-cgroups.js';
import { refuseReservedTarget, refuseWorkdir } from './sandbox-plan.js';
import { resolveEngine } from './engine-endpoint.js';
import { detectEngine, hardLimits, processLimitCandidates, unenforcedLimits, type EngineKind, type EngineLimitsInfo } from './engine-kind.js';
import { openWorkspaceStore, type WorkspaceStore } from './workspace-store.js';
import { copyTree, diskBytes, emptyTree, preCopyTree, syncTree } from './tree-copy.js';
import { closeNamespaces, PODMAN_DEFAULT_SECCOMP, type SeccompProfile } from './seccomp.js';
import { containerLabels, LABELS, withoutUnset } from './labels.js';
import type { Logger } from './logger.js';
import { defaultStateDir } from './config.js';
import type {
  BuildOptions,
  DaemonEndpoint,
  ProvidedImage,
  ProvidedSandbox,
  ProvidedSnapshot,
  ProviderIsolation,
  ProviderState,
  PullOptions,
  SandboxProvider,
  SandboxSpec,
  SandboxStats,
} from './provider.js';
import { agentCommand, bridgeCommand, nodeArch, RUNTIME_DIR, RUNTIME_RESOLV_CONF, resolvConfText, runtimeTar, type AgentRuntime } from './runtime.js';

/**
 * Where the daemon listens. With the `socket` channel it is the sandbox's host folder, bound in,
 * where the daemon also finds its secret; with `exec` it is a tmpfs of the container's own
 * (mode 0700, root's), reached through the engine's API.
 */
export const SOCKET_DIR_IN_SANDBOX = '/run/warren';
/** The environment variable that carries the daemon's secret with the `exec` channel (the daemon unsets it at once). */
export const SECRET_VARIABLE = 'WARREN_AGENT_SECRET';

/**
 * How the controller reaches a daemon: `socket`, a unix socket in a host folder bound into the
 * sandbox (the engine shares this machine's file system); `exec`, a stream the engine's API opens
 * into the sandbox (`docker exec` of a small bridge to the daemon's socket), for any engine.
 */
export type DaemonChannel = 'socket' | 'exec';

/**
 * The daemon's capabilities, and nothing else: it runs as the container's root so that sandbox
 * code (the sandbox user) cannot signal, trace or read it, and it needs exactly these to act for
 * that user: CHOWN, DAC_OVERRIDE and FOWNER to create and hand over the user's files, SETUID and
 * SETGID to start commands as the user, KILL to signal the user's processes, and SYS_PTRACE to
 * read their `/proc/<pid>/environ`, where the tree-kill marker is. Commands lose all of them when
 * they drop to the sandbox user, and no-new-privileges keeps them from coming back.
 */
export const DAEMON_CAPABILITIES = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID', 'KILL', 'SYS_PTRACE', 'NET_BIND_SERVICE'] as const;

/** The label of an engine volume that holds a named volume (its id). */
export const VOLUME_LABEL = 'warren.volume';

/** The engine's name of a named volume without a quota. */
function volumeName(id: string): string {
  return `warren-vol-${id}`;
}

/** The label a snapshot's image carries: the snapshot's id. */
export const SNAPSHOT_LABEL = 'warren.snapshot';
/** The repository a snapshot's image is tagged in: `warren-snapshot/<id>:latest`. */
export const SNAPSHOT_REPOSITORY = 'warren-snapshot';
/** The image a snapshot keeps (snapshot ids are lower case letters, digits and `-`). */
export function snapshotImage(snapshotId: string): string {
  return `${SNAPSHOT_REPOSITORY}/${snapshotId}:latest`;
}

/**
 * How old the runtime fill's helper container must be before another controller takes it as left by
 * one that died mid-fill: a fill copies about 120 MB into the engine, seconds even on a remote one.
 */
const RUNTIME_FILL_STALE_MS = 180_000;

/** Defaults for settings that labels of older sandboxes lack. */
const HARDENING_DEFAULTS = { readOnlyRootfs: true, tmpMb: 256, openFiles: 4096, fileSizeMb: 4096 } as const;
/** The writable folder every sandbox gets, whatever its image has. */
export const WORKSPACE = DEFAULT_ROOT;

/** What the controller decided a sandbox container must be. */
export interface SandboxContainerSpec {
  /** The container's own id in Warren: the sandbox id, or a pool member's id. */
  id: string;
  image: string;
  env: Record<string, string>;
  /** The image's own `ENV` (`KEY=value`), so the variables that would reach into the daemon are blanked from it too (`containerEnv`). */
  imageEnv?: readonly string[] | undefined;
  /** Every label, Warren's and the caller's, already prefixed. */
  labels: Record<string, string>;
  /** `socket`: the daemon's host folder, bound in. `exec`: the daemon's secret, passed in its environment. */
  channel: { kind: 'socket'; socketDirOnHost: string } | { kind: 'exec'; daemonSecret: string };
  runtimeVolume: string;
  settings: SandboxSettings;
  /** The sandbox's own disk on the host (the quota), bound at /workspace instead of a volume. */
  workspaceOnHost?: string | undefined;
  /** Named volumes, resolved: a host folder (a volume with a quota) or an engine volume, and where each goes. */
  volumes?: { type: 'bind' | 'volume'; source: string; target: string; readOnly: boolean }[] | undefined;
  /**
   * RLIMIT_NPROC of every process, set only where the engine would otherwise pick one above its
   * own hard limit (Podman); Docker leaves the engine's. The pids limit bounds one sandbox.
   */
  processLimit?: number | undefined;
  /** A seccomp profile file on the engine's host, where the engine's default is too open (Podman: {@link closeNamespaces}). */
  seccompProfile?: string | undefined;
  /**
   * A resolver file on the engine's host, bound read-only over `/etc/resolv.conf` (the egress
   * relay's name server; the engine refuses `Dns` with network `none`, and a read-only root file
   * system makes its own copy read-only too).
   */
  resolvConfOnHost?: string | undefined;
  /**
   * The sandbox's CPU cgroups on the engine's host ({@link CpuCgroups}), bound at
   * {@link CPU_CGROUP_IN_SANDBOX}: sandbox code is capped at `cpus` there, and the daemon has its
   * own share, so the container's own cap covers both.
   */
  cpuCgroupOnHost?: string | undefined;
}

/** Where the sandbox's writable disk goes: `/workspace` unless the create asked for another folder. */
function workspaceOf(settings: SandboxSettings): string {
  return settings.workspace ?? WORKSPACE;
}

/** True when a host mount replaces the workspace volume. */
function workspaceIsMounted(spec: SandboxContainerSpec): boolean {
  return spec.settings.mounts.some((m) => m.path === workspaceOf(spec.settings));
}

/**
 * The exact container-create body for a sandbox: hardened whatever the settings say (commands
 * as the non-root sandbox user, the daemon as root with only {@link DAEMON_CAPABILITIES},
 * no-new-privileges, pids/memory/CPU limits with swap equal to memory, a read-only root file
 * system with a size-capped /tmp, open-file and file-size limits, init, no host namespaces,
 * only the socket folder, the read-only runtime, a private workspace volume and the checked host
 * mounts). Pure, so a unit test can pin it.
 */
export function containerCreateBody(spec: SandboxContainerSpec): Docker.ContainerCreateOptions {
  const settings = { ...HARDENING_DEFAULTS, ...spec.settings };
  // Planned requests were checked already; records rebuilt from labels, hibernated sandboxes and
  // old snapshots come here without planning, so the rule holds at the last step too.
  refuseReservedTarget(workspaceOf(settings), 'the workspace', 'workspace');
  for (const m of settings.mounts) refuseReservedTarget(m.path, 'mount', 'mounts');
  for (const v of spec.volumes ?? []) refuseReservedTarget(v.target, 'volume', 'volumes');
  refuseWorkdir(settings.workdir);
  const memoryBytes = settings.memoryMb * 1024 * 1024;
  const mounts: Docker.MountConfig = [{ Type: 'volume', Source: spec.runtimeVolume, Target: RUNTIME_DIR, ReadOnly: true }];
  // The sandbox's own disk where the host gives a quota (a `Mounts` bind: a missing source fails
  // the start instead of being made anew on the host's disk, as `Binds` would). Otherwise an
  // anonymous volume: Docker copies the image's /workspace into it (if any), the daemon hands it
  // to the sandbox user, and `remove({ v: true })` deletes it with the container.
  if (spec.workspaceOnHost !== undefined && !workspaceIsMounted(spec))
    mounts.push({ Type: 'bind', Source: spec.workspaceOnHost, Target: workspaceOf(settings), ReadOnly: false, BindOptions: { Propagation: 'rprivate' } });
  else if (!workspaceIsMounted(spec)) mounts.push({ Type: 'volume', Source: '', Target: workspaceOf(settings), ReadOnly: false });
  for (const m of settings.mounts)
    mounts.push({ Type: 'bind', Source: m.hostPath, Target: m.path, ReadOnly: m.readOnly, BindOptions: { Propagation: 'rprivate' } });
  for (const v of spec.volumes ?? [])
    mounts.push(
      v.type === 'bind'
        ? { Type: 'bind', Source: v.source, Target: v.target, ReadOnly: v.readOnly, BindOptions: { Propagation: 'rprivate' } }
        : { Type: 'volume', Source: v.source, Target: v.target, ReadOnly: v.readOnly },
    );
  // With the exec channel the file is in the runtime volume, below the engine's own root, where
  // Docker insists on rslave (nothing is ever mounted below a single file, so it changes nothing).
  if (spec.cpuCgroupOnHost !== undefined)
    mounts.push({ Type: 'bind', Source: spec.cpuCgroupOnHost, Target: CPU_CGROUP_IN_SANDBOX, ReadOnly: false, BindOptions: { Propagation: 'rprivate' } });
  if (spec.resolvConfOnHost !== undefined)
    mounts.push({
      Type: 'bind',
      Source: spec.resolvConfOnHost,
      Target: '/etc/resolv.conf',
      ReadOnly: true,
      BindOptions: { Propagation: spec.channel.kind === 'exec' ? 'rslave' : 'rprivate' },
    });
  const hostConfig: Docker.HostConfig = {
    Init: true,
    CapDrop: ['ALL'],
    CapAdd: [...DAEMON_CAPABILITIES],
    SecurityOpt: ['no-new-privileges=true', ...(spec.seccompProfile === undefined ? [] : [`seccomp=${spec.seccompProfile}`])],
    Privileged: false,
    NetworkMode: settings.network,
    PidMode: '',
    IpcMode: 'private',
    PidsLimit: settings.pidsLimit,
    Memory: memoryBytes,
    MemorySwap: memoryBytes,
    NanoCpus: Math.round((settings.cpus + (spec.cpuCgroupOnHost === undefined ? 0 : DAEMON_CPUS)) * 1e9),
    Binds: spec.channel.kind === 'socket' ? [`${spec.channel.socketDirOnHost}:${SOCKET_DIR_IN_SANDBOX}:rw`] : [],
    Mounts: mounts,
    ReadonlyRootfs: settings.readOnlyRootfs,
    Tmpfs: {
      // exec: build tools and test runners run programs from /tmp; nosuid/nodev as everywhere.
      '/tmp': `rw,exec,nosuid,nodev,size=${settings.tmpMb}m,mode=1777`,
      // The daemon's own folder when no host folder is bound: root's, so sandbox code cannot enter it.
      ...(spec.channel.kind === 'exec' ? { [SOCKET_DIR_IN_SANDBOX]: 'rw,noexec,nosuid,nodev,size=1m,mode=0700' } : {}),
      // Where the daemon writes the egress CA and trust bundle: root's, readable by the sandbox user, not writable by it.
      [EGRESS_TRUST_DIR]: 'rw,noexec,nosuid,nodev,size=2m,mode=0755',
    },
    Ulimits: [
      { Name: 'nofile', Soft: settings.openFiles, Hard: settings.openFiles },
      { Name: 'fsize', Soft: settings.fileSizeMb * 1024 * 1024, Hard: settings.fileSizeMb * 1024 * 1024 },
      ...(spec.processLimit === undefined ? [] : [{ Name: 'nproc', Soft: spec.processLimit, Hard: spec.processLimit }]),
    ],
    Devices: [],
    AutoRemove: false,
    RestartPolicy: { Name: 'no' },
  };
  if (settings.runtime !== 'runc') hostConfig.Runtime = settings.runtime;
  return {
    name: `warren-${spec.id}`,
    Image: spec.image,
    Entrypoint: agentCommand([
      '--socket',
      `${SOCKET_DIR_IN_SANDBOX}/agent.sock`,
      ...(spec.channel.kind === 'socket' ? ['--secret-file', `${SOCKET_DIR_IN_SANDBOX}/secret`] : ['--secret-env', SECRET_VARIABLE]),
      '--root',
      workspaceOf(settings),
      '--home',
      workspaceOf(settings),
      '--user',
      settings.user,
      ...(workspaceIsMounted(spec) ? [] : ['--own-root']),
      ...(spec.cpuCgroupOnHost === undefined ? [] : ['--cpu-cgroup', CPU_CGROUP_IN_SANDBOX]),
    ]),
    Cmd: [],
    // The daemon's identity; every command it starts runs as `settings.user`.
    User: '0:0',
    WorkingDir: settings.workdir,
    // The sandbox's environment, minus what would run code inside the daemon (handed to it instead).
    Env: [...containerEnv(spec.env, spec.imageEnv), ...(spec.channel.kind === 'exec' ? [`${SECRET_VARIABLE}=${spec.channel.daemonSecret}`] : [])],
    Labels: spec.labels,
    NetworkDisabled: settings.network === 'none',
    HostConfig: hostConfig,
  };
}

/** The fields of `docker info` that say how the engine isolates containers. */
interface EngineInfo extends EngineLimitsInfo {
  Architecture?: string;
  OperatingSystem?: string;
  Runtimes?: Record<string, unknown>;
  DefaultRuntime?: string;
  Driver?: string;
  DockerRootDir?: string;
}

/**
 * Reads the engine's isolation from `docker info`. Under user-namespace remap the engine keeps its
 * data in `<data-root>/<uid>.<gid>`, which is how the remapped root is found. Podman lists every
 * runtime it knows a path for, installed or not, so on Podman only its default runtime counts.
 */
export function engineIsolation(info: EngineInfo, engine?: EngineKind): Omit<ProviderIsolation, 'diskQuota'> {
  const options = (info.SecurityOptions ?? []).map((o) => /name=([^,]+)/.exec(o)?.[1] ?? o);
  const remapped = options.includes('userns') ? /\/(\d+)\.(\d+)\/?$/.exec(info.DockerRootDir ?? '') : null;
  const cgroupDriver = info.CgroupDriver ?? 'unknown';
  const runtimes = engine?.name === 'podman' ? [info.DefaultRuntime ?? 'runc'] : Object.keys(info.Runtimes ?? { runc: {} });
  const limitsNotEnforced = unenforcedLimits(info);
  return {
    ...(engine ? { engine } : {}),
    usernsRemap: remapped ? { uid: Number(remapped[1]), gid: Number(remapped[2]) } : null,
    rootless: options.includes('rootless'),
    cgroupVersion: info.CgroupVersion ?? '1',
    cgroupDriver,
    limitsEnforced: limitsNotEnforced === undefined,
    ...(limitsNotEnforced === undefined ? {} : { limitsNotEnforced }),
    seccomp: options.includes('seccomp'),
    apparmor: options.includes('apparmor'),
    selinux: options.includes('selinux'),
    gvisor: runtimes.includes('runsc'),
    runtimes,
    storageDriver: info.Driver ?? 'unknown',
  };
}

/**
 * The Docker engine as a {@link SandboxProvider}: every dockerode call goes through here, and
 * every Docker failure comes out as a {@link CodedError}. A handle is a container id. The agent
 * runtime reaches containers from a named volume; the daemon is reached through its
 * {@link DaemonChannel}.
 *
 * @example
 * const provider = new DockerProvider({ stateDir, logger });
 * await provider.prepare(runtime, 'warren/sandbox:latest');
 * const handle = await provider.create(spec);
 */
export class DockerProvider implements SandboxProvider {
  readonly name = 'docker';
  readonly docker: Docker;
  private readonly options: DockerProviderOptions;
  private runtimeVolume: string | undefined;
  /** Where the engine keeps the runtime volume on its host (the exec channel binds the egress resolver file from there). */
  private runtimeVolumeMountpoint: string | undefined;
  private dirs: AgentDirs;
  private workspaces: WorkspaceStore | undefined;
  /** Named volumes with a quota: an ext4 image each, as the workspaces have (`<stateDir>/volumes`). */
  private volumeStore: WorkspaceStore | undefined;
  /** The host ids of the container's uid 0 (user-namespace remap), learnt in {@link DockerProvider.prepare}. */
  private remap: { uid: number; gid: number } | null = null;
  /** How daemons are reached, settled in {@link DockerProvider.prepare}. */
  channel: DaemonChannel = 'socket';
  /** The product behind the API (Docker or Podman), learnt in {@link DockerProvider.prepare}. */
  engine: EngineKind | undefined;
  /** RLIMIT_NPROC of sandboxes where the engine needs one said (Podman), chosen in {@link DockerProvider.prepare}. */
  processLimit: number | undefined;
  /** The seccomp profile file sandboxes get where the engine's default lets them make namespaces (Podman). */
  seccompProfile: string | undefined;
  /** The daemons' own CPU apart from sandbox code's, where this host allows it (see {@link CpuCgroups}). */
  private cpuCgroups: CpuCgroups | undefined;

  constructor(options: DockerProviderOptions = {}) {
    this.options = options;
    this.docker = options.docker ?? new Docker(resolveEngine(process.env).options);
    this.dirs = new AgentDirs(options.stateDir ?? defaultStateDir(), daemonOwner(null));
  }

  async ping(): Promise<void> {
    await this.docker.ping().catch((err: unknown) => rethrow(err, 'ping the Docker engine'));
  }

  async isolation(): Promise<ProviderIsolation> {
    const isolation = engineIsolation((await this.docker.info().catch((e: unknown) => rethrow(e, 'read the Docker engine info'))) as EngineInfo, this.engine);
    return { ...isolation, diskQuota: this.workspaces?.describe() ?? { quota: false, kind: 'volume', reason: 'the provider is not prepared yet' } };
  }

  /** The registered runtimes with the arguments the engine passes them (`--network=none` matters). */
  async runtimes(): Promise<{ name: string; args: string[] }[]> {
    const info = (await this.docker.info().catch((e: unknown) => rethrow(e, 'read the Docker engine info'))) as {
      Runtimes?: Record<string, { runtimeArgs?: string[] }>;
      DefaultRuntime?: string;
    };
    // Podman lists every runtime it has a path for, installed or not: only its default is certain.
    if (this.engine?.name === 'podman') return [{ name: info.DefaultRuntime ?? 'runc', args: [] }];
    return Object.entries(info.Runtimes ?? { runc: {} }).map(([name, r]) => ({ name, args: r?.runtimeArgs ?? [] }));
  }

  /**
   * The image's own `ENV` and labels (the engine merges both under the container's), in one
   * inspect. A missing image gives neither: the create then fails with the engine's own answer,
   * except for a snapshot's image (`required`), which must be there.
   */
  private async imageConfig(image: string, required: boolean): Promise<{ env: string[]; labels: Record<string, string> }> {
    try {
      const info = await this.docker.getImage(image).inspect();
      return { env: info.Config?.Env ?? [], labels: info.Config?.Labels ?? {} };
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404 && !required) return { env: [], labels: {} };
      return rethrow(err, `inspect image ${image}`);
    }
  }

  /** True when the image is present on the engine (no registry is asked). */
  async hasImage(image: string): Promise<boolean> {
    try {
      await this.docker.getImage(image).inspect();
      return true;
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return false;
      return rethrow(err, `inspect image ${image}`);
    }
  }

  /**
   * Pulls an image through `docker pull`'s API, following its progress (`modem.followProgress`).
   * The sum of the layers' download sizes is checked as they become known; past `maxBytes` the
   * request is dropped, which makes the engine cancel the pull and release what it fetched. A
   * failed pull removes the name if the engine had already tagged it.
   */
  async pullImage(image: string, options: PullOptions): Promise<void> {
    const abort = new AbortController();
    const onAbort = () => abort.abort();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    let refusal: CodedError | undefined;
    try {
      const stream = (await this.docker.pull(image, { abortSignal: abort.signal }).catch((e: unknown) => {
        throw pullFailure(image, e);
      })) as Readable;
      const sizes = new Map<string, number>();
      const stop = (err: CodedError) => {
        refusal ??= err;
        abort.abort();
        stream.destroy();
      };
      await new Promise<void>((resolve, reject) => {
        this.docker.modem.followProgress(
          stream,
          (err: Error | null) => (err && !refusal ? reject(pullFailure(image, err)) : resolve()),
          (event: PullEvent) => {
            if (refusal) return;
            if (event.error !== undefined || event.errorDetail !== undefined) return stop(pullFailure(image, event.errorDetail?.message ?? event.error));
            const total = event.progressDetail?.total;
            if (event.id !== undefined && typeof total === 'number' && total > 0) {
              sizes.set(event.id, total);
              const sum = [...sizes.values()].reduce((a, b) => a + b, 0);
              if (sum > options.maxBytes)
                return stop(
                  new CodedError(
                    'IMAGE_TOO_LARGE',
                    `The image ${image} is larger than this controller pulls: its layers add up to more than ${mib(options.maxBytes)} MiB (images.maxPullMb). The pull was stopped and nothing of it was kept.`,
                    { image, maxBytes: options.maxBytes, seenBytes: sum },
                  ),
                );
            }
            options.onProgress({ status: event.status ?? '', layer: event.id, current: event.progressDetail?.current, total });
          },
        );
      });
      if (options.signal?.aborted) refusal ??= new CodedError('CANCELLED', `The pull of ${image} was cancelled; nothing of it was kept.`, { image });
      if (refusal) throw refusal;
    } catch (err) {
      // Whatever the engine already tagged under this name goes: a pull either completes or leaves nothing.
      await this.docker
        .getImage(image)
        .remove({ force: false })
        .catch(() => undefined);
      throw err;
    } finally {
      options.signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * Builds an image with the engine's classic builder (which follows no `# syntax=` directive and
   * pulls nothing the caller did not check first: its base images are on the engine already).
   * Intermediate containers are removed, even after a failed step.
   */
  async buildImage(context: Buffer, options: BuildOptions): Promise<{ id: string }> {
    // Seen on Podman 4.3: a compat build's RUN steps ran in the host's network namespace whatever
    // `networkmode` said, so a build could reach the host and the network. Refused rather than trusted.
    if (this.engine?.name === 'podman')
      throw new CodedError(
        'NOT_SUPPORTED',
        `Image builds are refused on Podman ${this.engine.version}: its Docker-compatible build runs RUN steps on the host's network whatever images.buildNetwork says. ` +
          'Build the image with podman build on the engine host (it is then on the engine and a create can name it), or use Docker.',
        { engine: 'podman' },
      );
    const stream = (await this.docker
      .buildImage(Readable.from([context]), {
        t: options.tag,
        dockerfile: options.dockerfile,
        labels: options.labels,
        networkmode: options.network,
        rm: true,
        forcerm: true,
        version: '1',
        abortSignal: options.signal,
      } as Docker.ImageBuildOptions)
      .catch((e: unknown) => rethrow(e, `build the image ${options.tag}`))) as Readable;
    const tail: string[] = [];
    let failure: string | undefined;
    let id: string | undefined;
    await new Promise<void>((resolve, reject) => {
      this.docker.modem.followProgress(
        stream,
        (err: Error | null) => (err ? reject(err) : resolve()),
        (event: BuildEvent) => {
          if (event.stream !== undefined) {
            options.onOutput(event.stream);
            tail.push(...event.stream.split('\n').filter(Boolean));
            tail.splice(0, Math.max(0, tail.length - 40));
          }
          if (event.aux?.ID) id = event.aux.ID;
          if (event.error !== undefined || event.errorDetail !== undefined) failure ??= event.errorDetail?.message ?? event.error ?? 'the build failed';
        },
      );
    }).catch((e: unknown) => {
      if (options.signal?.aborted) throw new CodedError('CANCELLED', `The build of ${options.tag} was cancelled.`);
      rethrow(e, `build the image ${options.tag}`);
    });
    if (options.signal?.aborted) throw new CodedError('CANCELLED', `The build of ${options.tag} was cancelled.`);
    if (failure !== undefined || id === undefined) {
      const reason = failure ?? 'the engine reported no image id';
      const code = /no space left on device/i.test(reason) ? 'IMAGE_TOO_LARGE' : 'BUILD_FAILED';
      throw new CodedError(code, `The build of ${options.tag} failed: ${reason.trim()}. The last lines of its output:\n${tail.join('\n')}`, {
        tag: options.tag,
        output: tail.join('\n'),
      });
    }
    return { id };
  }

  async listImages(label: string): Promise<ProvidedImage[]> {
    const images = await this.docker.listImages({ filters: { label: [label] } }).catch((e: unknown) => rethrow(e, 'list images'));
    return images
      .map((i) => ({
        id: i.Id,
        tags: (i.RepoTags ?? []).filter((t) => t !== '<none>:<none>'),
        createdAt: new Date(i.Created * 1000).toISOString(),
        sizeBytes: i.Size,
        labels: i.Labels ?? {},
      }))
      .sort((a, b) => b.createdAt.localeCompare(a.createdAt));
  }

  async inspectImage(image: string): Promise<{ id: string; labels: Record<string, string>; onBuild: string[] } | undefined> {
    try {
      const info = await this.docker.getImage(image).inspect();
      return { id: info.Id, labels: info.Config?.Labels ?? {}, onBuild: ((info.Config?.OnBuild ?? []) as unknown[]).map(String) };
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return undefined;
      return rethrow(err, `inspect image ${image}`);
    }
  }

  async removeImage(image: string): Promise<void> {
    await this.docker
      .getImage(image)
      .remove()
      .catch((err: { statusCode?: number }) => {
        if (err.statusCode === 404) return;
        if (err.statusCode === 409) {
          const detail = (err as { json?: { message?: string } }).json?.message ?? 'it is in use';
          throw new CodedError('CONFLICT', `Could not remove the image ${image}: ${detail}. Kill the sandboxes that use it first.`, { image });
        }
        rethrow(err, `remove the image ${image}`);
      });
  }

  /**
   * Gets the engine ready for sandboxes: learns its user-namespace remap (who the daemon's folders
   * and the workspace disks must belong to on the host), opens the workspace disks (a quota where
   * this host can give one) and removes those whose container is gone, fills the runtime volume
   * of this build (see {@link DockerProvider.ensureRuntimeVolume}) and removes old ones.
   */
  async prepare(runtime: AgentRuntime, helperImage: string): Promise<{ oldRuntimesRemoved: number }> {
    const stateDir = this.options.stateDir ?? defaultStateDir();
    const info = (await this.docker.info().catch((e: unknown) => rethrow(e, 'read the Docker engine info'))) as EngineInfo;
    this.engine = detectEngine(await this.docker.version().catch((e: unknown) => rethrow(e, 'read the Docker engine version')));
    this.options.logger?.info({ engine: this.engine.name, version: this.engine.version, apiVersion: this.engine.apiVersion }, 'engine.detected');
    this.remap = engineIsolation(info, this.engine).usernsRemap;
    // The daemon is this controller's own Node, so the engine must run the same architecture.
    if (info.Architecture && nodeArch(info.Architecture) !== process.arch)
      throw new CodedError(
        'UPSTREAM_UNAVAILABLE',
        `The Docker engine runs ${info.Architecture} containers, but this controller's Node is ${process.arch}, and it is what runs in each sandbox. Run the controller on a machine of the engine's architecture (or the controller image on the engine itself: docs/install.md).`,
      );
    const wanted = this.options.daemonChannel ?? 'auto';
    const localEngine = isLocalEngine(this.docker);
    const engineInVm = /docker desktop/i.test(info.OperatingSystem ?? '');
    // Only asked when it decides: a controller in a container, or a folder the engine cannot see.
    const sharesFolders =
      (wanted === 'auto' || this.engine.name === 'podman') && localEngine && !engineInVm && (await this.engineSeesFolder(stateDir, helperImage));
    this.channel = chooseChannel(wanted, { localEngine, engineInVm, sharesFolders });
    if (this.engine.name === 'podman') this.seccompProfile = await this.podmanSeccompProfile(stateDir, sharesFolders);
    this.options.logger?.info({ channel: this.channel }, 'daemon.channel');
    this.dirs = new AgentDirs(stateDir, daemonOwner(this.remap), (folder, error) =>
      this.options.logger?.warn({ folder, error: error instanceof Error ? error.message : String(error) }, 'daemon-folder.remove-failed'),
    );
    // Folders an earlier run set aside and could not remove: in the background, never in the way of the start.
    void this.dirs.sweep();
    this.workspaces = await openWorkspaceStore({
      stateDir,
      mode: this.options.workspaceQuota,
      remoteEngine: !isLocalEngine(this.docker),
      reserveBytes: this.options.workspaceReserveMb === undefined ? undefined : this.options.workspaceReserveMb * 1024 * 1024,
      logger: this.options.logger,
    });
    this.volumeStore = await openWorkspaceStore({
      stateDir: path.join(stateDir, 'volumes'),
      mode: this.options.workspaceQuota,
      remoteEngine: !isLocalEngine(this.docker),
      reserveBytes: this.options.workspaceReserveMb === undefined ? undefined : this.options.workspaceReserveMb * 1024 * 1024,
      logger: this.options.logger,
    });
    const known = new Set((await this.list()).map((s) => s.labels[LABELS.sandbox]));
    for (const agentId of await this.workspaces.list()) if (!known.has(agentId)) await this.workspaces.remove(agentId);
    // Cgroups are paths on the engine's host: only a controller beside a local engine, and not
    // under remap, where the container's root cannot move the sandbox user's processes.
    this.cpuCgroups = localEngine && !engineInVm && !this.remap ? await CpuCgroups.open() : undefined;
    this.options.logger?.info({ daemonCpu: this.cpuCgroups ? 'own cgroup' : "shares the sandbox's limit" }, 'daemon.cpu');
    await this.cpuCgroups?.sweep(new Set([...known].filter((id): id is string => id !== undefined)));
    this.runtimeVolume = await this.ensureRuntimeVolume(runtime, helperImage);
    this.runtimeVolumeMountpoint = await this.docker
      .getVolume(this.runtimeVolume)
      .inspect()
      .then((v: { Mountpoint?: string }) => v.Mountpoint || undefined)
      .catch(() => undefined);
    if (this.engine.name === 'podman') this.processLimit = await this.chooseProcessLimit(helperImage);
    return { oldRuntimesRemoved: (await this.removeOldRuntimeVolumes(this.runtimeVolume)).length };
  }

  /**
   * Writes Podman's default seccomp profile with namespaces closed ({@link closeNamespaces}) into
   * the state folder and returns its path, which Podman reads on its own host (its API takes a
   * path, not the profile). Without it sandbox code could make user namespaces, which Docker's
   * default refuses; so a Podman whose host this controller does not share is refused.
   */
  private async podmanSeccompProfile(stateDir: string, sharesFolders: boolean): Promise<string> {
    let base: SeccompProfile;
    try {
      if (!sharesFolders) throw new Error("the engine does not see this controller's folders");
      base = JSON.parse(await readFile(PODMAN_DEFAULT_SECCOMP, 'utf8')) as SeccompProfile;
    } catch (err) {
      throw new CodedError(
        'NOT_SUPPORTED',
        `Podman's default seccomp profile lets sandbox code make user namespaces, and Warren closes them with a profile file on the engine's host; it cannot here (${(err as Error).message}). ` +
          `Run the controller on the Podman host with ${PODMAN_DEFAULT_SECCOMP} present (the containers-common package), or use Docker (docs/install.md, Podman).`,
      );
    }
    const text = `${JSON.stringify(closeNamespaces(base))}\n`;
    const file = path.join(stateDir, `seccomp-podman-${createHash('sha256').update(text).digest('hex').slice(0, 16)}.json`);
    await mkdir(stateDir, { recursive: true });
    // Written aside and renamed in: a controller sharing this state folder may be starting a container with it.
    const aside = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`;
    await writeFile(aside, text, { mode: 0o644 });
    await rename(aside, file);
    this.options.logger?.info({ seccompProfile: file }, 'engine.seccomp-profile');
    return file;
  }

  /**
   * The largest RLIMIT_NPROC a container of this engine starts with (see
   * {@link processLimitCandidates}): each candidate is tried on a helper container that runs
   * `/bin/true`, since only a start shows whether the engine may set it. The configured value is
   * tried alone, and a refusal says which setting to lower.
   */
  private async chooseProcessLimit(helperImage: string): Promise<number> {
    let ownHard: number | undefined;
    try {
      ownHard = hardLimits(await readFile('/proc/self/limits', 'utf8')).processes;
    } catch {
      ownHard = undefined;
    }
    const candidates = processLimitCandidates(this.options.processLimit, ownHard);
    let refusal = '';
    for (const limit of candidates) {
      const helper = await this.docker
        .createContainer({
          Image: helperImage,
          Entrypoint: ['/bin/true'],
          Cmd: [],
          User: '0:0',
          // Podman's own open-files default is above such an engine's hard limit too: the sandboxes' default goes with it.
          HostConfig: {
            NetworkMode: 'none',
            Ulimits: [
              { Name: 'nproc', Soft: limit, Hard: limit },
              { Name: 'nofile', Soft: HARDENING_DEFAULTS.openFiles, Hard: HARDENING_DEFAULTS.openFiles },
            ],
          },
        })
        .catch((e: unknown) => rethrow(e, `create a helper container from ${helperImage}`));
      try {
        await helper.start();
        // It runs /bin/true: once it has exited the engine removes it without a race with its exit.
        await helper.wait().catch(() => undefined);
        this.options.logger?.info({ processLimit: limit, tried: candidates }, 'engine.process-limit');
        return limit;
      } catch (err) {
        refusal = (err as { json?: { message?: string } }).json?.message ?? String(err);
        if (!/rlimit/i.test(refusal)) rethrow(err, "start a helper container to learn the engine's process limit");
      } finally {
        await removeHelper(helper);
      }
    }
    throw new CodedError(
      'NOT_SUPPORTED',
      `The ${this.engine?.name ?? 'container'} engine refused every process limit Warren tried (${candidates.join(', ')}): ${refusal}. ` +
        "Set engine.processLimit (WARREN_PROCESS_LIMIT) to at most the engine's own hard limit (ulimit -Hu of the engine's service).",
    );
  }

  /**
   * Makes sure the runtime volume for this runtime exists and is complete, filling it through a
   * created (never started) helper container. A volume is filled by one controller at a time, and
   * never once it is complete: the engine unpacks an archive over an existing file by removing it
   * first, so a second fill would pull the loader and Node from under the sandboxes that another
   * controller on this engine is starting from the same volume. The fill's helper container has a
   * fixed name, and the engine's unique container names are the lock: a controller that finds it
   * taken waits for `.complete`. A fill that died midway (no `.complete`, no helper) is redone; a
   * helper older than {@link RUNTIME_FILL_STALE_MS} is taken as left by a controller that died.
   */
  async ensureRuntimeVolume(runtime: AgentRuntime, helperImage: string, staleMs = RUNTIME_FILL_STALE_MS): Promise<string> {
    const name = `warren-runtime-${runtime.hash}`;
    const lock = `warren-runtime-fill-${runtime.hash}`;
    for (let waited = 0; ; waited++) {
      const existing = await this.docker
        .getVolume(name)
        .inspect()
        .catch((err: { statusCode?: number }) => (err.statusCode === 404 ? undefined : rethrow(err, `inspect volume ${name}`)));
      if (existing && (await this.volumeIsComplete(name, helperImage))) return name;
      if (!existing)
        // Another controller may make it meanwhile: Docker answers that as made, Podman with an error, after which it is there.
        await this.docker.createVolume({ Name: name, Labels: { 'warren.runtime': runtime.hash } }).catch(async (e: unknown) => {
          const madeMeanwhile = await this.docker
            .getVolume(name)
            .inspect()
            .catch(() => undefined);
          if (!madeMeanwhile) rethrow(e, `create volume ${name}`);
        });
      const filler = await this.claimRuntimeFill(lock, name, helperImage, staleMs);
      if (filler) {
        try {
          // Another controller may have completed it between the look above and the claim.
          if (!(await holdsComplete(filler, name))) await filler.putArchive(await runtimeTar(runtime), { path: RUNTIME_DIR });
        } finally {
          await removeHelper(filler);
        }
        return name;
      }
      if (waited === 0) this.options.logger?.info({ volume: name }, 'runtime.fill-wait');
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }

  /**
   * Creates the runtime fill's helper container under its fixed name, or undefined when another
   * controller holds it. A holder older than `staleMs` is removed first, so a controller that died
   * mid-fill does not stop every later start.
   */
  private async claimRuntimeFill(lock: string, volume: string, helperImage: string, staleMs: number): Promise<Docker.Container | undefined> {
    const held = await this.docker
      .getContainer(lock)
      .inspect()
      .catch((err: unknown) => (noSuchContainer(err) ? undefined : rethrow(err, `inspect container ${lock}`)));
    if (held) {
      if (!(Date.now() - Date.parse(held.Created) > staleMs)) return undefined;
      this.options.logger?.warn({ container: lock, created: held.Created }, 'runtime.fill-stale');
      await removeHelper(this.docker.getContainer(lock));
    }
    return this.createHelper(volume, helperImage, lock).catch((err: unknown) => {
      if (nameInUse(err)) return undefined;
      return rethrow(err, `create the runtime fill's helper container from ${helperImage}`);
    });
  }

  /**
   * Removes the runtime volumes of earlier agent builds, once they are an hour old. The engine
   * refuses to remove a volume a container still mounts (a sandbox of an older controller that is
   * still running), so those stay until a later start finds them free; the hour spares a volume
   * another controller on this engine has just made and not yet mounted. Returns the names removed.
   */
  async removeOldRuntimeVolumes(current: string, minAgeMs = 3_600_000): Promise<string[]> {
    const { Volumes } = await this.docker.listVolumes({ filters: { label: ['warren.runtime'] } }).catch((e: unknown) => rethrow(e, 'list volumes'));
    const removed: string[] = [];
    for (const volume of Volumes ?? []) {
      const createdAt = Date.parse((volume as { CreatedAt?: string }).CreatedAt ?? '');
      if (volume.Name === current || !(Date.now() - createdAt >= minAgeMs)) continue;
      await this.docker
        .getVolume(volume.Name)
        .remove()
        .then(
          () => removed.push(volume.Name),
          () => undefined,
        );
    }
    return removed;
  }

  /** Whether the runtime volume holds `.complete`, looked at through a helper of its own. */
  private async volumeIsComplete(volume: string, helperImage: string): Promise<boolean> {
    return this.withHelper(volume, helperImage, (helper) => holdsComplete(helper, volume));
  }

  /** A created, never started container with the volume at {@link RUNTIME_DIR}; `name` when it must be unique. */
  private async createHelper(volume: string, image: string, name?: string): Promise<Docker.Container> {
    return this.docker.createContainer({
      ...(name === undefined ? {} : { name }),
      Image: image,
      Entrypoint: ['/bin/true'],
      Cmd: [],
      HostConfig: { Mounts: [{ Type: 'volume', Source: volume, Target: RUNTIME_DIR }], NetworkMode: 'none' },
    });
  }

  private async withHelper<T>(volume: string, image: string, use: (c: Docker.Container) => Promise<T>): Promise<T> {
    const helper = await this.createHelper(volume, image).catch((e: unknown) => rethrow(e, `create a helper container from ${image}`));
    try {
      return await use(helper);
    } finally {
      await removeHelper(helper);
    }
  }

  /**
   * Creates and starts a sandbox container; returns its id. The daemon's folder is made anew
   * first. (The daemon hands /workspace to the sandbox user when it starts, so images without
   * /workspace get a writable one too.) A failed start leaves nothing behind.
   */
  async create(spec: SandboxSpec): Promise<string> {
    if (this.runtimeVolume === undefined)
      throw new CodedError('INTERNAL', 'The Docker provider was asked to create a sandbox before prepare() filled the runtime volume.');
    const image = spec.restore?.image ?? spec.image;
    let container: Docker.Container | undefined;
    try {
      // The steps before the engine's create do not depend on each other: the daemon's folder, the
      // disk (mkfs and mount, the longest), one inspect of the image, the volumes. They run at once,
      // and all of them settle before any failure is handled, so the cleanup never races a step.
      const [socketDirOnHost, workspaceOnHost, imageConfig, volumes, cpuCgroupOnHost] = await settled([
        this.channel === 'socket' ? this.dirs.prepare(spec.agentId, spec.daemonSecret) : undefined,
        this.workspaceFor(spec),
        this.imageConfig(image, spec.restore !== undefined),
        this.volumeMounts(spec.settings),
        this.cpuCgroupFor(spec.agentId, spec.settings),
      ] as const);
      const channel: SandboxContainerSpec['channel'] =
        socketDirOnHost === undefined ? { kind: 'exec', daemonSecret: spec.daemonSecret } : { kind: 'socket', socketDirOnHost };
      const resolvConfOnHost = spec.nameserver === undefined ? undefined : await this.resolvConfFor(channel, spec.nameserver);
      const body = containerCreateBody({
        id: spec.agentId,
        image,
        env: spec.env,
        imageEnv: imageConfig.env,
        // Only Warren writes the labels Warren reads: none of the image's own under its prefix.
        labels: containerLabels(imageConfig.labels, spec.labels),
        settings: spec.settings,
        channel,
        runtimeVolume: this.runtimeVolume,
        workspaceOnHost,
        volumes,
        processLimit: this.processLimit,
        seccompProfile: this.seccompProfile,
        resolvConfOnHost,
        cpuCgroupOnHost,
      });
      container = await this.docker.createContainer(body).catch((e: unknown) => {
        throw workdirRefusal(e, spec.settings, spec.image) ?? engineError(e, `create a container from ${spec.image}`);
      });
      if (spec.restore) await this.restoreWorkspace(container, spec.settings, workspaceOnHost, spec.restore.workspaceDir);
      await container.start().catch((e: unknown) => {
        throw workdirRefusal(e, spec.settings, spec.image) ?? engineError(e, `start the container for sandbox ${spec.agentId}`);
      });
      return container.id;
    } catch (err) {
      await container?.remove({ force: true, v: true }).catch(() => undefined);
      await this.dirs.remove(spec.agentId);
      await this.workspaces?.remove(spec.agentId);
      await this.cpuCgroups?.remove(spec.agentId).catch(() => undefined);
      throw err;
    }
  }

  /**
   * The resolver file to bind over a sandbox's /etc/resolv.conf (read-only, the file only). With
   * the socket channel it sits in the daemon's own folder (root's, 0700 inside the sandbox); with
   * the exec channel, which has no host folder of the sandbox's own, it is the one the runtime
   * volume carries, read where the engine keeps that volume.
   */
  private async resolvConfFor(channel: SandboxContainerSpec['channel'], nameserver: string): Promise<string> {
    if (channel.kind === 'socket') return writeResolvConf(channel.socketDirOnHost, nameserver);
    if (nameserver !== EGRESS_TRANSPARENT_ADDRESS || this.runtimeVolumeMountpoint === undefined)
      throw new CodedError(
        'NOT_SUPPORTED',
        `This engine does not say where it keeps the runtime volume, so a sandbox with egress cannot get the relay's resolver with daemonChannel exec; use daemonChannel socket, or leave egress out.`,
      );
    return path.posix.join(this.runtimeVolumeMountpoint, RUNTIME_RESOLV_CONF);
  }

  /**
   * The host folder of a sandbox's CPU cgroups, made with their caps; undefined where this host
   * gives the daemon no share of its own, or the sandbox runs under another runtime than runc
   * (gVisor's processes are not the host's, so the daemon could not move them).
   */
  private async cpuCgroupFor(agentId: string, settings: SandboxSettings): Promise<string | undefined> {
    if (!this.cpuCgroups || settings.runtime !== 'runc') return undefined;
    return this.cpuCgroups.prepare(agentId, settings.cpus);
  }

  /**
   * The host folder of a sandbox's own disk (its quota), owned by the sandbox user as the host
   * sees it; undefined where this host gives no quota or a host mount replaces /workspace.
   */
  private async workspaceFor(spec: SandboxSpec): Promise<string | undefined> {
    if (!this.workspaces?.describe().quota || spec.settings.diskMb === undefined || spec.settings.mounts.some((m) => m.path === workspaceOf(spec.settings)))
      return undefined;
    const [uid = 1000, gid = uid] = spec.settings.user.split(':').map(Number);
    const shift = this.remap ?? { uid: 0, gid: 0 };
    return this.workspaces.create(spec.agentId, { uid: shift.uid + uid, gid: shift.gid + gid }, spec.settings.diskMb * 1024 * 1024);
  }

  /** Starts a stopped sandbox container again with a fresh daemon folder; a running one is left alone. */
  async start(handle: string, agentId: string, daemonSecret: string): Promise<void> {
    const info = await this.docker
      .getContainer(handle)
      .inspect()
      .catch(() => undefined);
    const bound = (target: string, source?: string) =>
      info?.HostConfig?.Mounts?.some((m) => m.Target === target && (source === undefined || m.Source === source)) ?? false;
    // With `exec` the secret stays in the container's environment (it is derived, so the same).
    if (this.channel === 'socket') {
      const folder = await this.dirs.prepare(agentId, daemonSecret);
      // The fresh folder lacks the egress resolver file the container binds over /etc/resolv.conf: write it again, or the start fails.
      if (bound('/etc/resolv.conf', path.join(folder, 'resolv.conf'))) await writeResolvConf(folder, EGRESS_TRANSPARENT_ADDRESS);
    }
    // After a host reboot the sandbox's disk is no longer mounted: mount it before the engine binds it.
    if (this.workspaces && (await this.workspaces.list()).includes(agentId)) await this.workspaces.attach(agentId);
    // So are the volumes it mounts, and its CPU cgroups are gone.
    const settings = settingsOf(info?.Config.Labels ?? {});
    await this.volumeMounts(settings ?? ({ volumes: [] } as unknown as SandboxSettings));
    if (this.cpuCgroups && settings && bound(CPU_CGROUP_IN_SANDBOX)) await this.cpuCgroups.prepare(agentId, settings.cpus);
    await this.docker
      .getContainer(handle)
      .start()
      .catch((err: { statusCode?: number }) => {
        if (err.statusCode !== 304) rethrow(err, `start container ${handle} again`);
      });
  }

  async stop(handle: string): Promise<void> {
    await this.docker
      .getContainer(handle)
      .stop({ t: 5 })
      .catch((err: { statusCode?: number }) => {
        if (err.statusCode !== 304) rethrow(err, `stop container ${handle}`);
      });
  }

  /** Freezes every process of a sandbox (cgroup freezer); its memory and files stay. */
  async pause(handle: string): Promise<void> {
    await this.docker
      .getContainer(handle)
      .pause()
      .catch((e: unknown) => rethrow(e, `pause container ${handle}`));
  }

  async resume(handle: string): Promise<void> {
    await this.docker
      .getContainer(handle)
      .unpause()
      .catch((e: unknown) => rethrow(e, `resume container ${handle}`));
  }

  /**
   * Follows the engine's container events for Warren sandboxes: `onEvent` gets each container's
   * id and action (`die`, `destroy`, ...); `onEnd` runs once when the stream ends, which is how an
   * engine that stops or restarts shows itself, however briefly it was gone.
   */
  async events(onEvent: (handle: string, action: string) => void, onEnd: () => void): Promise<() => void> {
    const stream = (await this.docker
      .getEvents({ filters: { type: ['container'], label: [LABELS.sandbox] } })
      .catch((e: unknown) => rethrow(e, 'follow the Docker engine events'))) as unknown as Readable;
    let buffered = '';
    stream.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      let newline: number;
      while ((newline = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        try {
          const event = JSON.parse(line) as { id?: string; Action?: string };
          if (event.id && event.Action) onEvent(event.id, event.Action);
        } catch {
          // Not an event line; the engine writes one JSON object per line.
        }
      }
    });
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      onEnd();
    };
    stream.once('end', end);
    stream.once('close', end);
    stream.once('error', end);
    return () => {
      ended = true;
      stream.destroy();
    };
  }

  /** Removes a sandbox's container, its anonymous volumes and its daemon folder; an absent one is not an error. */
  async remove(handle: string, agentId: string): Promise<void> {
    await this.docker
      .getContainer(handle)
      .remove({ force: true, v: true })
      .catch((err: { statusCode?: number }) => {
        if (err.statusCode !== 404) rethrow(err, `remove container ${handle}`);
      });
    // Once the container is gone nothing writes to either: its folder and its disk go at once.
    await settled([this.dirs.remove(agentId), this.workspaces?.remove(agentId), this.cpuCgroups?.remove(agentId)] as const);
  }

  /** Every Warren sandbox container, running or not. */
  async list(): Promise<ProvidedSandbox[]> {
    const containers = await this.docker
      .listContainers({ all: true, filters: { label: [LABELS.sandbox] } })
      .catch((e: unknown) => rethrow(e, 'list containers'));
    return containers.filter(isSandboxContainer).map((c) => ({ handle: c.Id, labels: withoutUnset(c.Labels), state: toProviderState(c.State) }));
  }

  /** The engine's view of every Warren container at once: id to state. */
  async states(): Promise<Map<string, ProviderState>> {
    const containers = await this.docker
      .listContainers({ all: true, filters: { label: [LABELS.sandbox] } })
      .catch((e: unknown) => rethrow(e, 'list containers'));
    return new Map(containers.filter(isSandboxContainer).map((c) => [c.Id, toProviderState(c.State)]));
  }

  /** The container's state, or undefined when it is gone. */
  async inspect(handle: string): Promise<ProviderState | undefined> {
    try {
      const info = await this.docker.getContainer(handle).inspect();
      return toProviderState(info.State.Status);
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return undefined;
      return rethrow(err, `inspect container ${handle}`);
    }
  }

  /**
   * A snapshot, consistent and only briefly frozen: the workspace of a running sandbox is copied
   * first while it runs ({@link preCopyTree}: `cp` confined to a private mount namespace, so a
   * folder swapped for a link cannot lead it to the host's files); then the container is frozen
   * (cgroup freezer, as `pause`; its processes keep running afterwards), its changes committed to
   * `warren-snapshot/<id>:latest` (labelled with the id; the daemon's secret variable blanked), the
   * copy brought to the state at the freeze ({@link syncTree}: only what changed is copied again),
   * then thawed; `pausedMs` says how long it was frozen. A sandbox already paused or stopped, or a
   * host where the namespace cannot be made, is copied whole with {@link copyTree} (sparse-aware,
   * reflinks where the file system has them) under the freeze. The workspace is read
   * on this host (the volume's or disk's folder), so the controller must run beside the engine; a
   * workspace replaced by a host mount is not copied (it is the host's, not the sandbox's).
   */
  async snapshot(handle: string, _agentId: string, snapshotId: string, workspaceDir: string): Promise<ProvidedSnapshot> {
    const container = this.docker.getContainer(handle);
    const info = await container.inspect().catch((e: unknown) => rethrow(e, `inspect container ${handle}`));
    const settings = settingsOf(info.Config.Labels ?? {});
    const inside = settings?.workspace ?? WORKSPACE;
    const hostMounted = settings?.mounts.some((m) => m.path === inside) ?? false;
    const source = hostMounted ? undefined : info.Mounts.find((m) => m.Destination === inside)?.Source;
    if (source !== undefined)
      await access(source).catch(() => {
        throw new CodedError(
          'NOT_SUPPORTED',
          `Cannot snapshot sandbox ${handle}: its workspace lies at ${source} on the engine's host, which this controller does not see. Snapshots need the controller on the engine's own host (scripts/start, the systemd unit).`,
        );
      });
    const processes = await this.checkpointSupport();
    const freeze = info.State.Running && !info.State.Paused;
    const image = snapshotImage(snapshotId);
    const what = `copy the workspace of sandbox ${handle}`;
    // A first copy while the sandbox runs, so that the freeze only covers what changed since.
    const firstPassAt = Date.now();
    let preCopied = false;
    if (source !== undefined && freeze) {
      const scratch = await mkdtemp(path.join(tmpdir(), 'warren-precopy-'));
      try {
        preCopied = await preCopyTree(source, workspaceDir, scratch, what);
      } finally {
        await rm(scratch, { recursive: true, force: true }).catch(() => undefined);
      }
      if (!preCopied) await emptyTree(workspaceDir);
    }
    const pausedAt = performance.now();
    if (freeze) await this.pause(handle);
    let pausedMs = 0;
    try {
      await new Promise<void>((resolve, reject) =>
        this.docker.modem.dial(
          {
            path: '/commit?',
            method: 'POST',
            options: {
              _query: {
                container: handle,
                repo: `${SNAPSHOT_REPOSITORY}/${snapshotId}`,
                tag: 'latest',
                pause: false,
                comment: `Warren snapshot ${snapshotId}`,
              },
              _body: { Labels: { [SNAPSHOT_LABEL]: snapshotId }, Env: [`${SECRET_VARIABLE}=`] },
            },
            statusCodes: { 200: true, 201: true, 404: 'no such container', 500: 'server error' },
          },
          (err: unknown) => (err ? reject(err instanceof Error ? err : new Error('the engine refused the commit')) : resolve()),
        ),
      ).catch((e: unknown) => rethrow(e, `commit container ${handle}`));
      if (source !== undefined) {
        if (preCopied) await syncTree(source, workspaceDir, firstPassAt, what);
        else await copyTree(source, workspaceDir, what);
      }
    } catch (err) {
      await this.removeSnapshot(snapshotId).catch(() => undefined);
      throw err;
    } finally {
      if (freeze) {
        await this.resume(handle).catch(() => undefined);
        pausedMs = Math.round(performance.now() - pausedAt);
      }
    }
    const [own, base] = await Promise.all([
      this.docker.getImage(image).inspect(),
      this.docker
        .getImage(info.Image)
        .inspect()
        .catch(() => undefined),
    ]);
    return {
      image,
      imageBytes: Math.max(0, own.Size - (base?.Size ?? 0)),
      workspaceBytes: source === undefined ? 0 : await diskBytes(workspaceDir),
      processes: false,
      pausedMs,
      processesReason: processes.supported
        ? 'this Warren version does not checkpoint processes yet: a sandbox made from the snapshot starts with fresh processes'
        : `${processes.reason}: a sandbox made from the snapshot starts with fresh processes`,
    };
  }

  /**
   * Removes a snapshot's tag. A sandbox made from it keeps using the image's layers; the untagged
   * image is collected when none does ({@link DockerProvider.snapshotIds} lists it until then).
   */
  async removeSnapshot(snapshotId: string): Promise<void> {
    const images = await this.docker
      .listImages({ all: true, filters: { label: [`${SNAPSHOT_LABEL}=${snapshotId}`] } })
      .catch((e: unknown) => rethrow(e, 'list snapshot images'));
    for (const image of images)
      await this.docker
        .getImage(image.Id)
        .remove({ force: false, noprune: false })
        .catch(async (err: { statusCode?: number; message?: string }) => {
          // Gone already: the engine answers 404, or 500 "unrecognized image ID" when the image went
          // between the listing and the remove (the last sandbox made from it was just collected).
          if (err.statusCode === 404 || /unrecognized image ID|no such image/i.test(String(err.message))) return;
          // In use by a sandbox made from it: drop the name only, the layers go with the last such sandbox.
          if (err.statusCode === 409)
            await this.docker
              .getImage(snapshotImage(snapshotId))
              .remove({ force: true, noprune: false })
              .catch(() => undefined);
          else rethrow(err, `remove the image of snapshot ${snapshotId}`);
        });
  }

  /** The image carries its sandbox's labels, the owner's instance id among them (a commit keeps the container's labels). */
  async snapshotIds(owner: string): Promise<string[]> {
    const images = await this.docker
      .listImages({ all: true, filters: { label: [SNAPSHOT_LABEL, `${LABELS.owner}=${owner}`] } })
      .catch((e: unknown) => rethrow(e, 'list snapshot images'));
    return [...new Set(images.map((i) => i.Labels?.[SNAPSHOT_LABEL]).filter((id): id is string => typeof id === 'string'))];
  }

  /**
   * Whether this engine could checkpoint processes (`docker checkpoint`: an engine with experimental
   * features and CRIU on its host). Asked once.
   */
  async checkpointSupport(): Promise<{ supported: boolean; reason?: string }> {
    this.checkpoint ??= (async () => {
      const info = (await this.docker.info().catch(() => ({}))) as { ExperimentalBuild?: boolean };
      if (this.engine?.name === 'podman') return { supported: false, reason: 'the engine is Podman, whose checkpoint API Warren does not use' };
      if (info.ExperimentalBuild !== true)
        return { supported: false, reason: "the Docker engine runs without experimental features, which 'docker checkpoint' needs" };
      const criu = await new Promise<boolean>((resolve) => execFile('criu', ['--version'], (err) => resolve(err === null)));
      return criu ? { supported: true } : { supported: false, reason: 'CRIU is not installed on the engine host (Debian: apt install criu)' };
    })();
    return this.checkpoint;
  }
  private checkpoint: Promise<{ supported: boolean; reason?: string }> | undefined;

  /** Fills a created, not yet started, sandbox's workspace with a snapshot's copy (whatever the image put there is removed first). */
  private async restoreWorkspace(container: Docker.Container, settings: SandboxSettings, onHost: string | undefined, from: string): Promise<void> {
    const inside = workspaceOf(settings);
    if (settings.mounts.some((m) => m.path === inside)) return;
    const target = onHost ?? (await container.inspect()).Mounts.find((m) => m.Destination === inside)?.Source;
    if (target === undefined) throw new CodedError('INTERNAL', `The new sandbox has no workspace volume at ${inside} to restore the snapshot into.`);
    await emptyTree(target);
    await copyTree(from, target, 'restore the snapshot into the new workspace');
  }

  /** The named volumes of a sandbox's settings as mounts (each volume with a quota mounted on the host first). */
  private async volumeMounts(settings: SandboxSettings): Promise<SandboxContainerSpec['volumes']> {
    const out: NonNullable<SandboxContainerSpec['volumes']> = [];
    const onHost = new Set((await this.volumeStore?.list()) ?? []);
    for (const v of settings.volumes ?? []) {
      const folder = onHost.has(v.id) ? await this.volumeStore?.attach(v.id) : undefined;
      out.push(
        folder !== undefined
          ? { type: 'bind', source: folder, target: v.path, readOnly: v.readOnly }
          : { type: 'volume', source: volumeName(v.id), target: v.path, readOnly: v.readOnly },
      );
    }
    return out;
  }

  /**
   * A named volume: an ext4 image of exactly `sizeBytes` where this host gives workspaces a quota
   * (the same store as theirs), otherwise an engine volume without a limit. Its root belongs to
   * the default sandbox user (1000:1000, as the host sees it under remap).
   */
  async createVolume(id: string, sizeBytes: number): Promise<{ quota: boolean }> {
    const shift = this.remap ?? { uid: 0, gid: 0 };
    const owner = { uid: shift.uid + 1000, gid: shift.gid + 1000 };
    if (this.volumeStore?.describe().quota) {
      await this.volumeStore.create(id, owner, sizeBytes);
      return { quota: true };
    }
    const volume = await this.docker
      .createVolume({ Name: volumeName(id), Labels: { [VOLUME_LABEL]: id } })
      .catch((e: unknown) => rethrow(e, `create volume ${id}`));
    const mountpoint = (volume as unknown as { Mountpoint?: string }).Mountpoint;
    // The engine makes its root root's; hand it to the sandbox user where this host sees it.
    if (mountpoint) await chown(mountpoint, owner.uid, owner.gid).catch(() => undefined);
    return { quota: false };
  }

  async removeVolume(id: string): Promise<void> {
    if ((await this.volumeStore?.list())?.includes(id)) await this.volumeStore?.remove(id);
    await this.docker
      .getVolume(volumeName(id))
      .remove()
      .catch((err: { statusCode?: number }) => {
        if (err.statusCode === 404) return;
        if (err.statusCode === 409) throw new CodedError('CONFLICT', `Volume ${id} is still mounted by a container; kill the sandboxes that mount it first.`);
        rethrow(err, `remove volume ${id}`);
      });
  }

  async volumeUsage(id: string): Promise<number | undefined> {
    return (await this.volumeStore?.usage(id).catch(() => undefined))?.usedBytes;
  }

  daemon(agentId: string): DaemonEndpoint {
    if (this.channel === 'socket') return { socketPath: this.dirs.socketPath(agentId) };
    return { openStream: () => this.openExecStream(agentId) };
  }

  /**
   * Whether the engine's containers see the controller's folders: a file with a random name and
   * content is written under the state folder, bound into a helper container, and read back
   * through the engine. Any failure means no.
   */
  private async engineSeesFolder(stateDir: string, helperImage: string): Promise<boolean> {
    const name = `channel-probe-${randomBytes(8).toString('hex')}`;
    const marker = randomBytes(16).toString('hex');
    const folder = path.join(stateDir, name);
    try {
      await mkdir(folder, { recursive: true, mode: 0o755 });
      await writeFile(path.join(folder, 'marker'), marker);
      const helper = await this.docker.createContainer({
        Image: helperImage,
        Entrypoint: ['/bin/true'],
        Cmd: [],
        HostConfig: { Binds: [`${folder}:/probe:ro`], NetworkMode: 'none' },
      });
      try {
        const archive = await helper.getArchive({ path: '/probe/marker' });
        const chunks: Buffer[] = [];
        for await (const chunk of archive) chunks.push(chunk as Buffer);
        return Buffer.concat(chunks).includes(marker);
      } finally {
        await removeHelper(helper);
      }
    } catch {
      return false;
    } finally {
      await rm(folder, { recursive: true, force: true }).catch(() => undefined);
    }
  }

  /**
   * A byte stream to the daemon's socket through the engine's API: `docker exec` (as the
   * container's root, which alone may enter the daemon's folder) of a bridge that copies stdin to
   * the socket and the socket to stdout. The engine frames stdout and stderr on one connection;
   * they are taken apart here, and the bridge's stderr (its errors) is dropped.
   */
  private async openExecStream(agentId: string): Promise<Duplex> {
    const container = this.docker.getContainer(`warren-${agentId}`);
    const exec = await container
      .exec({ Cmd: bridgeCommand(`${SOCKET_DIR_IN_SANDBOX}/agent.sock`), AttachStdin: true, AttachStdout: true, AttachStderr: true, Tty: false, User: '0:0' })
      .catch((e: unknown) => rethrow(e, `reach the daemon of sandbox ${agentId} through the engine`));
    const raw = await exec.start({ hijack: true, stdin: true }).catch((e: unknown): never => rethrow(e, `reach the daemon of sandbox ${agentId}`));
    return new ExecStream(raw);
  }

  async copyIn(handle: string, tar: Buffer, path: string): Promise<void> {
    await this.docker
      .getContainer(handle)
      .putArchive(tar, { path })
      .catch((e: unknown) => rethrow(e, `copy files into container ${handle}`));
  }

  async stats(handle: string, agentId: string): Promise<SandboxStats | undefined> {
    let raw: DockerStats;
    try {
      // one-shot: the engine answers at once instead of waiting a second for a second sample.
      raw = await this.docker.getContainer(handle).stats({ stream: false, 'one-shot': true } as { stream: false });
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return undefined;
      return rethrow(err, `read the stats of container ${handle}`);
    }
    const engineStats = statsFromEngine(raw);
    // Where cpuacct shares the cpu hierarchy, what ran in the sandbox's own cgroups is not in the container's.
    const stats =
      engineStats && this.cpuCgroups?.accountsCpu
        ? { ...engineStats, cpuSeconds: engineStats.cpuSeconds + (await this.cpuCgroups.cpuSeconds(agentId)) }
        : engineStats;
    // statfs of the workspace's mount point on the host: the kernel's count, nothing read from inside.
    const disk = stats && (await this.workspaces?.usage(agentId).catch(() => undefined));
    return stats && disk ? { ...stats, disk } : stats;
  }

  /** The last lines the container wrote, for error messages when its daemon does not come up. */
  async logsTail(handle: string, lines = 20): Promise<string> {
    try {
      const raw = await this.docker.getContainer(handle).logs({ stdout: true, stderr: true, tail: lines });
      return demuxToText(raw);
    } catch {
      return '';
    }
  }
}

/** The part of the engine's container stats Warren reads (cgroup v1 and v2 shapes). */
interface DockerStats {
  read?: string;
  cpu_stats?: { cpu_usage?: { total_usage?: number }; throttling_data?: { throttled_periods?: number } };
  memory_stats?: { usage?: number; max_usage?: number; limit?: number; stats?: Record<string, number> };
  pids_stats?: { current?: number; limit?: number };
  networks?: Record<string, { rx_bytes?: number; tx_bytes?: number }>;
}

/**
 * The engine's stats as Warren's sample: memory without the page cache the kernel can drop
 * (`inactive_file` on cgroup v2, `total_inactive_file` on v1), as `docker stats` shows it; the
 * limit only when one is set (the engine reports the host's memory otherwise).
 *
 * @example
 * statsFromEngine({ cpu_stats: { cpu_usage: { total_usage: 2e9 } }, memory_stats: { usage: 10 }, pids_stats: { current: 3 } }); // cpuSeconds 2
 */
export function statsFromEngine(raw: DockerStats): SandboxStats | undefined {
  if (!raw.cpu_stats?.cpu_usage || raw.pids_stats?.current === undefined) return undefined; // a stopped container reports zeros without these
  const memory = raw.memory_stats ?? {};
  const cache = memory.stats?.inactive_file ?? memory.stats?.total_inactive_file ?? 0;
  const usage = Math.max(0, (memory.usage ?? 0) - cache);
  const networks = Object.values(raw.networks ?? {});
  return {
    cpuSeconds: (raw.cpu_stats.cpu_usage.total_usage ?? 0) / 1e9,
    ...(raw.cpu_stats.throttling_data?.throttled_periods !== undefined ? { cpuThrottledPeriods: raw.cpu_stats.throttling_data.throttled_periods } : {}),
    memoryBytes: usage,
    ...(memory.limit !== undefined && memory.limit > 0 && memory.limit < 2 ** 62 ? { memoryLimitBytes: memory.limit } : {}),
    ...(memory.max_usage !== undefined ? { memoryPeakBytes: memory.max_usage } : {}),
    pids: raw.pids_stats.current,
    ...(raw.pids_stats.limit !== undefined && raw.pids_stats.limit > 0 && raw.pids_stats.limit < 2 ** 62 ? { pidsLimit: raw.pids_stats.limit } : {}),
    ...(networks.length > 0
      ? { network: { rxBytes: networks.reduce((n, i) => n + (i.rx_bytes ?? 0), 0), txBytes: networks.reduce((n, i) => n + (i.tx_bytes ?? 0), 0) } }
      : {}),
  };
}

/**
 * The engine's attach stream of an exec as a plain byte stream: stdout's frames (the engine
 * multiplexes stdout and stderr with 8-byte headers) are unwrapped with backpressure, so a slow
 * reader pauses the engine's connection instead of piling bytes up here; stderr (the bridge's
 * errors) is dropped; writes go to the exec's stdin. Closing ends stdin first: the engine passes
 * the EOF to the bridge, which ends its socket, so the daemon learns the connection is gone (the
 * engine may keep an exec running after its attach connection is dropped).
 */
class ExecStream extends Duplex {
  private pending: Buffer = Buffer.alloc(0);

  constructor(private readonly raw: Duplex) {
    super({ allowHalfOpen: false });
    raw.on('data', (chunk: Buffer) => this.unwrap(chunk));
    raw.once('end', () => this.push(null));
    raw.once('close', () => this.push(null));
    raw.on('error', (err) => this.destroy(err));
  }

  private unwrap(chunk: Buffer): void {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    let wantsMore = true;
    while (this.pending.length >= 8) {
      const size = this.pending.readUInt32BE(4);
      if (this.pending.length < 8 + size) break;
      const stream = this.pending[0];
      const payload = this.pending.subarray(8, 8 + size);
      this.pending = this.pending.subarray(8 + size);
      if (stream === 1 && !this.push(payload)) wantsMore = false;
    }
    if (!wantsMore) this.raw.pause();
  }

  override _read(): void {
    this.raw.resume();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (error?: Error | null) => void): void {
    this.raw.write(chunk, done);
  }

  override _final(done: (error?: Error | null) => void): void {
    this.raw.end();
    done();
  }

  override _destroy(error: Error | null, done: (error?: Error | null) => void): void {
    this.raw.end();
    const timer = setTimeout(() => this.raw.destroy(), 2_000).unref();
    this.raw.once('close', () => clearTimeout(timer));
    done(error);
  }

  // What http and ws ask of a socket; a stream through the engine has no such knobs.
  setTimeout(): this {
    return this;
  }
  setNoDelay(): this {
    return this;
  }
  setKeepAlive(): this {
    return this;
  }
}

/** What a {@link DockerProvider} is told at construction; everything has a default. */
export interface DockerProviderOptions {
  /** The engine; by default the one {@link resolveEngine} finds (DOCKER_HOST, the Docker context, the local socket). */
  docker?: Docker | undefined;
  /** The controller's state folder: the daemons' folders and the workspace disks live there. */
  stateDir?: string | undefined;
  /** Per-sandbox disk quota on /workspace: `auto` (default), `required` or `off`. */
  workspaceQuota?: 'auto' | 'required' | 'off' | undefined;
  /** Free space (MiB) workspace disks always leave on the host. */
  workspaceReserveMb?: number | undefined;
  /** How daemons are reached: `auto` (default) picks with {@link chooseChannel}. */
  daemonChannel?: 'auto' | DaemonChannel | undefined;
  /** Where operator-facing details go; nothing is logged without one. */
  logger?: Logger | undefined;
  /** RLIMIT_NPROC for sandboxes on engines that need one said (Podman); by default the largest the engine accepts. */
  processLimit?: number | undefined;
}

/**
 * Who the daemon's host folder belongs to: the container's root as the engine maps it. A
 * controller that is not root cannot hand it over, so the folder stays its own (and the daemon
 * reaches it with DAC_OVERRIDE).
 */
function daemonOwner(remap: { uid: number; gid: number } | null): HostIdentity | undefined {
  if (process.getuid?.() !== 0) return undefined;
  return remap ?? { uid: 0, gid: 0 };
}

/**
 * The daemon channel for `auto`: `socket` only where the engine certainly shares this process's
 * folders (a local unix socket, not an engine in a VM such as Docker Desktop, which passes no
 * unix sockets through its file sharing, and a folder of the controller's that a container of
 * the engine's was seen to read: a controller in a container with the engine's socket fails
 * that); `exec` everywhere else.
 *
 * @example
 * chooseChannel('auto', { localEngine: true, engineInVm: true, sharesFolders: true }); // 'exec'
 */
export function chooseChannel(wanted: 'auto' | DaemonChannel, where: { localEngine: boolean; engineInVm: boolean; sharesFolders: boolean }): DaemonChannel {
  if (wanted !== 'auto') return wanted;
  return where.localEngine && !where.engineInVm && where.sharesFolders ? 'socket' : 'exec';
}

/**
 * True when dockerode talks to the engine over a local unix socket (so host folders are shared);
 * docker-modem keeps the default socket as a function that finds it.
 */
function isLocalEngine(docker: Docker): boolean {
  const socketPath = (docker.modem as { socketPath?: unknown }).socketPath;
  return typeof socketPath === 'string' || typeof socketPath === 'function';
}

/** Whether an engine error has Docker's status, or is Podman's (4.3) 500 with words that mean the same. */
function engineAnswered(err: unknown, status: number, podmanWords: RegExp): boolean {
  const e = err as { statusCode?: number; json?: { message?: string }; message?: string };
  return e.statusCode === status || (e.statusCode === 500 && podmanWords.test(e.json?.message ?? e.message ?? ''));
}

/** Whether the runtime volume mounted in `helper` holds `.complete`; an engine failure is thrown, not taken as "no". */
async function holdsComplete(helper: Docker.Container, volume: string): Promise<boolean> {
  const archive = await helper
    .getArchive({ path: `${RUNTIME_DIR}/.complete` })
    .catch((err: { statusCode?: number }) => (err.statusCode === 404 ? undefined : rethrow(err, `read ${RUNTIME_DIR}/.complete of volume ${volume}`)));
  archive?.resume();
  return archive !== undefined;
}

/** The engine has no such container (Podman says so with a 500 for one it is removing). */
const noSuchContainer = (err: unknown): boolean => engineAnswered(err, 404, /no such container|does not exist/i);

/** A create refused because the container name is taken. */
const nameInUse = (err: unknown): boolean => engineAnswered(err, 409, /already in use/i);

/** Removes a helper container, once more after a moment if the engine was still busy with it (Podman, just after its exit). */
async function removeHelper(helper: Docker.Container): Promise<void> {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      await helper.remove({ force: true });
      return;
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

/** Docker's container states as a provider's: created, restarting and dead containers do not run. */
function toProviderState(state: string): ProviderState {
  return state === 'running' || state === 'paused' ? state : 'exited';
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

/** One line of the engine's pull progress. */
interface PullEvent {
  status?: string;
  id?: string;
  progressDetail?: { current?: number; total?: number };
  error?: string;
  errorDetail?: { message?: string };
}

/** One line of the engine's build output. */
interface BuildEvent {
  stream?: string;
  aux?: { ID?: string };
  error?: string;
  errorDetail?: { message?: string };
}

function mib(bytes: number): string {
  return (bytes / 1024 / 1024).toFixed(bytes < 1024 * 1024 ? 2 : 0);
}

/** A failed pull as Warren's error: a full disk is `IMAGE_TOO_LARGE`, an engine that is away `UPSTREAM_UNAVAILABLE`, the rest `IMAGE_PULL_FAILED`. */
function pullFailure(image: string, err: unknown): CodedError {
  if (err instanceof CodedError) return err;
  const e = err as { statusCode?: number; json?: { message?: string }; reason?: string; code?: string; message?: string } | string | undefined;
  const detail = typeof e === 'string' ? e : (e?.json?.message ?? e?.message ?? e?.reason ?? String(err));
  if (typeof e === 'object' && (e.code === 'ECONNREFUSED' || e.code === 'ENOENT' || e.code === 'EACCES')) return engineError(err, `pull ${image}`);
  if (/no space left on device/i.test(detail))
    return new CodedError('IMAGE_TOO_LARGE', `The image ${image} does not fit on the engine's disk (${detail}); nothing of it was kept.`, { image });
  return new CodedError('IMAGE_PULL_FAILED', `Could not pull ${image}: ${detail}.`, { image });
}

/**
 * A dockerode failure as the Warren error {@link DockerProvider} throws for it, for callers that
 * report rather than throw.
 *
 * @example
 * engineError({ statusCode: 404, json: Buffer.from('Not Found\n') }, 'update container x').code; // 'NOT_SUPPORTED'
 */
export function engineError(err: unknown, doing: string): CodedError {
  try {
    rethrow(err, doing);
  } catch (coded) {
    return coded as CodedError;
  }
}

/** The engine's own words for a dockerode failure. */
function engineDetail(err: unknown): string {
  const e = err as { json?: { message?: string } | Buffer | string; reason?: string; message?: string };
  return (typeof e.json === 'object' && !Buffer.isBuffer(e.json) ? e.json?.message : undefined) ?? e.reason ?? e.message ?? String(err);
}

/**
 * The engine's refusal of a working folder it cannot make or enter in the image (a file on its
 * path, or a link of the image's that leads out of the container, which runc refuses), as
 * INVALID_PARAMS naming the field; undefined for any other failure. The engine's words are left
 * out: they name folders of the engine's host.
 */
function workdirRefusal(err: unknown, settings: SandboxSettings, image: string): CodedError | undefined {
  const detail = engineDetail(err);
  const { workdir } = settings;
  const about =
    detail.includes(`mkdir ${workdir}: `) ||
    detail.includes(`${workdir}: not a directory`) ||
    detail.includes(`${workdir} is not a directory`) ||
    /chdir to cwd|possible container breakout/i.test(detail);
  if (!about) return undefined;
  const field = workdir === workspaceOf(settings) ? 'workspace' : 'workdir';
  return new CodedError(
    'INVALID_PARAMS',
    `The working folder '${workdir}' cannot be made or entered in image ${image}: a file, or a link that leaves the container, lies on its path. Give ${field} a folder the image has room for (such as /workspace or /home/user), or leave it out.`,
    { field, path: workdir },
  );
}

/** Maps a dockerode failure to a Warren error that says what to do. */
function rethrow(err: unknown, doing: string): never {
  const e = err as { statusCode?: number; json?: { message?: string } | Buffer | string; reason?: string; code?: string; message?: string };
  const detail = engineDetail(err);
  if (e.code === 'ECONNREFUSED' || e.code === 'ENOENT' || e.code === 'EACCES') {
    throw new CodedError(
      'UPSTREAM_UNAVAILABLE',
      `Could not ${doing}: the Docker engine is not reachable (${e.code}). Start Docker (scripts/start does) or set DOCKER_HOST.`,
    );
  }
  if (/error setting rlimit/i.test(detail)) {
    throw new CodedError(
      'INVALID_PARAMS',
      `Could not ${doing}: the engine may not set a resource limit this high (${detail}). Lower limits.openFiles (or engine.processLimit) to at most the engine's hard limits (ulimit -Hn, ulimit -Hu of the engine's service).`,
    );
  }
  if (e.statusCode === 404 && /image/i.test(detail)) {
    throw new CodedError('NOT_FOUND', `Could not ${doing}: ${detail}. Build Warren's images with scripts/build-images, or docker pull the image.`);
  }
  // An engine without the endpoint (Podman 4.3 has no `container update`) answers a bare 404 body, not a container's.
  const body = Buffer.isBuffer(e.json) || typeof e.json === 'string' ? String(e.json) : e.json?.message;
  if (e.statusCode === 404 && /^\s*(404 )?(page )?not found\s*$/i.test(body ?? ''))
    throw new CodedError(
      'NOT_SUPPORTED',
      `Could not ${doing}: this engine has no API for it (it answered '404 ${(body ?? '').trim()}'; Podman 4.3 lacks some of Docker's).`,
    );
  if (e.statusCode === 404) throw new CodedError('SANDBOX_NOT_FOUND', `Could not ${doing}: ${detail}`);
  // Docker answers 409 to a pause of a paused container; Podman answers 500 'container state improper'.
  if ((e.statusCode === 409 || e.statusCode === 500) && /is not paused|is already paused|is paused|container state improper/i.test(detail))
    throw new CodedError('CONFLICT', `Could not ${doing}: ${detail}. Check the sandbox's state with GET /v1/sandboxes/<id>.`);
  if (e.statusCode === 409) throw new CodedError('CONFLICT', `Could not ${doing}: ${detail}`);
  throw new CodedError('UPSTREAM_UNAVAILABLE', `Could not ${doing}: ${detail}`);
}

/** Writes `resolv.conf` naming only `nameserver` into a folder of the controller's; returns its path. */
async function writeResolvConf(folder: string, nameserver: string): Promise<string> {
  const file = path.join(folder, 'resolv.conf');
  const handle = await open(file, fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW, 0o644);
  try {
    await handle.writeFile(resolvConfText(nameserver));
    await handle.chmod(0o644);
  } finally {
    await handle.close();
  }
  return file;
}

/** A sandbox's settings from its labels, or undefined when they do not parse. */
function settingsOf(labels: Record<string, string>): SandboxSettings | undefined {
  try {
    const parsed = SandboxSettingsSchema.safeParse(JSON.parse(labels[LABELS.settings] ?? 'null'));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether a listed container is a sandbox Warren made: named `warren-<id>` after its sandbox label.
 * Any other container can carry the label (a build's step container does, after a `LABEL
 * warren.sandbox=...` line), and is not one.
 */
function isSandboxContainer(container: { Names?: string[]; Labels?: Record<string, string> }): boolean {
  const id = container.Labels?.[LABELS.sandbox];
  return id !== undefined && (container.Names ?? []).some((name) => name.replace(/^\//, '') === `warren-${id}`);
}

/**
 * Awaits every step, then throws the first failure: unlike `Promise.all`, no step is still
 * running when the caller cleans up after a failed one.
 */
async function settled<T extends readonly unknown[]>(steps: T): Promise<{ -readonly [K in keyof T]: Awaited<T[K]> }> {
  const results = await Promise.allSettled(steps);
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
  return results.map((r) => (r as PromiseFulfilledResult<unknown>).value) as { -readonly [K in keyof T]: Awaited<T[K]> };
}
