import { mkdir, readFile, readdir, realpath, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { customAlphabet } from 'nanoid';
import { CodedError, FilePolicy, SandboxSettings, type CreateSandboxResponse, type SandboxInfo, type SandboxState } from '@warren/protocol';
import { AgentDirs } from './agent-dir.js';
import { probeAgent } from './agent-link.js';
import type { ControllerConfig } from './config.js';
import type { Credentials } from './credentials.js';
import { LABELS, sandboxLabels, type DockerProvider } from './docker.js';
import type { Metrics } from './metrics.js';
import { isBelow, planSandbox, type SandboxPlan } from './sandbox-plan.js';

/** The crash-loop window: deaths within it count towards {@link MAX_RESTARTS}. */
export const RESTART_WINDOW_MS = 120_000;
/** A sandbox whose container died this many times within the window stays `exited`. */
export const MAX_RESTARTS = 3;
/** Failed attempts (the engine answering, the daemon not) before a restart is given up. */
export const RESTART_ATTEMPTS = 15;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms).unref());

/** Runs at most `size` tasks at once; the others wait their turn. */
class Slots {
  private free: number;
  private readonly waiting: (() => void)[] = [];
  constructor(size: number) {
    this.free = size;
  }
  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await task();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    }
  }
}

// 24 characters of a 62-letter alphabet: 142 bits of randomness, safe in URLs and container names.
export const newId = customAlphabet('0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ', 24);

/** What the controller knows of one sandbox. */
export interface SandboxRecord {
  /** The public id: in URLs and tokens. */
  id: string;
  /**
   * The container's own Warren id: names its socket folder and keys its daemon secret. Equal to
   * `id` for a cold create; a warm-pool member keeps the id it was made with.
   */
  agentId: string;
  containerId: string;
  image: string;
  createdAt: Date;
  expiresAt: Date;
  labels: Record<string, string>;
  settings: SandboxSettings;
  /** The base file policy from the create request, if any. */
  policy?: unknown;
  /** Last state seen: set by this controller's own actions and refreshed by the reaper. */
  state: SandboxState;
  pooled: boolean;
}

/**
 * What the state folder holds per sandbox, besides the socket folder: the moved expiry (Docker
 * labels cannot change) and, for a claimed warm-pool member, its public identity.
 */
interface StoredRecord {
  id: string;
  agentId: string;
  expiresAt: string;
  createdAt?: string;
  labels?: Record<string, string>;
  policy?: unknown;
  ttlSeconds?: number;
}

/** Filters of {@link SandboxService.list}. */
export interface ListFilter {
  labels?: Record<string, string>;
  state?: SandboxState;
}

/** Where the warm pool plugs into creates: it may hand over a ready container for a plan. */
export interface PoolSource {
  take(plan: SandboxPlan): { agentId: string; containerId: string; image: string; settings: SandboxSettings } | undefined;
  readonly readyCount: number;
}

/**
 * The sandbox table: creates, finds, pauses, kills and reaps sandboxes. Identity, owner, expiry
 * and settings are in the container labels; a keepalive's moved expiry and a pool claim are in a
 * small file per sandbox in the state folder. {@link SandboxService.recover} rebuilds the table
 * from both after a restart.
 */
export class SandboxService {
  private readonly records = new Map<string, SandboxRecord>();
  private creating = 0;
  /** The restart under way of each sandbox whose stopped container is being started again. */
  private readonly restarts = new Map<string, Promise<boolean>>();
  /** At most four containers start again at once, so fifty do not all load the engine together. */
  private readonly restartSlots = new Slots(4);
  /** Public ids of sandboxes being killed on purpose: their containers' deaths are not restarted. */
  private readonly killing = new Set<string>();
  /** When each sandbox's container last died, for the crash-loop guard. */
  private readonly deaths = new Map<string, number[]>();
  /** Public ids of stopped sandboxes the controller no longer tries to start: they stay `exited`. */
  private readonly givenUp = new Set<string>();
  /**
   * True while the Docker engine does not answer (set by the engine watch): restarts wait for it,
   * and connections meanwhile fail retryable.
   */
  engineAway = false;
  /** Counts each sandbox's starts, so a state listed before a restart is not applied after it. */
  private readonly starts = new Map<string, number>();
  /** Told of each restart after a container died: `error` null when it is back, else why an attempt failed. */
  onRestart: ((id: string, error: string | null) => void) | undefined;
  private runtimeNames: string[] = ['runc'];
  private networklessRuntimes: string[] = [];
  /** Set by the warm pool when it is enabled. */
  pool: PoolSource | undefined;

