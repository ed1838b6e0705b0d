import { parseImageRef } from '../src/image-ref.js';
import {
  type BuildOptions,
  type DaemonEndpoint,
  type ImageCapability,
  type MetricsCapability,
  type ProvidedSandbox,
  type ProviderCapability,
  type ProviderIsolation,
  type ProviderState,
  type PullOptions,
  type SandboxProvider,
  type SandboxSpec,
  type SnapshotCapability,
  type SuspendCapability,
  type VolumeCapability,
} from '../src/provider.js';
import { type Clock } from '../src/clock.js';

/**
 * A fake clock for unit tests: `now()` moves only when the test says so, and `sleep()` resolves
 * once the clock has been advanced past its end.
 */
export class FakeClock implements Clock {
  private time: number;
  private readonly sleepers: { until: number; wake: () => void }[] = [];

  constructor(start = Date.parse('2026-01-01T00:00:00Z')) {
    this.time = start;
  }

  now(): number {
    return this.time;
  }

  sleep(ms: number): Promise<void> {
    return new Promise((wake) => this.sleepers.push({ until: this.time + ms, wake }));
  }

  /** Moves time on, waking every sleeper whose time has come, and lets their continuations run. */
  async advance(ms: number): Promise<void> {
    this.time += ms;
    for (let round = 0; round < 20; round++) {
      const due = this.sleepers.filter((s) => s.until <= this.time);
      for (const s of due) this.sleepers.splice(this.sleepers.indexOf(s), 1);
      for (const s of due) s.wake();
      await new Promise((r) => setImmediate(r));
    }
  }
}

/** One sandbox the fake provider runs. */
interface FakeSandbox {
  handle: string;
  agentId: string;
  labels: Record<string, string>;
  state: ProviderState;
}

/**
 * An in-memory {@link SandboxProvider} for unit tests: sandboxes are records, states change when
 * the test says so, and events go to whoever follows. The e2e tier runs the real Docker provider
 * through the same contract (`test/support/provider-contract.ts`).
 */
export class FakeProvider implements SandboxProvider {
  readonly name = 'fake';
  readonly sandboxes = new Map<string, FakeSandbox>();
  readonly calls: string[] = [];
  /** When set, `create` waits for this before answering (or failing). */
  createGate: ((spec: SandboxSpec) => Promise<void>) | undefined;
  /** When set, `start` fails with it. */
  startFailure: Error | undefined;
  private followers: { onEvent: (handle: string, action: string) => void; onEnd: () => void }[] = [];
  private next = 0;

  /** `without`: capabilities this fake lacks, as a backend that has no such thing (Kubernetes has no `suspend`). */
  constructor(options: { without?: ProviderCapability[] } = {}) {
    for (const capability of options.without ?? []) Object.assign(this, { [capability]: undefined });
  }

  async ping(): Promise<void> {}

  async isolation(): Promise<ProviderIsolation> {
    return {
      usernsRemap: null,
      rootless: false,
      cgroupVersion: '2',
      cgroupDriver: 'fake',
      limitsEnforced: true,
      seccomp: true,
      apparmor: false,
      selinux: false,
      gvisor: false,
      runtimes: ['runc'],
      storageDriver: 'fake',
      diskQuota: { quota: false, kind: 'volume', reason: 'a fake provider' },
    };
  }

  async runtimes(): Promise<{ name: string; args: string[] }[]> {
    return [{ name: 'runc', args: [] }];
  }

  /** Images the fake engine lacks (by the name a create gives); everything else is there. */
  readonly missingImages = new Set<string>();
  /** Canonical references pulled so far, in order. */
  readonly pulled: string[] = [];
  /** When set, a pull waits for this before finishing (or failing with what it throws). */
  pullGate: ((image: string, options: PullOptions) => Promise<void>) | undefined;
  /** Built images by name, with their labels. */
  readonly imageLabels = new Map<string, Record<string, string>>();
  builds: { context: Buffer; options: BuildOptions }[] = [];
  /** When set, a build waits for this before finishing. */
  buildGate: (() => Promise<void>) | undefined;
  /** The `ONBUILD` triggers of images on the engine, by name (such an image is inspectable, with no labels unless `imageLabels` has some). */
  readonly onBuild = new Map<string, string[]>();

  readonly images: ImageCapability = {
    has: async (image) => {
      if (!this.missingImages.has(image)) return true;
      try {
        const ref = parseImageRef(image);
        return this.pulled.includes(ref.digest ? `${ref.registry}/${ref.path}@${ref.digest}` : ref.canonical);
      } catch {
        return false;
      }
    },
    pull: async (image, options) => {
      this.calls.push(`pull ${image}`);
      options.onProgress({ status: 'Pulling fs layer', layer: 'l1' });
      await this.pullGate?.(image, options);
      options.onProgress({ status: 'Pull complete', layer: 'l1' });
      this.pulled.push(image);
    },
    build: async (context, options) => {
      this.builds.push({ context, options });
      await this.buildGate?.();
      options.onOutput('Step 1/1 : FROM scratch\n');
      this.imageLabels.set(options.tag, options.labels);
      return { id: `sha256:${'b'.repeat(64)}` };
    },
    list: async (label) =>
      [...this.imageLabels]
        .filter(([, labels]) => labels[label] !== undefined)
        .map(([tag, labels]) => ({ id: `sha256:${'b'.repeat(64)}`, tags: [tag], createdAt: '2026-01-01T00:00:00.000Z', sizeBytes: 1, labels })),
    inspect: async (image) => {
      const labels = this.imageLabels.get(image);
      const onBuild = this.onBuild.get(image);
      if (labels === undefined && onBuild === undefined) return undefined;
      return { id: `sha256:${'e'.repeat(64)}`, labels: labels ?? {}, onBuild: onBuild ?? [] };
    },
    remove: async (image) => {
      this.calls.push(`removeImage ${image}`);
      this.imageLabels.delete(image);
    },
  };

