import { CodedError, type CreateSandboxRequest } from '@warren/protocol';
import type { PoolSpec } from './config.js';
import type { E2bTemplates } from './e2b/templates.js';
import type { Logger } from './logger.js';
import { poolKey, REFILL_DELAY_MS, WarmPool } from './pool.js';
import type { SandboxPlan } from './sandbox-plan.js';
import type { PoolSource, SandboxService } from './sandboxes.js';

/**
 * The controller's warm pools, one per template (image, env and settings; see {@link poolKey}): the
 * default one of `poolSize`, and one per entry of `pools`, E2B templates included. A create takes a
 * member of the pool whose template it matches; entries whose templates plan alike are one pool of
 * their sizes summed.
 *
 * @example
 * const pools = WarmPools.fromConfig(sandboxes, { poolSize: 2, pools: [{ e2bTemplate: 'base', size: 2 }], e2bTemplates }, logger);
 * pools?.fill();
 */
export class WarmPools implements PoolSource {
  constructor(readonly pools: readonly WarmPool[]) {}

  /**
   * The pools a configuration asks for, or undefined when it asks for none. An `e2bTemplate` that
   * `e2bTemplates` does not name, or a create the controller would refuse, stops the start with
   * INVALID_PARAMS saying which pool.
   */
  static fromConfig(
    sandboxes: SandboxService,
    config: { poolSize: number; pools?: readonly PoolSpec[] | undefined; e2bTemplates: E2bTemplates },
    logger: Logger,
    refillDelayMs = REFILL_DELAY_MS,
  ): WarmPools | undefined {
    const sized = new Map<string, { plan: SandboxPlan; size: number }>();
    const add = (plan: SandboxPlan, size: number) => {
      if (size === 0) return;
      const key = poolKey(plan);
      sized.set(key, { plan, size: size + (sized.get(key)?.size ?? 0) });
    };
    add(sandboxes.plan({}), config.poolSize);
    for (const [index, spec] of (config.pools ?? []).entries()) {
      const where = `pools[${index}]`;
      let request: CreateSandboxRequest = spec.create ?? {};
      if (spec.e2bTemplate !== undefined) {
        if (!Object.hasOwn(config.e2bTemplates, spec.e2bTemplate))
          throw new CodedError(
            'INVALID_PARAMS',
            `${where} names the E2B template '${spec.e2bTemplate}', which e2bTemplates does not have (it has: ${Object.keys(config.e2bTemplates).join(', ')}).`,
          );
        request = config.e2bTemplates[spec.e2bTemplate]!.create ?? {};
      }
      try {
        add(sandboxes.plan(request), spec.size);
      } catch (err) {
        const message = err instanceof Error ? err.message : String(err);
        throw new CodedError('INVALID_PARAMS', `${where}: the controller would refuse its create: ${message}`);
      }
    }
    if (sized.size === 0) return undefined;
    return new WarmPools([...sized.values()].map(({ plan, size }) => new WarmPool(sandboxes, size, logger, refillDelayMs, plan)));
  }

  /** Ready members across the pools. */
  get readyCount(): number {
    return this.pools.reduce((sum, pool) => sum + pool.readyCount, 0);
  }

  /** A ready member of the pool whose template the plan matches, if it has one. */
  take(plan: SandboxPlan): ReturnType<WarmPool['take']> {
    return this.pools.find((pool) => pool.matches(plan))?.take(plan);
  }

  matches(plan: SandboxPlan): boolean {
    return this.pools.some((pool) => pool.matches(plan));
  }

  /** Starts filling every pool in the background. */
  fill(): void {
    for (const pool of this.pools) pool.fill();
  }

  /** See {@link WarmPool.replaceStopped}, for each pool. */
  async replaceStopped(): Promise<void> {
    await Promise.all(this.pools.map((pool) => pool.replaceStopped()));
  }

  /** See {@link WarmPool.memberEnded}: the pool that has the member drops and replaces it. */
  memberEnded(handle: string): void {
    for (const pool of this.pools) pool.memberEnded(handle);
  }

  async close(): Promise<void> {
    await Promise.all(this.pools.map((pool) => pool.close()));
  }
}