  constructor(
    readonly docker: DockerProvider,
    readonly credentials: Credentials,
    readonly config: ControllerConfig,
    readonly runtimeVolume: string,
    readonly metrics?: Metrics,
    /** The daemons' host folders; by default owned by root when the controller is root. */
    readonly dirs: AgentDirs = new AgentDirs(config.stateDir, process.getuid?.() === 0 ? { uid: 0, gid: 0 } : undefined),
  ) {}

  /** The host path of a daemon socket, by the container's Warren id. */
  socketPathOf(agentId: string): string {
    return this.dirs.socketPath(agentId);
  }

  /** The host path of a sandbox's daemon socket, by public id. */
  socketPath(id: string): string {
    return this.socketPathOf(this.require(id).agentId);
  }

  /** The secret that opens a sandbox's daemon, by public id. */
  agentSecret(id: string): string {
    return this.credentials.agentSecret(this.require(id).agentId);
  }

  private recordFile(id: string): string {
    return path.join(this.config.stateDir, 'records', `${id}.json`);
  }

  /** Runtimes the engine offers; read at start. */
  get runtimes(): readonly string[] {
    return this.runtimeNames;
  }

  /**
   * Rebuilds the table from this controller's containers (owner label = its instance id) and the
   * per-sandbox state files. Unclaimed warm-pool members are returned for the pool to adopt or
   * remove; containers of other controllers are left to {@link SandboxService.reapExpired}.
   */
  async recover(): Promise<{ recovered: number; poolMembers: { agentId: string; containerId: string; labels: Record<string, string> }[] }> {
    const runtimes = await this.docker.runtimeInfo();
    this.runtimeNames = runtimes.map((r) => r.name);
    this.networklessRuntimes = runtimes.filter((r) => r.args.includes('--network=none')).map((r) => r.name);
    const stored = await this.readStoredRecords();
    const byAgent = new Map([...stored.values()].map((s) => [s.agentId, s]));
    const poolMembers: { agentId: string; containerId: string; labels: Record<string, string> }[] = [];
    for (const container of await this.docker.listSandboxes()) {
      const agentId = container.labels[LABELS.sandbox];
      if (!agentId || !this.isMine(container.labels)) continue;
      const claim = byAgent.get(agentId);
      if (container.labels[LABELS.pool] && !claim) {
        poolMembers.push({ agentId, containerId: container.containerId, labels: container.labels });
        continue;
      }
      const record = recordFromLabels(agentId, container.containerId, container.labels, toState(container.state));
      if (claim) {
        record.id = claim.id;
        record.expiresAt = new Date(claim.expiresAt);
        if (claim.createdAt) record.createdAt = new Date(claim.createdAt);
        if (claim.labels) record.labels = claim.labels;
        if (claim.policy !== undefined) record.policy = claim.policy;
        if (claim.ttlSeconds !== undefined) record.settings = { ...record.settings, ttlSeconds: claim.ttlSeconds };
        record.pooled = container.labels[LABELS.pool] === '1';
      }
      this.records.set(record.id, record);
    }
    // State files whose container is gone belong to sandboxes killed while the controller was down.
    for (const [id, s] of stored) if (!this.records.has(id) && !poolMembers.some((m) => m.agentId === s.agentId)) await rm(this.recordFile(id), { force: true });
    return { recovered: this.records.size, poolMembers };
  }

  /** True when a container was made by this controller (or by one before owner labels existed). */
  isMine(labels: Record<string, string>): boolean {
    const owner = labels[LABELS.owner];
    return owner === undefined || owner === this.credentials.instanceId;
  }

