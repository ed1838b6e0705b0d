import type { SandboxSettings } from '@warren/protocol';
import type { SandboxPlan } from './sandbox-plan.js';
import type { Logger } from './logger.js';
import { newId, type PoolSource, type SandboxService } from './sandboxes.js';

/**
 * How long after a claim the pool starts refilling (see {@link WarmPool}'s `refillDelayMs`): about
 * what the claimed sandbox's create answer and first connection take on a quiet host, small next to
 * a refill's cold start (a quarter of a second or more).
 */
export const REFILL_DELAY_MS = 30;

/** One started sandbox whose daemon has answered, waiting to be claimed. */
interface PoolMember {
  agentId: string;
  containerId: string;
  image: string;
  settings: SandboxSettings;
}

/**
 * What a pool's members are interchangeable by: the image, the env and the settings a container
 * fixes (not the ttl, which is the claim's). Two plans with one key are served by one pool.
 *
 * @example
 * poolKey(sandboxes.plan({})) === poolKey(sandboxes.plan({ ttlSeconds: 60 })); // true
 */
export function poolKey(plan: SandboxPlan): string {
  const { ttlSeconds: _ttl, ...settings } = plan.settings;
  return JSON.stringify([plan.image, plan.env, settings]);
}

/**
 * One warm pool: `size` started sandboxes of one template (the default image and settings unless
 * given another plan), each ready (its daemon answered `system.info`). A create whose plan matches
 * takes one: the sandbox gets a fresh
 * public id and token, while the container keeps the id it was made with (labels and names cannot
 * change), which keys its socket folder and daemon secret; the mapping is the sandbox's state file.
 * The pool refills in the background, one container at a time, starting shortly after a claim so
 * the refill does not compete with the claimed sandbox's first connection; each member's daemon is
 * warmed for its first client before it is offered (see {@link SandboxService.warmPoolMember}).
 *
 * @example
 * const sandboxes = new SandboxService({ provider, credentials, config, pool: (service) => new WarmPool(service, 2, logger) });
 * (sandboxes.pool as WarmPool).fill();
 */
export class WarmPool implements PoolSource {
  private readonly ready: PoolMember[] = [];
  private filling = false;
  /** The fill under way, which {@link WarmPool.close} waits for: a member it is starting is removed, not left behind. */
  private fillRun: Promise<void> | undefined;
  /** Ends a fill's backoff early (on close). */
  private endBackoff: (() => void) | undefined;
  private closed = false;
  private readonly template: SandboxPlan;
  /** The template's {@link poolKey}: a plan with the same key takes this pool's members. */
  readonly key: string;
  private failures = 0;
  /** Whether the template's image was found on the engine (or pulled) once. */
  private imageReady = false;
  private refillTimer: NodeJS.Timeout | undefined;

  /**
   * @param refillDelayMs how long after a claim the refill starts: a refill's first steps (the
   *   workspace disk's `mkfs` and `mount`, spawned synchronously, and the engine calls) hold the
   *   controller's event loop and the host's cores for milliseconds, which would otherwise land in
   *   the middle of the claimed sandbox's create answer and first connection.
   * @param template the planned create its members are made from; the default create (a request
   *   that asks for nothing) when absent.
   */
  constructor(
    private readonly sandboxes: SandboxService,
    readonly size: number,
    private readonly logger: Logger,
    private readonly refillDelayMs = REFILL_DELAY_MS,
    template?: SandboxPlan,
  ) {
    this.template = template ?? sandboxes.plan({});
    this.key = poolKey(this.template);
  }

  /** The image its members run. */
  get image(): string {
    return this.template.image;
  }

  /** How many ready members wait. */
  get readyCount(): number {
    return this.ready.length;
  }

  /**
   * Hands over a ready member when the plan is the template in everything the container fixes:
   * image, env, resources, network, runtime, user, workdir, mounts. Labels, ttl and the file policy
   * are the sandbox's own and do not need a new container.
   */
  take(plan: SandboxPlan): PoolMember | undefined {
    if (!this.matches(plan)) return undefined;
    const member = this.ready.shift();
    if (member) this.refillSoon();
    return member;
  }

