import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { CodedError } from '@warren/protocol';
import type { Clock } from './clock.js';
import type { LifecycleHook } from './events/lifecycle.js';
import type { Metrics } from './metrics.js';
import { requireCapability, type SandboxProvider } from './provider.js';
import type { SandboxRecord, SandboxTable } from './sandbox-table.js';

/** Above this share of one CPU, measured by the engine between two checks, a sandbox is busy though nobody calls it. */
export const BUSY_CPU_SHARE = 0.02;
/** A sandbox whose CPU limit is small is busy once it used this share of its limit (a loop held to 0.01 CPUs works all the time). */
export const BUSY_LIMIT_SHARE = 0.5;

/** One sample of a sandbox's CPU counters, as the engine reports them. */
interface CpuSample {
  at: number;
  cpuSeconds: number;
  /** Scheduler periods in which the CPU limit held its processes back, when the engine reports them. */
  throttledPeriods?: number | undefined;
}

/**
 * Whether a sandbox's processes worked between two samples: they used at least
 * {@link BUSY_CPU_SHARE} of one CPU, or {@link BUSY_LIMIT_SHARE} of their own CPU limit when that
 * is smaller, or the limit held them back at all (throttled periods grew: they wanted more CPU
 * than they were given, so they are busy however little they got). A counter that went backwards
 * (the container was restarted) says nothing: `undefined`, and the later sample is the new
 * baseline.
 *
 * @example
 * cpuBusy({ at: 0, cpuSeconds: 1 }, { at: 1000, cpuSeconds: 1.5 }, 1); // true
 * cpuBusy({ at: 0, cpuSeconds: 1 }, { at: 1000, cpuSeconds: 1.001 }, 1); // false
 */
export function cpuBusy(before: CpuSample, after: CpuSample, cpuLimit: number | undefined): boolean | undefined {
  const seconds = (after.at - before.at) / 1000;
  const used = after.cpuSeconds - before.cpuSeconds;
  if (seconds <= 0 || used < 0) return undefined;
  if (before.throttledPeriods !== undefined && after.throttledPeriods !== undefined) {
    if (after.throttledPeriods < before.throttledPeriods) return undefined;
    if (after.throttledPeriods > before.throttledPeriods) return true;
  }
  const threshold = cpuLimit !== undefined && cpuLimit > 0 ? Math.min(BUSY_CPU_SHARE, cpuLimit * BUSY_LIMIT_SHARE) : BUSY_CPU_SHARE;
  return used / seconds >= threshold;
}

export interface IdleFreezerOptions {
  /** Seconds without activity before a sandbox is frozen; 0 turns freezing off. */
  idleSeconds: number;
  table: SandboxTable;
  provider: Pick<SandboxProvider, 'name' | 'alternatives' | 'suspend' | 'metrics'>;
  clock: Clock;
  metrics?: Metrics | undefined;
  /** Extra reasons a sandbox is busy that the freezer cannot see itself (open egress connections). */
  busy?: ((record: SandboxRecord) => boolean) | undefined;
  /** Told of a freeze or thaw that failed (the sandbox stays as it was). */
  onError?: ((id: string, doing: 'freeze' | 'thaw', error: unknown) => void) | undefined;
  /** Where frozen sandboxes are noted, so a restarted controller tells them from paused ones. */
  marks?: FrozenMarks | undefined;
  /** Told of each freeze (`frozen`) and thaw (`resumed`, with `thawed: true`). */
  lifecycle?: LifecycleHook | undefined;
}

/**
 * One empty file per frozen sandbox in `<stateDir>/frozen/`, named by its provider handle: the
 * engine reports a frozen sandbox as paused, and only this tells a restarted controller that no
 * one paused it on purpose. A mark left by a crash after a thaw is harmless: the next call's thaw
 * finds the sandbox running.
 *
 * @example
 * const marks = new FrozenMarks(stateDir);
 * await marks.mark(containerId);
 * (await marks.list()).has(containerId); // true
 */
export class FrozenMarks {
  private readonly dir: string;

  constructor(stateDir: string) {
    this.dir = path.join(stateDir, 'frozen');
  }

  private file(handle: string): string | undefined {
    return /^[A-Za-z0-9_.-]{1,200}$/.test(handle) && !handle.startsWith('.') ? path.join(this.dir, handle) : undefined;
  }

  async mark(handle: string): Promise<void> {
    const file = this.file(handle);
    if (!file) return;
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    await writeFile(file, '', { mode: 0o600 });
  }