  private async readStoredRecords(): Promise<Map<string, StoredRecord>> {
    const dir = path.join(this.config.stateDir, 'records');
    const out = new Map<string, StoredRecord>();
    const names = await readdir(dir).catch(() => [] as string[]);
    for (const name of names) {
      if (!name.endsWith('.json')) continue;
      try {
        const data = JSON.parse(await readFile(path.join(dir, name), 'utf8')) as StoredRecord;
        if (typeof data.id === 'string' && typeof data.agentId === 'string') out.set(data.id, data);
      } catch {
        // A torn write: the labels still hold the original expiry.
      }
    }
    return out;
  }

  private async writeStoredRecord(record: SandboxRecord): Promise<void> {
    const file = this.recordFile(record.id);
    await mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
    const data: StoredRecord = { id: record.id, agentId: record.agentId, expiresAt: record.expiresAt.toISOString() };
    if (record.agentId !== record.id) {
      data.createdAt = record.createdAt.toISOString();
      data.labels = record.labels;
      data.ttlSeconds = record.settings.ttlSeconds;
      if (record.policy !== undefined) data.policy = record.policy;
    }
    // Write then rename: a crash leaves the old file or the new one, never half of one.
    const temp = `${file}.${process.pid}.tmp`;
    await writeFile(temp, JSON.stringify(data), { mode: 0o600 });
    await rename(temp, file);
  }

  /** Checks a create request against this controller's rules and fills in the defaults. */
  plan(body: unknown): SandboxPlan {
    const uid = process.getuid?.();
    return planSandbox(body, { config: this.config, runtimes: this.runtimeNames, networklessRuntimes: this.networklessRuntimes, reservedUid: uid === 0 ? undefined : uid });
  }

  /**
   * Creates a sandbox and answers once its daemon has answered a real call: from the warm pool
   * when the request matches its settings, cold otherwise.
   */
  async create(body: unknown): Promise<CreateSandboxResponse> {
    const started = performance.now();
    const plan = this.plan(body);
    await this.checkMountsOnHost(plan);
    if (this.records.size + this.creating >= this.config.maxSandboxes) {
      throw new CodedError('RESOURCE_EXHAUSTED', `This controller already runs its maximum of ${this.config.maxSandboxes} sandboxes (maxSandboxes); kill one you no longer need, or raise maxSandboxes.`);
    }
    const pooled = this.pool?.take(plan);
    if (pooled) {
      const id = newId();
      const createdAt = new Date();
      const record: SandboxRecord = {
        id,
        agentId: pooled.agentId,
        containerId: pooled.containerId,
        image: pooled.image,
        createdAt,
        expiresAt: new Date(createdAt.getTime() + plan.settings.ttlSeconds * 1000),
        labels: plan.labels,
        settings: { ...pooled.settings, ttlSeconds: plan.settings.ttlSeconds },
        state: 'running',
        pooled: true,
      };
      if (plan.policy !== undefined) record.policy = plan.policy;
      await this.writeStoredRecord(record);
      this.records.set(id, record);
      const seconds = (performance.now() - started) / 1000;
      this.metrics?.creates.inc({ source: 'pool', outcome: 'ok' });
      this.metrics?.createSeconds.observe({ source: 'pool' }, seconds);
      return { ...describe(record), token: this.credentials.sandboxToken(id), readyMs: Math.round(seconds * 1000), pooled: true };
    }
    if (this.creating >= this.config.maxConcurrentCreates) {
      throw new CodedError('RESOURCE_EXHAUSTED', `${this.creating} creates are already in progress, the most this controller runs at once (maxConcurrentCreates); retry when one finishes.`);
    }
    this.creating++;
    try {
      const id = newId();
      const createdAt = new Date();
      const expiresAt = new Date(createdAt.getTime() + plan.settings.ttlSeconds * 1000);
      const containerId = await this.startContainer(id, plan, { createdAt, expiresAt });
      const record: SandboxRecord = { id, agentId: id, containerId, image: plan.image, createdAt, expiresAt, labels: plan.labels, settings: plan.settings, state: 'running', pooled: false };
      if (plan.policy !== undefined) record.policy = plan.policy;
      this.records.set(id, record);
      const seconds = (performance.now() - started) / 1000;
      this.metrics?.creates.inc({ source: 'cold', outcome: 'ok' });
      this.metrics?.createSeconds.observe({ source: 'cold' }, seconds);
      return { ...describe(record), token: this.credentials.sandboxToken(id), readyMs: Math.round(seconds * 1000), pooled: false };
    } catch (err) {
      this.metrics?.creates.inc({ source: 'cold', outcome: 'error' });
      throw err;
    } finally {
      this.creating--;
    }
  }

