import { describe, expect, it } from '@jest/globals';
import type { SandboxMetrics } from '@warren/protocol';
import { Metrics } from '../src/metrics.js';

const SAMPLE = { sandboxId: 'sb1', cpuSeconds: 12.5, memoryBytes: 1024, pids: 3 } as SandboxMetrics;

/** A controller's metrics with one per-sandbox sample, so the per-sandbox series exist too. */
function metricsWithASample(): Metrics {
  const metrics = new Metrics(() => ({ running: 1 }));
  metrics.sandboxSamples = () => [SAMPLE];
  metrics.tenantOf = () => 'acme';
  return metrics;
}

describe('metric names', () => {
  it('end in _total for every counter and for no gauge or histogram, as Prometheus names them', async () => {
    const all = await metricsWithASample().registry.getMetricsAsJSON();
    const wrong = all
      .filter((m) => (String(m.type) === 'counter') !== m.name.endsWith('_total'))
      .map((m) => `${m.name} (${m.type})`)
      // prom-client's default process metrics are its own; only Warren's are checked.
      .filter((name) => name.startsWith('warren_'));
    expect(wrong).toEqual([]);
    expect(all.filter((m) => m.name.startsWith('warren_')).length).toBeGreaterThan(10);
  });

  it("serves a sandbox's CPU time as the counter warren_sandbox_cpu_seconds_total", async () => {
    const text = await metricsWithASample().registry.metrics();
    expect(text).toMatch(/^# TYPE warren_sandbox_cpu_seconds_total counter$/m);
    expect(text).toContain('warren_sandbox_cpu_seconds_total{sandbox="sb1",tenant="acme"} 12.5');
    expect(text).toContain('warren_sandbox_memory_bytes{sandbox="sb1",tenant="acme"} 1024');
    expect(text).not.toMatch(/^warren_sandbox_cpu_seconds\{/m);
  });
});