  async clear(handle: string): Promise<void> {
    const file = this.file(handle);
    if (file) await rm(file, { force: true });
  }

  /** The handles marked frozen. */
  async list(): Promise<Set<string>> {
    return new Set(await readdir(this.dir).catch(() => [] as string[]));
  }
}

/** What the freezer knows of one sandbox's activity. */
interface Activity {
  /** The last call, frame or connection, in clock milliseconds. */
  last: number;
  /** Calls in flight and connections that hold the sandbox awake. */
  holds: number;
  /** The engine's CPU counters at a moment after `last`: a later sample shows whether its processes worked meanwhile. */
  cpuMark?: CpuSample | undefined;
}

/**
 * Freezes sandboxes nobody uses with the cgroup freezer (the provider's `pause`) and thaws them
 * on the next call or connection, which waits for the thaw. One job: the idle rule and the
 * freeze/thaw transitions; the relay, the E2B gateway and the port proxy report activity with
 * {@link IdleFreezer.touch} and {@link IdleFreezer.hold}, and call {@link IdleFreezer.wake}
 * before they reach a daemon.
 *
 * A sandbox is idle when, for `idleSeconds`: no call was in flight on any connection (a running
 * foreground command, an attached process, a watch, a terminal or a port tunnel is a call in
 * flight), no frame passed either way, no connection opened, no egress connection was open, and
 * the engine's counters showed no work between two checks ({@link cpuBusy}: less than
 * {@link BUSY_CPU_SHARE} of a CPU, less than half of a smaller CPU limit, and never held back by
 * that limit), so a background job that computes keeps its sandbox awake, however small its CPU
 * limit or however little of it the limit lets it have; one that sleeps or waits on a socket is
 * frozen and runs on when the sandbox thaws. A frozen sandbox stays `running` for the API, with
 * `frozen: true`.
 *
 * @example
 * const freezer = new IdleFreezer({ idleSeconds: 300, table, provider, clock });
 * setInterval(() => void freezer.check(), freezer.checkIntervalMs);
 * await freezer.wake(id); // before opening a daemon connection
 */
export class IdleFreezer {
  private readonly activity = new Map<string, Activity>();
  /** Freezes and thaws under way, by public id: each waits for the one before. */
  private readonly transitions = new Map<string, Promise<void>>();
  private disabled: string | undefined;

  constructor(private readonly options: IdleFreezerOptions) {
    if (options.idleSeconds <= 0) this.disabled = 'freezeAfterIdleSeconds is 0';
    // Both are needed: the CPU use says a sandbox is idle, the freeze is a pause.
    else if (!options.provider.suspend || !options.provider.metrics) this.disabled = `the ${options.provider.name} provider cannot freeze or measure sandboxes`;
  }

  /** True when this freezer freezes anything at all. */
  get enabled(): boolean {
    return this.disabled === undefined;
  }

  /** How often {@link check} should run: a quarter of the idle time, between 1 and 10 seconds. */
  get checkIntervalMs(): number {
    return Math.min(10_000, Math.max(1_000, (this.options.idleSeconds * 1000) / 4));
  }

  /** Something used the sandbox now (a frame, a connection); a frozen sandbox is thawed. */
  touch(id: string): void {
    const activity = this.of(id);
    activity.last = this.options.clock.now();
    activity.cpuMark = undefined;
    if (this.options.table.find(id)?.frozen) void this.wake(id).catch(() => undefined);
  }