  /**
   * Starts one container for a plan and waits for its daemon; on any failure nothing is left
   * behind. The warm pool uses it too, with `pool: true`.
   */
  async startContainer(agentId: string, plan: SandboxPlan, times: { createdAt: Date; expiresAt: Date }, pool = false): Promise<string> {
    const socketDir = await this.dirs.prepare(agentId, this.credentials.agentSecret(agentId));
    let containerId: string | undefined;
    try {
      containerId = await this.docker.startSandbox({
        id: agentId,
        image: plan.image,
        env: plan.env,
        labels: sandboxLabels({ id: agentId, owner: this.credentials.instanceId, image: plan.image, ...times, settings: plan.settings, policy: plan.policy, labels: plan.labels, pool }),
        socketDirOnHost: socketDir,
        runtimeVolume: this.runtimeVolume,
        settings: plan.settings,
      });
      await this.waitUntilReady(agentId, containerId);
      return containerId;
    } catch (err) {
      if (containerId) await this.docker.removeSandbox(containerId).catch(() => undefined);
      await this.dirs.remove(agentId);
      throw err;
    }
  }

  /**
   * The host side of mount checks: each path must exist, resolve (symlinks followed) below an
   * allowed folder, and not be a socket.
   */
  private async checkMountsOnHost(plan: SandboxPlan): Promise<void> {
    if (plan.settings.mounts.length === 0) return;
    const roots = await Promise.all(this.config.allowedMountRoots.map((r) => realpath(r).catch(() => r)));
    for (const mount of plan.settings.mounts) {
      const real = await realpath(mount.hostPath).catch(() => {
        throw new CodedError('INVALID_PARAMS', `Cannot mount '${mount.hostPath}': it does not exist on the controller's host. Create the folder first.`, { field: 'mounts', hostPath: mount.hostPath });
      });
      if (!roots.some((root) => isBelow(real, root))) {
        throw new CodedError('FORBIDDEN', `Refused mount of '${mount.hostPath}': it resolves to '${real}', which is not below a folder this controller allows (${this.config.allowedMountRoots.join(', ')}).`, { field: 'mounts', hostPath: mount.hostPath });
      }
      if ((await stat(real)).isSocket()) {
        throw new CodedError('FORBIDDEN', `Refused mount of '${mount.hostPath}': it is a socket, and host sockets are never passed into a sandbox.`, { field: 'mounts', hostPath: mount.hostPath });
      }
      mount.hostPath = real;
    }
  }

  private async waitUntilReady(agentId: string, containerId: string): Promise<void> {
    const deadline = Date.now() + this.config.readyTimeoutMs;
    let lastError: unknown;
    for (let attempt = 0; Date.now() < deadline; attempt++) {
      try {
        await probeAgent(this.socketPathOf(agentId), this.credentials.agentSecret(agentId), Math.max(100, deadline - Date.now()));
        return;
      } catch (err) {
        lastError = err;
      }
      if (attempt % 20 === 19 && (await this.docker.containerState(containerId)) !== 'running') break;
      await new Promise((r) => setTimeout(r, Math.min(5 + attempt * 2, 50)));
    }
    const logs = await this.docker.logsTail(containerId);
    throw new CodedError('SANDBOX_NOT_READY', `The sandbox daemon did not answer within ${this.config.readyTimeoutMs} ms (${String((lastError as Error)?.message ?? lastError)}).${logs ? ` Container output: ${logs}` : ''}`, {
      sandboxId: agentId,
    });
  }

  /** A sandbox's description with its current state, from Docker. */
  async get(id: string): Promise<SandboxInfo> {
    const record = this.require(id);
    const starts = this.starts.get(id);
    this.observe(record, await this.docker.containerState(record.containerId), starts);
    return describe(record);
  }

