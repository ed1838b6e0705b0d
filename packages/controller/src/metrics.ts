import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

/**
 * The controller's Prometheus metrics, in a registry of their own (no process-global state, so
 * two controllers in one process, as in tests, do not collide), with prom-client's default
 * process metrics beside them (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
 * `process_open_fds`, `nodejs_eventloop_lag_seconds`, `nodejs_heap_size_used_bytes`, ...).
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

  constructor(countByState: () => Record<string, number> = () => ({})) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    this.sandboxes = new Gauge({
      name: 'warren_sandboxes',
      help: 'Sandboxes this controller knows, by state (running, paused, exited, pooled).',
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
  }
}
