import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { SandboxMetrics } from '@warren/protocol';

/**
 * The controller's Prometheus metrics, in a registry of their own (no process-global state, so
 * two controllers in one process, as in tests, do not collide), with prom-client's default
 * process metrics beside them (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
 * `process_open_fds`, `nodejs_eventloop_lag_seconds`, `nodejs_heap_size_used_bytes`, ...).
 * As Prometheus names them, every counter ends in `_total` and no gauge or histogram does
 * (test/metrics.test.ts checks it).
 *
 * @example
 * const metrics = new Metrics();
 * metrics.callStarted('fs.read')(); // observe one call's latency
 * res.end(await metrics.registry.metrics());
 */
export class Metrics {
  readonly registry = new Registry();
  readonly sandboxes: Gauge<'state'>;
  readonly creates: Counter<'source' | 'outcome'>;
  readonly createSeconds: Histogram<'source'>;
  readonly calls: Counter<'method' | 'outcome'>;
  readonly callSeconds: Histogram<'method'>;
  readonly errors: Counter<'code' | 'source'>;
  readonly connections: Gauge;
  /** Egress gateway attempts, by how they arrived, the decision and the closed reason code (never the host: unbounded). */
  readonly egress: Counter<'kind' | 'decision' | 'reason'>;
  readonly egressBytes: Counter<'direction'>;
  /** Tunnels to sandbox ports, by whether they opened a daemon connection or reused an idle one (ports/tunnel.ts). */
  readonly portTunnels: Counter<'connection'>;
  /** Idle sandboxes frozen (idle-freezer.ts). */
  readonly freezes: Counter;
  /** Seconds from a call or connection that found its sandbox frozen to the sandbox running again. */
  readonly thawSeconds: Histogram;

