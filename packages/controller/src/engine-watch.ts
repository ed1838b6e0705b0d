import type { WarmPools } from './warm-pools.js';
import type { SandboxProvider } from './provider.js';
import type { Logger } from './logger.js';
import type { RestartSupervisor } from './supervisor.js';

/** How often a lost engine is asked whether it is back. */
const PING_INTERVAL_MS = 1000;

/**
 * Follows the Docker engine for the controller. While the engine runs, a sandbox container that
 * dies is marked `exited` at once (from the engine's events, not at the next reaper tick). When
 * the engine goes away (its event stream ends, however briefly it was gone) the watch waits for
 * it to answer again, then starts the sandboxes that stopped with it and replaces the warm pool's
 * stopped members. While the engine is away the supervisor's `engineAway` is true, and until the restarts
 * are done {@link EngineWatch.recovering} is: connections to a sandbox meanwhile fail with a
 * retryable error instead of "the sandbox ended", and `/readyz` answers 503.
 *
 * @example
 * const watch = new EngineWatch(provider, supervisor, pool, logger);
 * await watch.start();
 * // ... later
 * watch.close();
 */
export class EngineWatch {
  private stopFollowing: (() => void) | undefined;
  private closed = false;
  /** True from the moment the engine was lost until the sandboxes that stopped with it are back. */
  recovering = false;
  private lostAgain = false;

  constructor(
    private readonly provider: SandboxProvider,
    private readonly supervisor: RestartSupervisor,
    private readonly pool: WarmPools | undefined,
    private readonly logger: Logger,
  ) {}

  /** Starts following the engine's events; the engine must answer now. */
  async start(): Promise<void> {
    await this.follow();
  }

  close(): void {
    this.closed = true;
    this.stopFollowing?.();
  }

  private async follow(): Promise<void> {
    this.stopFollowing = await this.provider.events(
      (handle, action) => {
        this.supervisor.event(handle, action);
        // A warm-pool member is in no sandbox table: the pool replaces it itself.
        if (action === 'die' || action === 'destroy') this.pool?.memberEnded(handle);
      },
      () => void this.recover(),
    );
  }

  /** The engine's event stream ended: wait for the engine, follow it again, restart what stopped. */
  private async recover(): Promise<void> {
    // Lost again while recovering (the new stream ended too): the running recovery goes round again.
    if (this.recovering) return void (this.lostAgain = true);
    this.recovering = true;
    const lostAt = Date.now();
    try {
      do {
        this.lostAgain = false;
        this.supervisor.setEngineAway(true);
        this.logger.warn('docker.lost');
        await this.waitForEngine();
        if (this.closed) return;
        this.supervisor.setEngineAway(false);
        this.logger.info({ afterMs: Date.now() - lostAt }, 'docker.back');
        try {
          const { restarted, failed } = await this.supervisor.restartStopped();
          await this.pool?.replaceStopped();
          this.logger.info({ restarted: restarted.length, failed, afterMs: Date.now() - lostAt }, 'sandboxes.restarted');
        } catch (err) {
          this.logger.error({ error: (err as Error).message }, 'docker.recovery-failed');
        }
      } while (this.lostAgain && !this.closed);
    } finally {
      this.recovering = false;
      this.supervisor.setEngineAway(false);
    }
  }

  /** Pings until the engine answers and serves events again. */
  private async waitForEngine(): Promise<void> {
    while (!this.closed) {
      await new Promise((r) => setTimeout(r, PING_INTERVAL_MS).unref());
      try {
        await this.provider.ping();
        await this.follow();
        return;
      } catch {
        // Still down (or up but not yet serving events): ask again.
      }
    }
  }
}
