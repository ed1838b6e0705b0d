import type { Metrics } from '../metrics.js';

/** One sample of the controller's own metrics, as the console's charts draw them. */
export interface HistorySample {
  /** Epoch milliseconds. */
  at: number;
  /** Sandboxes by state, summed: running and paused ones (not pool members). */
  sandboxes: number;
  /** Open client WebSocket connections. */
  connections: number;
  /** Calls relayed per second since the previous sample. */
  callsPerSecond: number;
  /** Errors answered per second since the previous sample. */
  errorsPerSecond: number;
  /** The controller process's CPU use since the previous sample, percent of one core. */
  cpuPercent: number;
  /** Its resident memory, MiB. */
  rssMb: number;
}

/**
 * A bounded in-memory history of the controller's Prometheus metrics, one sample every
 * `intervalMs` (the last hour at the defaults), for the console's controller page. Nothing is
 * stored: a restarted controller starts a new history.
 *
 * @example
 * const history = new MetricsHistory(metrics, { intervalMs: 15_000, samples: 240 });
 * history.start();
 * history.list(); // oldest first
 */
export class MetricsHistory {
  private readonly samples: HistorySample[] = [];
  private timer: NodeJS.Timeout | undefined;
  private previous: { at: number; calls: number; errors: number; cpuSeconds: number } | undefined;

  constructor(
    private readonly metrics: Metrics,
    private readonly options: { intervalMs: number; samples: number },
  ) {}

  /** Takes a sample now and then every interval; the timer never keeps the process alive. */
  start(): void {
    void this.sample();
    this.timer = setInterval(() => void this.sample(), this.options.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** The samples, oldest first, and the interval between them. */
  list(): { intervalMs: number; samples: HistorySample[] } {
    return { intervalMs: this.options.intervalMs, samples: [...this.samples] };
  }

  /** Reads the registry once and appends a sample (rates against the previous reading). */
  async sample(at = Date.now()): Promise<HistorySample> {
    const all = await this.metrics.registry.getMetricsAsJSON();
    const sum = (name: string, keep: (labels: Record<string, unknown>) => boolean = () => true) =>
      all.find((m) => m.name === name)?.values.reduce((total, v) => total + (keep(v.labels) ? Number(v.value) : 0), 0) ?? 0;
    const reading = {
      at,
      calls: sum('warren_calls_total'),
      errors: sum('warren_errors_total'),
      cpuSeconds: sum('process_cpu_seconds_total'),
    };
    const seconds = this.previous ? Math.max((at - this.previous.at) / 1000, 0.001) : 0;
    const rate = (now: number, before: number | undefined) => (seconds > 0 && before !== undefined ? Math.max(0, (now - before) / seconds) : 0);
    const sample: HistorySample = {
      at,
      sandboxes: sum('warren_sandboxes', (labels) => labels.state === 'running' || labels.state === 'paused'),
      connections: sum('warren_connections'),
      callsPerSecond: round(rate(reading.calls, this.previous?.calls)),
      errorsPerSecond: round(rate(reading.errors, this.previous?.errors)),
      cpuPercent: round(rate(reading.cpuSeconds, this.previous?.cpuSeconds) * 100),
      rssMb: round(sum('process_resident_memory_bytes') / (1024 * 1024)),
    };
    this.previous = reading;
    this.samples.push(sample);
    if (this.samples.length > this.options.samples) this.samples.splice(0, this.samples.length - this.options.samples);
    return sample;
  }
}

function round(value: number): number {
  return Math.round(value * 100) / 100;
}