  /**
   * Takes the engine's word for a sandbox's state, unless the sandbox was started again since the
   * engine was asked (`starts`); a death no event reported is handled like one.
   */
  private observe(record: SandboxRecord, dockerState: string | undefined, starts: number | undefined): void {
    if (this.records.get(record.id) !== record || this.restarts.has(record.id) || this.starts.get(record.id) !== starts) return;
    const was = record.state;
    record.state = toState(dockerState);
    if (record.state === 'exited' && was !== 'exited') this.died(record);
  }

  /** The record of a sandbox, or SANDBOX_NOT_FOUND. */
  record(id: string): SandboxRecord {
    return this.require(id);
  }

  /** Every sandbox this controller knows. */
  list(): SandboxRecord[] {
    return [...this.records.values()];
  }

  /** The sandboxes that carry every given label and are in the given state, states fresh from Docker. */
  async find(filter: ListFilter = {}): Promise<SandboxInfo[]> {
    await this.refreshStates();
    return this.list()
      .filter((r) => Object.entries(filter.labels ?? {}).every(([k, v]) => r.labels[k] === v))
      .filter((r) => filter.state === undefined || r.state === filter.state)
      .map(describe);
  }

  /** Counts by state, for the metrics gauge. */
  countByState(): Record<string, number> {
    const counts: Record<string, number> = { running: 0, paused: 0, exited: 0 };
    for (const r of this.records.values()) counts[r.state] = (counts[r.state] ?? 0) + 1;
    if (this.pool) counts.pooled = this.pool.readyCount;
    return counts;
  }

  has(id: string): boolean {
    return this.records.has(id);
  }

  /** Moves a sandbox's expiry to `ttlSeconds` from now (shorter or longer), within the maximum. */
  async setTimeout(id: string, ttlSeconds: number): Promise<SandboxInfo> {
    const record = this.require(id);
    const max = this.config.maxLimits.ttlSeconds;
    if (ttlSeconds > max) throw new CodedError('INVALID_PARAMS', `ttlSeconds ${ttlSeconds} is above this controller's maximum of ${max}; ask for at most ${max}.`, { field: 'ttlSeconds', max });
    record.expiresAt = new Date(Date.now() + ttlSeconds * 1000);
    await this.writeStoredRecord(record);
    return describe(record);
  }

  /** Moves the expiry to the sandbox's own ttl from now; never shortens it. */
  async keepalive(id: string): Promise<SandboxInfo> {
    const record = this.require(id);
    const next = new Date(Date.now() + record.settings.ttlSeconds * 1000);
    if (next > record.expiresAt) {
      record.expiresAt = next;
      await this.writeStoredRecord(record);
    }
    return describe(record);
  }

  /** Freezes the sandbox's processes; connections to it wait until it is resumed. */
  async pause(id: string): Promise<SandboxInfo> {
    const record = this.require(id);
    await this.docker.pause(record.containerId);
    record.state = 'paused';
    return describe(record);
  }

  async resume(id: string): Promise<SandboxInfo> {
    const record = this.require(id);
    await this.docker.unpause(record.containerId);
    record.state = 'running';
    return describe(record);
  }

  /**
   * Starts again every sandbox whose container stopped but still exists and has time left: what
   * an engine restart or a host reboot leaves behind (containers stop with the engine unless it
   * runs with live-restore). Joins the restarts already under way (a container that died while
   * the engine was stopping). Resolves once each has come back or been given up.
   */
  async restartStopped(): Promise<{ restarted: string[]; failed: string[] }> {
    const states = await this.docker.containerStates();
    const stopped = this.list().filter((r) => toState(states.get(r.containerId)) === 'exited' && r.expiresAt > new Date());
    const outcomes = await Promise.all(stopped.map((record) => this.restart(record, 0).then((back) => ({ id: record.id, back }))));
    return { restarted: outcomes.filter((o) => o.back).map((o) => o.id), failed: outcomes.filter((o) => !o.back).map((o) => o.id) };
  }

  /** True while the controller is starting this sandbox's container again: a connection should retry. */
  isRestarting(id: string): boolean {
    return this.restarts.has(id);
  }

