import { CodedError } from '@warren/protocol';
import type { Clock } from './clock.js';
import type { LifecycleHook } from './events/lifecycle.js';
import { Slots } from './limiter.js';
import type { ProviderState, SandboxProvider } from './provider.js';
import { toState, type SandboxRecord, type SandboxTable } from './sandbox-table.js';

/** The crash-loop window: deaths within it count towards {@link MAX_RESTARTS}. */
export const RESTART_WINDOW_MS = 120_000;
/** A sandbox whose processes stopped this many times within the window stays `exited`. */
export const MAX_RESTARTS = 3;
/** Failed attempts (the backend answering, the daemon not) before a restart is given up. */
export const RESTART_ATTEMPTS = 15;

export interface SupervisorOptions {
  provider: SandboxProvider;
  table: SandboxTable;
  clock: Clock;
  /** Starts a stopped sandbox again and resolves once its daemon has answered. */
  bringBack: (record: SandboxRecord) => Promise<void>;
  /** Told of each restart: `error` null when the sandbox is back, else why an attempt failed. */
  onRestart?: ((id: string, error: string | null) => void) | undefined;
  /** Told of deaths (`failed`, `oom-killed`), restarts (`ready`) and restarts given up (`failed`). */
  lifecycle?: LifecycleHook | undefined;
}

/**
 * Restart supervision: a sandbox whose processes stopped (its daemon was killed, the backend
 * restarted, someone stopped it from outside) is started again, one restart at a time per sandbox
 * and four at once at most, waiting while the backend is away. A sandbox that died
 * {@link MAX_RESTARTS} times within {@link RESTART_WINDOW_MS}, or whose time is up, stays `exited`
 * so a crashing daemon does not loop.
 *
 * @example
 * const supervisor = new RestartSupervisor({ provider, table, clock, bringBack });
 * supervisor.event(handle, 'die');
 */
export class RestartSupervisor {
  /** The restart under way of each sandbox being started again. */
  private readonly restarts = new Map<string, Promise<boolean>>();
  private readonly slots = new Slots(4);
  /** Public ids of sandboxes being killed on purpose: their deaths are not restarted. */
  private readonly killing = new Set<string>();
  /** When each sandbox last died, for the crash-loop guard. */
  private readonly deaths = new Map<string, number[]>();
  /** Public ids of stopped sandboxes the supervisor no longer tries to start: they stay `exited`. */
  private readonly givenUp = new Set<string>();
  /** Counts each sandbox's starts, so a state listed before a restart is not applied after it. */
  private readonly starts = new Map<string, number>();
  private away = false;

  constructor(private readonly options: SupervisorOptions) {}

  /** True while the backend does not answer: restarts wait, and connections are told to retry. */
  get engineAway(): boolean {
    return this.away;
  }

  /** Set by the engine watch when the backend goes away and when it is back. */
  setEngineAway(away: boolean): void {
    this.away = away;
  }

  /** Marks a sandbox as being killed on purpose while `task` runs; then forgets it. */
  async whileKilling<T>(id: string, task: () => Promise<T>): Promise<T> {
    this.killing.add(id);
    try {
      return await task();
    } finally {
      this.killing.delete(id);
    }
  }

  /** Forgets everything about a sandbox that is gone for good. */
  forget(id: string): void {
    this.deaths.delete(id);
    this.givenUp.delete(id);
    this.starts.delete(id);
  }

  /** How many times the sandbox was started again: pass it back to {@link RestartSupervisor.observe}. */
  startsOf(id: string): number | undefined {
    return this.starts.get(id);
  }

  /**
   * Takes the backend's word for a sandbox's state, unless the sandbox was started again since the
   * backend was asked (`starts`); a death no event reported is handled like one.
   */
  observe(record: SandboxRecord, state: ProviderState | undefined, starts: number | undefined): void {
    if (this.options.table.find(record.id) !== record || this.restarts.has(record.id) || this.starts.get(record.id) !== starts) return;
    // Stopped on purpose; it comes back when a call wakes it.
    if (record.hibernated) return;
    const was = record.state;
    // A sandbox the idle freezer froze is paused in the engine and running for the API; the freezer
    // alone ends that (a listing taken before a freeze or thaw must not undo it).
    if (record.frozen && (state === 'paused' || state === 'running')) return;
    // Likewise a snapshot's brief pause: a listing taken during it must not leave the sandbox `paused`.
    if (record.capturing && state === 'paused') return;
    record.frozen = false;
    record.state = toState(state);
    if (record.state === 'exited' && was !== 'exited') this.died(record);
  }

