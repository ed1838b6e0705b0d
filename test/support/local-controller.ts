import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { CodedError } from '@warren/protocol';
import { startAgentServer, type AgentServer } from '@warren/agent';
import {
  Credentials,
  startController,
  type ControllerConfig,
  type ImageCapability,
  type MetricsCapability,
  type ProvidedSandbox,
  type ProviderIsolation,
  type ProviderState,
  type SandboxProvider,
  type SandboxSpec,
  type SuspendCapability,
  type Logger,
  silentLogger,
} from '@warren/controller';

/** One sandbox of the {@link LocalProvider}: a real daemon in this process. */
interface LocalSandbox {
  agentId: string;
  labels: Record<string, string>;
  state: ProviderState;
  server: AgentServer;
  /** The secret its daemon checks, to start it again. */
  secret: string;
}

/**
 * A {@link SandboxProvider} whose sandboxes are real daemons in this process, rooted in one
 * temporary folder (integration tier: the controller's REST routes, its relay and per-frame
 * checks, and the daemon, over real sockets, without Docker). No isolation: create sandboxes with
 * `policy: { root: local.root }`, since a daemon outside a container sees the host's paths.
 */
class LocalProvider implements SandboxProvider {
  readonly name = 'local';
  private readonly sandboxes = new Map<string, LocalSandbox>();

  constructor(
    readonly dir: string,
    readonly root: string,
  ) {}

  async ping(): Promise<void> {}
  async isolation(): Promise<ProviderIsolation> {
    return {
      usernsRemap: null,
      rootless: false,
      cgroupVersion: '2',
      cgroupDriver: 'none',
      limitsEnforced: false,
      seccomp: false,
      apparmor: false,
      selinux: false,
      gvisor: false,
      runtimes: ['runc'],
      storageDriver: 'none',
      diskQuota: { quota: false, kind: 'none', reason: 'a local test provider' },
    };
  }
  async runtimes(): Promise<{ name: string; args: string[] }[]> {
    return [{ name: 'runc', args: [] }];
  }
  async prepare(): Promise<{ oldRuntimesRemoved: number }> {
    return { oldRuntimesRemoved: 0 };
  }

  async create(spec: SandboxSpec): Promise<string> {
    const server = await this.startDaemon(spec.agentId, spec.daemonSecret);
    this.sandboxes.set(spec.agentId, { agentId: spec.agentId, labels: spec.labels, state: 'running', server, secret: spec.daemonSecret });
    return spec.agentId;
  }

  /** Stops every daemon and starts it again on its socket: all a daemon kept in memory (its audit ring) is gone. */
  async restartDaemons(): Promise<void> {
    for (const sandbox of this.sandboxes.values()) {
      await sandbox.server.close();
      sandbox.server = await this.startDaemon(sandbox.agentId, sandbox.secret);
    }
  }

  private startDaemon(agentId: string, secret: string): Promise<AgentServer> {
    return startAgentServer({ socketPath: this.daemon(agentId).socketPath, secret, policy: { root: this.root, readOnly: false }, home: this.root });
  }
  async remove(handle: string): Promise<void> {
    await this.sandboxes.get(handle)?.server.close();
    this.sandboxes.delete(handle);
  }
  async inspect(handle: string): Promise<ProviderState | undefined> {
    return this.sandboxes.get(handle)?.state;
  }
  async states(): Promise<Map<string, ProviderState>> {
    return new Map([...this.sandboxes.values()].map((s) => [s.agentId, s.state]));
  }
  async list(): Promise<ProvidedSandbox[]> {
    return [...this.sandboxes.values()].map((s) => ({ handle: s.agentId, labels: s.labels, state: s.state }));
  }
  async events(): Promise<() => void> {
    return () => undefined;
  }
  daemon(agentId: string): { socketPath: string } {
    return { socketPath: path.join(this.dir, `${agentId.slice(0, 16)}.sock`) };
  }
  /** Pause and stop only mark the sandbox: its daemon shares this process. */
  readonly suspend: SuspendCapability = {
    start: async () => undefined,
    stop: async (handle) => void (this.require(handle).state = 'exited'),
    pause: async (handle) => void (this.require(handle).state = 'paused'),
    resume: async (handle) => void (this.require(handle).state = 'running'),
  };
  readonly metrics: MetricsCapability = {
    /** The daemons share this process: its own counters stand in for a cgroup's. */
    stats: async (handle) => {
      if (this.sandboxes.get(handle)?.state !== 'running') return undefined;
      const cpu = process.cpuUsage();
      return { cpuSeconds: (cpu.user + cpu.system) / 1e6, memoryBytes: process.memoryUsage.rss(), pids: 1 };
    },
    logsTail: async () => '',
  };
  /**
   * Every image is "there" (the daemons run on the host), so nothing is ever pulled; a build fails
   * once it has started, as a failed step would (the integration tier's case of an error after
   * the answer began).
   */
  readonly images: ImageCapability = {
    has: async () => true,
    pull: async () => undefined,
    build: () =>
      Promise.reject(new CodedError('INVALID_PARAMS', 'The local test provider runs daemons on the host and builds no images; build against a Docker engine.')),
    list: async () => [],
    inspect: async () => undefined,
    remove: async () => undefined,
  };
  /** No snapshots or volumes: those are the Docker provider's. */
  readonly alternatives = {
    snapshots: 'the in-process test provider has no engine to commit or freeze sandboxes; use the Docker provider',
    volumes: 'the in-process test provider has no named volumes; use the Docker provider',
  };