  /**
   * True unless the controller has given up on a stopped sandbox: while it is starting the
   * container again, and also in the moment before it has heard that the container died (a
   * daemon that is stopping closes its connections first). A connection should then retry.
   */
  willRestart(id: string): boolean {
    const record = this.records.get(id);
    return record !== undefined && (this.restarts.has(id) || (!this.givenUp.has(id) && record.expiresAt > new Date()));
  }

  /**
   * Takes an engine event about a sandbox container: one that died is started again
   * ({@link SandboxService.died}); one removed from outside is `gone`.
   */
  containerEvent(containerId: string, action: string): void {
    const record = this.list().find((r) => r.containerId === containerId);
    if (!record) return;
    if (action === 'destroy' && !this.killing.has(record.id)) record.state = 'gone';
    if (action === 'die') this.died(record);
  }

  /**
   * A sandbox's container stopped (its daemon was killed, the engine is stopping, `docker stop`
   * from outside): start it again. One that died {@link MAX_RESTARTS} times within
   * {@link RESTART_WINDOW_MS} stays `exited`, so a crashing daemon does not loop; so does one whose
   * time is up.
   */
  private died(record: SandboxRecord): void {
    if (this.killing.has(record.id) || this.restarts.has(record.id)) return;
    record.state = 'exited';
    const now = Date.now();
    const recent = (this.deaths.get(record.id) ?? []).filter((t) => now - t < RESTART_WINDOW_MS);
    this.deaths.set(record.id, [...recent, now]);
    if (recent.length >= MAX_RESTARTS || record.expiresAt.getTime() <= now) {
      this.givenUp.add(record.id);
      return;
    }
    // A container that died because the engine is stopping would be started only to be stopped
    // again: give a stopping engine a moment to show itself first.
    void this.restart(record, 2000);
  }

  /**
   * The one restart of a sandbox at a time: a second caller joins the first. It waits while the
   * engine is away (that time does not count), then tries up to {@link RESTART_ATTEMPTS} times
   * with backoff; four sandboxes start at once at most. Resolves true once the sandbox is back.
   */
  private restart(record: SandboxRecord, delayMs: number): Promise<boolean> {
    const running = this.restarts.get(record.id);
    if (running) return running;
    const job = (async () => {
      await sleep(delayMs);
      for (let attempt = 0; attempt < RESTART_ATTEMPTS && this.records.get(record.id) === record; ) {
        if (this.engineAway) {
          await sleep(1000);
          continue;
        }
        try {
          const state = await this.docker.containerState(record.containerId);
          if (state === undefined) {
            record.state = 'gone';
            return false;
          }
          // Started meanwhile (by another controller, or by hand): nothing to do but use it.
          if (state !== 'running') await this.restartSlots.run(() => this.startAgain(record));
          record.state = 'running';
          this.givenUp.delete(record.id);
          this.onRestart?.(record.id, null);
          return true;
        } catch (err) {
          attempt++;
          if (attempt % 5 === 0) this.onRestart?.(record.id, (err as Error).message);
        }
        await sleep(Math.min(5000, 250 * 2 ** attempt));
      }
      this.givenUp.add(record.id);
      return false;
    })().finally(() => this.restarts.delete(record.id));
    this.restarts.set(record.id, job);
    return job;
  }

  /**
   * Starts a stopped sandbox container again: a new one-time secret file for its daemon, the same
   * workspace volume (files are kept; processes are not), and running only once the daemon has
   * answered a real call.
   */
  private async startAgain(record: SandboxRecord): Promise<void> {
    await this.dirs.prepare(record.agentId, this.credentials.agentSecret(record.agentId));
    await this.docker.startAgain(record.containerId);
    await this.waitUntilReady(record.agentId, record.containerId);
    this.starts.set(record.id, (this.starts.get(record.id) ?? 0) + 1);
  }

  /** Removes an unclaimed warm-pool container and its socket folder. */
  async removePoolMember(agentId: string, containerId: string): Promise<void> {
    await this.docker.removeSandbox(containerId).catch(() => undefined);
    await this.dirs.remove(agentId);
  }

