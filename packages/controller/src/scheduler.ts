import type { Logger } from './logger.js';

/** One periodic job: what {@link Scheduler.every} was given, and whether a round runs now. */
interface Job {
  readonly name: string;
  readonly timer: NodeJS.Timeout;
  running: boolean;
}

/**
 * The controller's periodic jobs (the reaper's round, the idle freezer, the usage sampler, the
 * follower of shared egress), each under a name. A round never overlaps the one before: a tick
 * that finds the previous round still running is skipped. A round's failure is logged as
 * `<name>.failed` and the job keeps its interval. Timers are unref'd, so jobs never keep the process
 * alive; {@link Scheduler.close} stops them all.
 *
 * @example
 * const scheduler = new Scheduler(logger);
 * scheduler.every('reaper', config.reapIntervalMs, () => sandboxes.reapExpired());
 * // on shutdown:
 * scheduler.close();
 */
export class Scheduler {
  private readonly jobs: Job[] = [];
  private closed = false;

  constructor(private readonly logger: Pick<Logger, 'error'>) {}

  /** Runs `round` every `intervalMs` from now on (the first round after one interval). */
  every(name: string, intervalMs: number, round: () => unknown): void {
    if (this.closed) return;
    if (this.jobs.some((job) => job.name === name)) throw new Error(`A job named '${name}' is already scheduled.`);
    const job: Job = {
      name,
      running: false,
      timer: setInterval(() => void this.tick(job, round), intervalMs),
    };
    job.timer.unref();
    this.jobs.push(job);
  }

  /** The names of the scheduled jobs, in the order they were scheduled. */
  get names(): string[] {
    return this.jobs.map((job) => job.name);
  }

  /** Stops every job; a round under way runs to its end, and no further one starts. */
  close(): void {
    this.closed = true;
    for (const job of this.jobs.splice(0)) clearInterval(job.timer);
  }

  private async tick(job: Job, round: () => unknown): Promise<void> {
    if (job.running) return;
    job.running = true;
    try {
      await round();
    } catch (err) {
      this.logger.error({ error: String(err) }, `${job.name}.failed`);
    } finally {
      job.running = false;
    }
  }
}
