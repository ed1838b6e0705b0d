/** How long the daemon waits without a client frame before its one full collection. */
export const IDLE_GC_AFTER_MS = 1500;

/** Options of {@link IdleCollector}. */
export interface IdleCollectorOptions {
  /** Quiet time before collecting. */
  idleMs?: number;
  /** The full collection: `globalThis.gc` where Node runs with `--expose-gc`; absent, nothing is collected. */
  collect?: (() => void) | undefined;
  /** Injected timers for unit tests. */
  setTimer?: (fn: () => void, ms: number) => { refresh(): unknown; unref?(): unknown };
}

/**
 * One full garbage collection once the daemon has gone quiet. V8 collects when allocation asks
 * for it, never because a process went idle: after a burst of calls (file pieces, command output)
 * an idle daemon would keep the dead buffers and the grown young generation of that burst, in
 * every sandbox, for as long as nothing else arrives. Collecting once per quiet period gives those
 * pages back (what an idle sandbox costs is what density is made of). Each client frame counts as
 * activity ({@link IdleCollector.activity}, a timer refresh); the collection runs once per quiet
 * period, never while frames keep arriving, and costs a few milliseconds of one core.
 *
 * @example
 * const idle = new IdleCollector({ collect: globalThis.gc });
 * ws.on('message', () => idle.activity());
 */
export class IdleCollector {
  private timer: { refresh(): unknown } | undefined;
  private armed = false;
  private readonly idleMs: number;
  private readonly collect: (() => void) | undefined;
  private readonly setTimer: NonNullable<IdleCollectorOptions['setTimer']>;

  constructor(options: IdleCollectorOptions = {}) {
    this.idleMs = options.idleMs ?? IDLE_GC_AFTER_MS;
    this.collect = options.collect;
    this.setTimer = options.setTimer ?? ((fn, ms) => setTimeout(fn, ms));
  }

  /** True when a collection can run (Node exposes `gc`). */
  get enabled(): boolean {
    return this.collect !== undefined;
  }

  /** Marks activity: the collection waits for `idleMs` without any. */
  activity(): void {
    if (!this.collect) return;
    this.armed = true;
    if (this.timer) {
      this.timer.refresh();
      return;
    }
    const timer = this.setTimer(() => this.fire(), this.idleMs);
    timer.unref?.();
    this.timer = timer;
  }

  private fire(): void {
    // A refreshed timer that fires again after the collection (no activity since) does nothing.
    if (!this.armed) return;
    this.armed = false;
    this.collect?.();
  }
}

/** The daemon's collector: enabled when Node exposes `gc` (the controller starts it with `--expose-gc`). */
export const idleCollector = new IdleCollector({ collect: (globalThis as { gc?: () => void }).gc });