  async closeAll(): Promise<void> {
    for (const handle of [...this.sandboxes.keys()]) await this.remove(handle);
  }

  private require(handle: string): LocalSandbox {
    const sandbox = this.sandboxes.get(handle);
    if (!sandbox) throw Object.assign(new Error(`no sandbox ${handle}`), { statusCode: 404 });
    return sandbox;
  }
}

/** A real controller whose sandboxes are daemons in this process; see {@link startLocalController}. */
export interface LocalController extends AsyncDisposable {
  url: string;
  apiKey: string;
  /** The folder every sandbox's policy should name as its root. */
  root: string;
  /** The controller's keys: make a member key of another tenant with `credentials.keys.create({ tenant, role: 'member' })`. */
  credentials: Credentials;
  /** The controller's state folder. */
  stateDir: string;
  /** Stops every sandbox's daemon and starts it again (what a daemon restart leaves: its memory is gone). */
  restartDaemons(): Promise<void>;
  /** Stops the controller and starts a new one over the same state folder, keys and daemons; `url` is then the new one's. */
  restartController(): Promise<void>;
}

/**
 * Starts a real controller (REST, relay, grants) on a loopback port over daemons running in this
 * process, for integration tests of what the controller decides without Docker.
 *
 * @example
 * await using warren = await startLocalController();
 * const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: warren.root } });
 */
export async function startLocalController(config: Partial<ControllerConfig> = {}, options: { logger?: Logger } = {}): Promise<LocalController> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'warren-local-'));
  const root = path.join(dir, 'workspace');
  await mkdir(root);
  const provider = new LocalProvider(dir, root);
  const apiKey = `wk_test_${randomBytes(16).toString('hex')}`;
  const credentials = Credentials.inMemory(apiKey);
  const stateDir = path.join(dir, 'state');
  const start = () =>
    startController({
      provider,
      credentials,
      logger: options.logger ?? silentLogger(),
      config: {
        port: 0,
        host: '127.0.0.1',
        stateDir,
        reapIntervalMs: 60_000,
        // The E2B gateway's `base` template: this controller's workspace folder as the home and policy root.
        e2bTemplates: { base: { home: root, create: { policy: { root, readOnly: false } } } },
        // In-process daemons have no cgroups: the refusal of an engine without enforced limits is for real engines.
        engine: { allowUnenforcedLimits: true },
        ...config,
      },
    });
  let controller = await start();
  const dispose = async () => {
    await controller.close();
    await provider.closeAll();
    await rm(dir, { recursive: true, force: true });
  };
  return {
    get url() {
      return controller.url;
    },
    apiKey,
    root,
    credentials,
    stateDir,
    restartDaemons: () => provider.restartDaemons(),
    restartController: async () => {
      await controller.close();
      controller = await start();
    },
    [Symbol.asyncDispose]: dispose,
  };
}
