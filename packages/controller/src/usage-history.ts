import type { SandboxMetrics } from '@warren/protocol';
import type { SandboxStats } from './provider.js';

/** What the controller keeps of each sandbox's use, and how often it samples on its own. */
export interface UsageSettings {
  /** Seconds between background samples of every running sandbox; 0 samples only when asked. */
  sampleSeconds: number;
  /** Samples kept per sandbox (the short history `GET /v1/sandboxes/:id/metrics?history=true` returns). */
  historySamples: number;
  /**
   * Prometheus series per sandbox (`warren_sandbox_*{sandbox="..."}`): `auto` serves them while
   * the controller has at most `perSandboxSeriesMax` sandboxes (bounded label cardinality), `on`
   * always, `off` never.
   */
  perSandboxSeries: 'auto' | 'on' | 'off';
  perSandboxSeriesMax: number;
}

export const DEFAULT_USAGE: UsageSettings = { sampleSeconds: 15, historySamples: 40, perSandboxSeries: 'auto', perSandboxSeriesMax: 100 };

/** A sample as taken, before the CPU share between it and the one before is known. */
export type UsageSample = SandboxStats & { sandboxId: string; time: string };

/**
 * The last samples of each sandbox's use, in memory: a ring per sandbox, so memory is bounded by
 * the number of sandboxes times {@link UsageSettings.historySamples}. Each sample gets its CPU
 * share (percent of one core) from the CPU time used since the sample before it.
 *
 * @example
 * const history = new UsageHistory(40);
 * history.add({ sandboxId: 'sb1', time: new Date().toISOString(), cpuSeconds: 1, memoryBytes: 1, pids: 1 });
 * history.list('sb1'); // [the sample]
 */
export class UsageHistory {
  private readonly rings = new Map<string, SandboxMetrics[]>();

  constructor(private readonly keep: number) {}

  /** Keeps a sample and answers it with its CPU share since the previous one (absent for the first). */
  add(sample: UsageSample): SandboxMetrics {
    const ring = this.rings.get(sample.sandboxId) ?? [];
    const previous = ring.at(-1);
    const elapsed = previous ? (Date.parse(sample.time) - Date.parse(previous.time)) / 1000 : 0;
    const cpuPercent = previous && elapsed > 0 ? Math.max(0, ((sample.cpuSeconds - previous.cpuSeconds) / elapsed) * 100) : undefined;
    const kept: SandboxMetrics = { ...sample, ...(cpuPercent === undefined ? {} : { cpuPercent: Math.round(cpuPercent * 10) / 10 }) };
    if (this.keep > 0) {
      ring.push(kept);
      if (ring.length > this.keep) ring.splice(0, ring.length - this.keep);
      this.rings.set(sample.sandboxId, ring);
    }
    return kept;
  }

  /** The kept samples of one sandbox, oldest first. */
  list(sandboxId: string): SandboxMetrics[] {
    return [...(this.rings.get(sandboxId) ?? [])];
  }

  /** The newest sample of each sandbox that has one. */
  latest(): SandboxMetrics[] {
    return [...this.rings.values()].map((ring) => ring.at(-1)).filter((sample) => sample !== undefined);
  }

  /** Drops a sandbox's samples (it is gone). */
  forget(sandboxId: string): void {
    this.rings.delete(sandboxId);
  }
}