  /** Holds the sandbox awake until the returned function is called (a call in flight, a connection). */
  hold(id: string): () => void {
    this.touch(id);
    this.of(id).holds++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const activity = this.activity.get(id);
      if (!activity) return;
      activity.holds = Math.max(0, activity.holds - 1);
      activity.last = this.options.clock.now();
      activity.cpuMark = undefined;
    };
  }

  /** Forgets a sandbox that was killed. */
  forget(id: string): void {
    this.activity.delete(id);
  }

  /**
   * Thaws a frozen sandbox and resolves once its processes run again; resolves at once for one
   * that is not frozen. A freeze under way is waited for first. Counts as activity.
   */
  async wake(id: string): Promise<void> {
    const activity = this.of(id);
    activity.last = this.options.clock.now();
    activity.cpuMark = undefined;
    await this.transitions.get(id);
    const record = this.options.table.find(id);
    if (!record?.frozen) return;
    await this.transition(id, async () => {
      if (!record.frozen) return;
      const started = performance.now();
      try {
        await requireCapability(this.options.provider, 'suspend', 'thaw a sandbox').resume(record.containerId);
      } catch (err) {
        // Unpaused from outside meanwhile: it runs, which is what a thaw wants.
        if (!(err instanceof CodedError && err.code === 'CONFLICT')) {
          this.options.onError?.(id, 'thaw', err);
          throw err;
        }
      }
      record.frozen = false;
      this.options.lifecycle?.report(record, 'resumed', { thawed: true });
      this.options.metrics?.thawSeconds.observe((performance.now() - started) / 1000);
      this.of(id).last = this.options.clock.now();
      await this.options.marks?.clear(record.containerId).catch(() => undefined);
    });
  }

  /**
   * Waits for a freeze or thaw under way, then runs `action` (a user's pause or resume, a kill)
   * while no other transition of that sandbox can start.
   */
  async exclusive<T>(id: string, action: () => Promise<T>): Promise<T> {
    await this.transitions.get(id);
    let result!: T;
    await this.transition(id, async () => {
      result = await action();
    });
    return result;
  }

  /**
   * One round: every running sandbox idle past the limit, whose processes used next to no CPU
   * since the last round, is frozen. Returns the ids frozen.
   */
  async check(): Promise<string[]> {
    if (this.disabled) return [];
    const now = this.options.clock.now();
    const frozen: string[] = [];
    const limitMs = this.options.idleSeconds * 1000;
    for (const record of this.options.table.list()) {
      if (record.state !== 'running' || record.frozen || this.transitions.has(record.id)) continue;
      const activity = this.of(record.id);
      if (activity.holds > 0 || now - activity.last < limitMs || this.options.busy?.(record)) continue;
      const stats = await this.options.provider.metrics?.stats(record.containerId, record.agentId).catch(() => undefined);
      if (!stats) continue;
      const mark = activity.cpuMark;
      const sample: CpuSample = { at: this.options.clock.now(), cpuSeconds: stats.cpuSeconds, throttledPeriods: stats.cpuThrottledPeriods };
      // The first sample after the sandbox went quiet is the baseline; the next one decides.
      if (!mark || cpuBusy(mark, sample, record.settings.cpus) !== false) {
        activity.cpuMark = sample;
        continue;
      }
      if (await this.freeze(record)) frozen.push(record.id);
      if (this.disabled) break;
    }
    for (const id of this.activity.keys()) if (!this.options.table.has(id)) this.activity.delete(id);
    return frozen;
  }

  /** Freezes one sandbox unless it was used meanwhile; true when it froze. */
  private async freeze(record: SandboxRecord): Promise<boolean> {
    let froze = false;
    await this.transition(record.id, async () => {
      const activity = this.of(record.id);
      const quietSince = activity.cpuMark?.at;
      // Used since the CPU mark (touch drops the mark): not idle after all.
      if (quietSince === undefined || activity.holds > 0 || record.state !== 'running' || record.frozen) return;
      try {
        await requireCapability(this.options.provider, 'suspend', 'freeze an idle sandbox').pause(record.containerId);
      } catch (err) {
        if (err instanceof CodedError && err.code === 'NOT_SUPPORTED') this.disabled = err.message;
        activity.last = this.options.clock.now();
        activity.cpuMark = undefined;
        this.options.onError?.(record.id, 'freeze', err);
        return;
      }
      record.frozen = true;
      froze = true;
      this.options.lifecycle?.report(record, 'frozen');
      this.options.metrics?.freezes.inc();
      await this.options.marks?.mark(record.containerId).catch(() => undefined);
    });
    // A call or connection arrived while the engine froze it: thaw now, so it waits no longer.
    const activity = this.activity.get(record.id);
    if (froze && activity && (activity.holds > 0 || activity.cpuMark === undefined)) await this.wake(record.id).catch(() => undefined);
    return froze;
  }

  private of(id: string): Activity {
    let activity = this.activity.get(id);
    if (!activity) {
      activity = { last: this.options.clock.now(), holds: 0 };
      this.activity.set(id, activity);
    }
    return activity;
  }

  /** Runs one freeze or thaw of a sandbox, after the one before it. */
  private async transition(id: string, run: () => Promise<void>): Promise<void> {
    const previous = this.transitions.get(id) ?? Promise.resolve();
    const current = previous.then(run, run);
    const tracked = current.then(
      () => undefined,
      () => undefined,
    );
    this.transitions.set(id, tracked);
    try {
      await current;
    } finally {
      if (this.transitions.get(id) === tracked) this.transitions.delete(id);
    }
  }
}
