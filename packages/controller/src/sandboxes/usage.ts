import { CodedError, type SandboxMetrics } from '@warren/protocol';
import type { UsageHistory } from '../usage-history.js';
import { requireCapability } from '../provider.js';
import type { SandboxParts } from './parts.js';

/**
 * What sandboxes use: one sample of a sandbox from the backend on request, and the background
 * sampler's round over every running sandbox, both kept in the short {@link UsageHistory}.
 *
 * @example
 * const usage = new SandboxUsage(parts, history);
 * const sample = await usage.sample(id);
 */
export class SandboxUsage {
  constructor(
    private readonly parts: Pick<SandboxParts, 'provider' | 'table'>,
    readonly history: UsageHistory,
  ) {}

  /**
   * One sample of what a sandbox uses, from the backend (cgroup counters the engine reads, the
   * workspace disk), with its CPU share since the previous sample taken here, kept in the sandbox's
   * short history. SANDBOX_NOT_READY when it is not running.
   */
  async sample(id: string): Promise<SandboxMetrics> {
    const record = this.parts.table.require(id);
    const stats = await requireCapability(this.parts.provider, 'metrics', 'measure a sandbox').stats(record.containerId, record.agentId);
    if (!stats)
      throw new CodedError('SANDBOX_NOT_READY', `Sandbox '${id}' is not running, so it uses nothing to measure; resume or restart it first.`, {
        sandboxId: id,
      });
    // The throttling counter is the idle freezer's, not part of the usage answer.
    const { cpuThrottledPeriods: _throttled, ...measured } = stats;
    return this.history.add({ sandboxId: id, time: new Date().toISOString(), ...measured });
  }

  /**
   * Samples every running sandbox, a few at a time (the background sampler of `usage.sampleSeconds`);
   * a sandbox that stops or goes away meanwhile is skipped.
   */
  async sampleAll(concurrency = 4): Promise<void> {
    const { table } = this.parts;
    for (const sample of this.history.latest()) if (!table.has(sample.sandboxId)) this.history.forget(sample.sandboxId);
    const running = table.list().filter((record) => record.state === 'running' && !record.pooled);
    const next = async (): Promise<void> => {
      for (let record = running.shift(); record; record = running.shift()) await this.sample(record.id).catch(() => undefined);
    };
    await Promise.all(Array.from({ length: concurrency }, next));
  }
}