  /** Takes a backend event: a sandbox that died is started again; one removed from outside is `gone`. */
  event(handle: string, action: string): void {
    const record = this.options.table.byHandle(handle);
    if (!record) return;
    if (action === 'destroy' && !this.killing.has(record.id)) record.state = 'gone';
    // The engine says `oom` when the kernel's OOM killer ended a process of the container (the `die` that follows restarts it).
    if (action === 'oom' && !this.killing.has(record.id)) this.options.lifecycle?.report(record, 'oom-killed');
    if (action === 'die' && !record.hibernated) this.died(record);
  }

  /** True while the sandbox is being started again: a connection should retry. */
  isRestarting(id: string): boolean {
    return this.restarts.has(id);
  }

  /**
   * True unless the supervisor has given up on a stopped sandbox: while it is starting again, and
   * also in the moment before it has heard that the sandbox died (a daemon that is stopping closes
   * its connections first). A connection should then retry.
   */
  willRestart(id: string): boolean {
    const record = this.options.table.find(id);
    return record !== undefined && (this.restarts.has(id) || (!this.givenUp.has(id) && record.expiresAt.getTime() > this.options.clock.now()));
  }

  /**
   * Starts again every sandbox that stopped but still exists and has time left: what a backend
   * restart or a host reboot leaves behind. Joins the restarts already under way. Resolves once
   * each has come back or been given up.
   */
  async restartStopped(): Promise<{ restarted: string[]; failed: string[] }> {
    const states = await this.options.provider.states();
    const now = this.options.clock.now();
    const stopped = this.options.table.list().filter((r) => !r.hibernated && toState(states.get(r.containerId)) === 'exited' && r.expiresAt.getTime() > now);
    const outcomes = await Promise.all(stopped.map((record) => this.restart(record, 0).then((back) => ({ id: record.id, back }))));
    return { restarted: outcomes.filter((o) => o.back).map((o) => o.id), failed: outcomes.filter((o) => !o.back).map((o) => o.id) };
  }

  private died(record: SandboxRecord): void {
    if (this.killing.has(record.id) || this.restarts.has(record.id)) return;
    record.state = 'exited';
    record.frozen = false;
    const now = this.options.clock.now();
    const recent = (this.deaths.get(record.id) ?? []).filter((t) => now - t < RESTART_WINDOW_MS);
    this.deaths.set(record.id, [...recent, now]);
    const restarting = !(recent.length >= MAX_RESTARTS || record.expiresAt.getTime() <= now);
    this.options.lifecycle?.report(record, 'failed', { reason: 'its processes stopped', restarting });
    if (!restarting) {
      this.givenUp.add(record.id);
      return;
    }
    // A sandbox that died because the backend is stopping would be started only to be stopped
    // again: give a stopping backend a moment to show itself first.
    void this.restart(record, 2000);
  }

  /**
   * The one restart of a sandbox at a time: a second caller joins the first. It waits while the
   * backend is away (that time does not count), then tries up to {@link RESTART_ATTEMPTS} times
   * with backoff. Resolves true once the sandbox is back.
   */
  private restart(record: SandboxRecord, delayMs: number): Promise<boolean> {
    const running = this.restarts.get(record.id);
    if (running) return running;
    const { clock, provider, table } = this.options;
    const job = (async () => {
      await clock.sleep(delayMs);
      for (let attempt = 0; attempt < RESTART_ATTEMPTS && table.find(record.id) === record;) {
        if (this.away) {
          await clock.sleep(1000);
          continue;
        }
        try {
          const state = await provider.inspect(record.containerId);
          if (state === undefined) {
            record.state = 'gone';
            return false;
          }
          // Started meanwhile (by another controller, or by hand): nothing to do but use it.
          if (state !== 'running') {
            await this.slots.run(() => this.options.bringBack(record));
            this.starts.set(record.id, (this.starts.get(record.id) ?? 0) + 1);
          }
          record.state = 'running';
          this.givenUp.delete(record.id);
          this.options.onRestart?.(record.id, null);
          this.options.lifecycle?.report(record, 'ready', { restarted: true });
          return true;
        } catch (err) {
          // A backend that cannot start a stopped sandbox at all (a Kubernetes pod cannot run
          // again) will not learn to by being asked again: the sandbox stays `exited`.
          if (err instanceof CodedError && err.code === 'NOT_SUPPORTED') {
            this.options.onRestart?.(record.id, err.message);
            break;
          }
          attempt++;
          if (attempt % 5 === 0) this.options.onRestart?.(record.id, (err as Error).message);
        }
        await clock.sleep(Math.min(5000, 250 * 2 ** attempt));
      }
      this.givenUp.add(record.id);
      if (table.find(record.id) === record) this.options.lifecycle?.report(record, 'failed', { reason: 'it could not be started again', restarting: false });
      return false;
    })().finally(() => this.restarts.delete(record.id));
    this.restarts.set(record.id, job);
    return job;
  }
}