  constructor(countByState: () => Record<string, number> = () => ({})) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    this.sandboxes = new Gauge({
      name: 'warren_sandboxes',
      help: 'Sandboxes this controller knows, by state (running, paused, exited, pooled; frozen counts running sandboxes frozen for being idle).',
      labelNames: ['state'],
      registers,
      collect() {
        this.reset();
        for (const [state, count] of Object.entries(countByState())) this.set({ state }, count);
      },
    });
    this.creates = new Counter({
      name: 'warren_sandbox_creates_total',
      help: 'Sandbox creates, by source (cold, pool) and outcome (ok, error).',
      labelNames: ['source', 'outcome'],
      registers,
    });
    this.createSeconds = new Histogram({
      name: 'warren_sandbox_create_seconds',
      help: 'Seconds from a create request to the daemon answering, by source.',
      labelNames: ['source'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
      registers,
    });
    this.calls = new Counter({
      name: 'warren_calls_total',
      help: 'Calls relayed to sandbox daemons, by method and outcome (ok, error, refused).',
      labelNames: ['method', 'outcome'],
      registers,
    });
    this.callSeconds = new Histogram({
      name: 'warren_call_seconds',
      help: 'Seconds from a call frame to its final answer, by method, as seen by the controller.',
      labelNames: ['method'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30],
      registers,
    });
    this.errors = new Counter({
      name: 'warren_errors_total',
      help: 'Errors answered, by wire code and source (rest, call).',
      labelNames: ['code', 'source'],
      registers,
    });
    this.connections = new Gauge({ name: 'warren_connections', help: 'Open client WebSocket connections.', registers });
    this.egress = new Counter({
      name: 'warren_egress_attempts_total',
      help: 'Connection attempts through the egress gateway, by kind (http, connect, sni, dns), decision (allowed, denied) and reason code.',
      labelNames: ['kind', 'decision', 'reason'],
      registers,
    });
    this.egressBytes = new Counter({
      name: 'warren_egress_bytes_total',
      help: 'Bytes carried by the egress gateway, by direction (out: sandbox to upstream, in: back).',
      labelNames: ['direction'],
      registers,
    });
    this.portTunnels = new Counter({
      name: 'warren_port_tunnels_total',
      help: 'Tunnels opened to sandbox ports, by daemon connection (new, reused: an idle one kept from an earlier tunnel).',
      labelNames: ['connection'],
      registers,
    });
    this.freezes = new Counter({
      name: 'warren_sandbox_freezes_total',
      help: 'Sandboxes frozen for being idle (freezeAfterIdleSeconds).',
      registers,
    });
    this.thawSeconds = new Histogram({
      name: 'warren_sandbox_thaw_seconds',
      help: 'Seconds to thaw a sandbox frozen for being idle, from the call or connection that found it frozen to its processes running again.',
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5],
      registers,
    });
    // Per-sandbox series, from the newest sample of each sandbox (usage-history.ts); the controller
    // sets `sandboxSamples` to nothing when there are too many sandboxes for bounded cardinality.
    const perSandbox = (name: string, help: string, value: (sample: SandboxMetrics) => number | undefined) =>
      new Gauge({
        name,
        help,
        labelNames: ['sandbox', 'tenant'],
        registers,
        collect: () => {
          const gauge = this.registry.getSingleMetric(name) as Gauge<'sandbox' | 'tenant'>;
          gauge.reset();
          for (const sample of this.sandboxSamples()) {
            const v = value(sample);
            if (v !== undefined) gauge.set({ sandbox: sample.sandboxId, tenant: this.tenantOf(sample.sandboxId) ?? '' }, v);
          }
        },
      });
    new Gauge({
      name: 'warren_tenant_sandboxes',
      help: 'Sandboxes this controller knows, by tenant and state (docs/tenancy.md).',
      labelNames: ['tenant', 'state'],
      registers,
      collect: () => {
        const gauge = this.registry.getSingleMetric('warren_tenant_sandboxes') as Gauge<'tenant' | 'state'>;
        gauge.reset();
        for (const [tenant, states] of Object.entries(this.tenantCounts()))
          for (const [state, count] of Object.entries(states)) gauge.set({ tenant, state }, count);
      },
    });
    // CPU time only grows while a sandbox lives, so it is a counter (`rate()` works on it, and the
    // name ends in `_total` as Prometheus names counters); the other per-sandbox series are gauges.
    new Counter({
      name: 'warren_sandbox_cpu_seconds_total',
      help: "CPU time a sandbox has used since it started, at the controller's last sample.",
      labelNames: ['sandbox', 'tenant'],
      registers,
      collect: () => {
        const counter = this.registry.getSingleMetric('warren_sandbox_cpu_seconds_total') as Counter<'sandbox' | 'tenant'>;
        counter.reset();
        for (const sample of this.sandboxSamples())
          counter.inc({ sandbox: sample.sandboxId, tenant: this.tenantOf(sample.sandboxId) ?? '' }, sample.cpuSeconds);
      },
    });
    perSandbox('warren_sandbox_memory_bytes', "Memory a sandbox uses (without droppable page cache), at the controller's last sample.", (s) => s.memoryBytes);
    perSandbox('warren_sandbox_pids', "Processes in a sandbox, at the controller's last sample.", (s) => s.pids);
    perSandbox('warren_sandbox_disk_used_bytes', "Bytes used on a sandbox's workspace disk, at the controller's last sample.", (s) => s.disk?.usedBytes);
  }

  /**
   * The samples the `warren_sandbox_*` series show, one per sandbox; empty unless the controller
   * turns the series on (`usage.perSandboxSeries`).
   */
  sandboxSamples: () => SandboxMetrics[] = () => [];

  /** The tenant of a sandbox, for the per-sandbox series' `tenant` label. */
  tenantOf: (sandboxId: string) => string | undefined = () => undefined;

  /** Sandboxes by tenant and state, for `warren_tenant_sandboxes`. */
  tenantCounts: () => Record<string, Record<string, number>> = () => ({});
}