  matches(plan: SandboxPlan): boolean {
    return poolKey(plan) === this.key;
  }

  /** Starts filling after {@link refillDelayMs}; claims in a burst share one timer. */
  private refillSoon(): void {
    if (this.refillTimer || this.closed) return;
    this.refillTimer = setTimeout(() => {
      this.refillTimer = undefined;
      this.fill();
    }, this.refillDelayMs);
    this.refillTimer.unref();
  }

  /** Starts filling up to `size` in the background; safe to call often. */
  fill(): void {
    if (this.filling || this.closed) return;
    this.filling = true;
    this.fillRun = this.fillLoop().finally(() => {
      this.filling = false;
      this.fillRun = undefined;
    });
  }

  private async fillLoop(): Promise<void> {
    while (!this.closed && this.ready.length < this.size) {
      const agentId = newId();
      const createdAt = new Date();
      // The label's expiry only matters to other controllers sweeping orphans: the pool's own
      // expiry is the claim's, in the state file.
      const expiresAt = new Date(createdAt.getTime() + this.sandboxes.config.maxLimits.ttlSeconds * 1000);
      try {
        // A template's image may not be on the engine yet (pulled where the image settings allow).
        if (!this.imageReady || this.failures > 0) await this.sandboxes.images.ensure(this.template.image);
        this.imageReady = true;
        const containerId = await this.sandboxes.startContainer(agentId, this.template, { createdAt, expiresAt }, true);
        if (this.closed) {
          await this.sandboxes.removePoolMember(agentId, containerId);
          return;
        }
        await this.sandboxes.warmPoolMember(agentId, this.template);
        if (this.closed) {
          await this.sandboxes.removePoolMember(agentId, containerId);
          return;
        }
        this.ready.push({ agentId, containerId, image: this.template.image, settings: this.template.settings });
        this.failures = 0;
      } catch (err) {
        this.failures++;
        this.logger.warn({ error: (err as Error).message, failures: this.failures, image: this.template.image }, 'pool.fill-failed');
        // Back off so a broken image does not spin the engine; the next take() or tick retries.
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, Math.min(30_000, 500 * 2 ** this.failures));
          timer.unref();
          this.endBackoff = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        this.endBackoff = undefined;
      }
    }
  }

  /** Removes the members whose containers stopped (with an engine restart) and refills the pool. */
  async replaceStopped(): Promise<void> {
    const states = await this.sandboxes.provider.states();
    const stopped = this.ready.filter((m) => states.get(m.containerId) !== 'running');
    for (const member of stopped) this.ready.splice(this.ready.indexOf(member), 1);
    await Promise.all(stopped.map((m) => this.sandboxes.removePoolMember(m.agentId, m.containerId)));
    this.failures = 0;
    this.fill();
  }

  /**
   * A member whose container died or was removed (its node went away, someone deleted it): it is
   * dropped, removed, and replaced. Handles of no member are ignored.
   */
  memberEnded(handle: string): void {
    const index = this.ready.findIndex((m) => m.containerId === handle);
    if (index < 0) return;
    const [member] = this.ready.splice(index, 1);
    this.logger.warn({ sandboxId: member!.agentId }, 'pool.member-ended');
    void this.sandboxes.removePoolMember(member!.agentId, member!.containerId).catch(() => undefined);
    this.fill();
  }

  /**
   * Removes the unclaimed members (a restarted controller would remove them anyway), and waits for
   * a fill under way, which removes the member it was starting, so none is left half made (its
   * workspace disk still mounted) when the controller exits.
   */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.refillTimer);
    this.endBackoff?.();
    const members = this.ready.splice(0);
    await Promise.all([...members.map((m) => this.sandboxes.removePoolMember(m.agentId, m.containerId)), this.fillRun]);
  }
}