  /** Kills a sandbox: its container, workspace volume, socket folder and state file are gone afterwards. */
  async kill(id: string): Promise<void> {
    const record = this.require(id);
    this.killing.add(id);
    try {
      await this.docker.removeSandbox(record.containerId);
      await this.dirs.remove(record.agentId);
      await rm(this.recordFile(id), { force: true });
      this.records.delete(id);
      this.deaths.delete(id);
      this.givenUp.delete(id);
      this.starts.delete(id);
    } finally {
      this.killing.delete(id);
    }
  }

  /**
   * Kills every sandbox of this controller whose time is up, and sweeps containers of other
   * controllers sharing the engine once their labelled expiry plus `orphanGraceSeconds` has
   * passed. Returns the ids killed.
   */
  async reapExpired(now = new Date()): Promise<string[]> {
    const killed: string[] = [];
    for (const record of this.list().filter((r) => r.expiresAt <= now)) {
      await this.kill(record.id).then(
        () => killed.push(record.id),
        () => undefined,
      );
    }
    const graceMs = this.config.orphanGraceSeconds * 1000;
    for (const container of await this.docker.listSandboxes()) {
      if (this.isMine(container.labels)) continue;
      const expiresAt = Date.parse(container.labels[LABELS.expiresAt] ?? '');
      if (Number.isFinite(expiresAt) && expiresAt + graceMs <= now.getTime()) {
        await this.docker.removeSandbox(container.containerId).catch(() => undefined);
        killed.push(container.labels[LABELS.sandbox] ?? container.containerId);
      }
    }
    return killed;
  }

  /**
   * Refreshes every record's state from one container listing. A sandbox whose container was
   * removed behind the controller's back (`docker rm`) is forgotten, with its socket folder and
   * state file.
   */
  async refreshStates(): Promise<void> {
    // Only records that existed before the listing: one added meanwhile is not in it.
    const known = [...this.records.values()].map((record) => ({ record, starts: this.starts.get(record.id) }));
    const states = await this.docker.containerStates();
    for (const { record, starts } of known) {
      this.observe(record, states.get(record.containerId), starts);
      if (record.state === 'gone') await this.kill(record.id).catch(() => undefined);
    }
  }

  private require(id: string): SandboxRecord {
    const record = this.records.get(id);
    if (!record) throw new CodedError('SANDBOX_NOT_FOUND', `No sandbox '${id}': it never existed, was killed, or expired. List sandboxes with GET /v1/sandboxes.`, { sandboxId: id });
    return record;
  }
}

function recordFromLabels(agentId: string, containerId: string, labels: Record<string, string>, state: SandboxState): SandboxRecord {
  const user: Record<string, string> = {};
  for (const [key, value] of Object.entries(labels)) if (key.startsWith(LABELS.userPrefix)) user[key.slice(LABELS.userPrefix.length)] = value;
  const settings = SandboxSettings.safeParse(safeJson(labels[LABELS.settings]));
  const record: SandboxRecord = {
    id: agentId,
    agentId,
    containerId,
    image: labels[LABELS.image] ?? '',
    createdAt: new Date(labels[LABELS.createdAt] ?? 0),
    expiresAt: new Date(labels[LABELS.expiresAt] ?? 0),
    labels: user,
    settings: settings.success
      ? settings.data
      : { cpus: 1, memoryMb: 1024, pidsLimit: 512, network: 'none', runtime: 'runc', user: '1000:1000', workdir: '/workspace', ttlSeconds: 3600, mounts: [] },
    state,
    pooled: false,
  };
  const policy = FilePolicy.safeParse(safeJson(labels[LABELS.policy]));
  if (policy.success) record.policy = policy.data;
  return record;
}

function safeJson(text: string | undefined): unknown {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function describe(record: SandboxRecord): SandboxInfo {
  return {
    id: record.id,
    state: record.state,
    image: record.image,
    createdAt: record.createdAt.toISOString(),
    expiresAt: record.expiresAt.toISOString(),
    labels: record.labels,
    settings: record.settings,
  };
}

/** Docker's container state as a sandbox state. */
export function toState(dockerState: string | undefined): SandboxState {
  if (dockerState === 'running' || dockerState === 'paused') return dockerState;
  return dockerState === undefined ? 'gone' : 'exited';
}