  async prepare(): Promise<{ oldRuntimesRemoved: number }> {
    return { oldRuntimesRemoved: 0 };
  }

  async create(spec: SandboxSpec): Promise<string> {
    this.calls.push(`create ${spec.agentId}`);
    await this.createGate?.(spec);
    const handle = `h${++this.next}`;
    this.sandboxes.set(handle, { handle, agentId: spec.agentId, labels: spec.labels, state: 'running' });
    return handle;
  }

  readonly suspend: SuspendCapability = {
    start: async (handle) => {
      this.calls.push(`start ${handle}`);
      if (this.startFailure) throw this.startFailure;
      this.require(handle).state = 'running';
    },
    stop: async (handle) => void (this.require(handle).state = 'exited'),
    pause: async (handle) => void (this.require(handle).state = 'paused'),
    resume: async (handle) => void (this.require(handle).state = 'running'),
  };

  async remove(handle: string): Promise<void> {
    this.calls.push(`remove ${handle}`);
    if (this.sandboxes.delete(handle)) this.emit(handle, 'destroy');
  }

  async inspect(handle: string): Promise<ProviderState | undefined> {
    return this.sandboxes.get(handle)?.state;
  }

  async states(): Promise<Map<string, ProviderState>> {
    return new Map([...this.sandboxes.values()].map((s) => [s.handle, s.state]));
  }

  async list(): Promise<ProvidedSandbox[]> {
    return [...this.sandboxes.values()].map((s) => ({ handle: s.handle, labels: s.labels, state: s.state }));
  }

  async events(onEvent: (handle: string, action: string) => void, onEnd: () => void): Promise<() => void> {
    const follower = { onEvent, onEnd };
    this.followers.push(follower);
    return () => void (this.followers = this.followers.filter((f) => f !== follower));
  }

  daemon(agentId: string): DaemonEndpoint {
    return { socketPath: `/fake/${agentId}.sock` };
  }

  /** Snapshot ids the fake keeps, with the workspace bytes it claims for each (set `snapshotBytes` to test quotas). */
  readonly keptSnapshots = new Set<string>();
  snapshotBytes = 1024;

  readonly snapshots: SnapshotCapability = {
    capture: async (handle, _agentId, snapshotId) => {
      this.calls.push(`snapshot ${handle}`);
      this.require(handle);
      this.keptSnapshots.add(snapshotId);
      return {
        image: `warren-snapshot/${snapshotId.toLowerCase()}:latest`,
        imageBytes: 0,
        workspaceBytes: this.snapshotBytes,
        processes: false,
        processesReason: 'the fake keeps none',
      };
    },
    remove: async (snapshotId) => void this.keptSnapshots.delete(snapshotId),
    ids: async () => [...this.keptSnapshots],
  };

  readonly keptVolumes = new Set<string>();

  readonly volumes: VolumeCapability = {
    create: async (id) => {
      this.keptVolumes.add(id);
      return { quota: false };
    },
    remove: async (id) => void this.keptVolumes.delete(id),
    usage: async () => undefined,
  };

  readonly metrics: MetricsCapability = {
    /** Fixed numbers while running: what a test sees is the controller's handling, not a measurement. */
    stats: async (handle) => {
      const sandbox = this.sandboxes.get(handle);
      if (sandbox?.state !== 'running') return undefined;
      this.cpuSeconds += this.cpuPerSample;
      return { cpuSeconds: this.cpuSeconds, memoryBytes: 64 * 1024 * 1024, memoryLimitBytes: 512 * 1024 * 1024, pids: 3, pidsLimit: 256 };
    },
    logsTail: async () => '',
  };
  /** CPU seconds the fake's sandboxes have "used": `cpuPerSample` more at every sample. */
  cpuSeconds = 0;
  cpuPerSample = 0.5;

  /** The test's hand: a sandbox's processes stop, as when its daemon is killed. */
  die(handle: string): void {
    this.require(handle).state = 'exited';
    this.emit(handle, 'die');
  }

  /** Adds a sandbox made by someone else (another controller), with its labels. */
  adopt(labels: Record<string, string>, state: ProviderState = 'running'): string {
    const handle = `h${++this.next}`;
    this.sandboxes.set(handle, { handle, agentId: labels['warren.sandbox'] ?? handle, labels, state });
    return handle;
  }

  private emit(handle: string, action: string): void {
    for (const f of this.followers) f.onEvent(handle, action);
  }

  private require(handle: string): FakeSandbox {
    const sandbox = this.sandboxes.get(handle);
    if (!sandbox) throw Object.assign(new Error(`no sandbox ${handle}`), { statusCode: 404 });
    return sandbox;
  }
}
