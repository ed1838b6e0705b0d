import type { HistorySample as Sample } from '../../controller/src/console/history.js';
import { consoleApi, request } from './api.js';
import { ErrorBox, usePoll } from './ui.js';

interface Summary {
  provider: string;
  defaultImage: string;
  limits: Record<string, number>;
  maxLimits: Record<string, number>;
  caps: Record<string, number>;
  pool: { size: number; ready: number };
  sandboxes: Record<string, number>;
  history: { intervalMs: number; samples: Sample[] };
}

const CHARTS: [keyof Sample, string][] = [
  ['sandboxes', 'Sandboxes'],
  ['connections', 'Connections'],
  ['callsPerSecond', 'Calls / s'],
  ['errorsPerSecond', 'Errors / s'],
  ['cpuPercent', 'Controller CPU %'],
  ['rssMb', 'Controller memory MiB'],
];

export function ControllerPage() {
  const health = usePoll(() => request<{ status: string }>('GET', '/healthz'), 10_000);
  const ready = usePoll(() => request<Record<string, unknown>>('GET', '/readyz'), 10_000);
  const summary = usePoll(() => consoleApi<Summary>('controller'), 15_000);
  const s = summary.data;
  const isolation = ready.data?.isolation as Record<string, unknown> | undefined;
  return (
    <section aria-labelledby="controller-title">
      <h1 id="controller-title">Controller</h1>
      <div class="cards">
        <div class="card">
          <h2>Health</h2>
          <p class={health.data?.status === 'ok' ? 'ok' : 'bad'}>{health.data?.status ?? (health.error ? 'not answering' : '…')}</p>
          <p class={ready.data ? 'ok' : 'bad'}>{ready.data ? 'ready' : ready.error ? `not ready: ${(ready.error as Error).message}` : '…'}</p>
        </div>
        <div class="card">
          <h2>Engine</h2>
          <dl class="facts">
            <dt>Provider</dt>
            <dd>{s?.provider ?? '…'}</dd>
            <dt>Default image</dt>
            <dd>{s?.defaultImage ?? '…'}</dd>
            {isolation
              ? Object.entries(isolation)
                  .filter(([, v]) => typeof v !== 'object')
                  .map(([k, v]) => [<dt key={`k${k}`}>{k}</dt>, <dd key={`v${k}`}>{String(v)}</dd>])
              : null}
          </dl>
        </div>
        <div class="card">
          <h2>Sandboxes and pool</h2>
          <dl class="facts">
            {s ? Object.entries(s.sandboxes).map(([k, v]) => [<dt key={`k${k}`}>{k}</dt>, <dd key={`v${k}`}>{v}</dd>]) : null}
            <dt>Pool</dt>
            <dd>{s ? `${s.pool.ready} ready of ${s.pool.size}` : '…'}</dd>
            {s ? Object.entries(s.caps).map(([k, v]) => [<dt key={`k${k}`}>{k}</dt>, <dd key={`v${k}`}>{v}</dd>]) : null}
          </dl>
        </div>
        <div class="card">
          <h2>Limits (default / most)</h2>
          <dl class="facts">
            {s ? Object.entries(s.limits).map(([k, v]) => [<dt key={`k${k}`}>{k}</dt>, <dd key={`v${k}`}>{`${v} / ${s.maxLimits[k] ?? '–'}`}</dd>]) : null}
          </dl>
        </div>
      </div>
      <ErrorBox error={summary.error} />
      <h2>Last hour</h2>
      {s && s.history.samples.length < 2 ? (
        <p class="empty">The history fills in as the controller runs (a sample every {s.history.intervalMs / 1000} s).</p>
      ) : null}
      <div class="charts">
        {s && s.history.samples.length >= 2 ? CHARTS.map(([key, title]) => <Chart key={key} title={title} samples={s.history.samples} field={key} />) : null}
      </div>
    </section>
  );
}

/** A small line chart as SVG, drawn from numbers only. */
function Chart({ title, samples, field }: { title: string; samples: Sample[]; field: keyof Sample }) {
  const values = samples.map((x) => Number(x[field]));
  const times = samples.map((x) => x.at);
  const max = Math.max(1, ...values);
  const t0 = times[0]!;
  const span = Math.max(1, times[times.length - 1]! - t0);
  const points = values.map((v, i) => `${(((times[i]! - t0) / span) * 300).toFixed(1)},${(60 - (v / max) * 56).toFixed(1)}`).join(' ');
  const latest = values[values.length - 1]!;
  return (
    <figure class="chart">
      <figcaption>
        {title}: <strong>{latest}</strong> <span class="muted">(max {max})</span>
      </figcaption>
      <svg viewBox="0 0 300 62" role="img" aria-label={`${title} over the last hour, now ${latest}`}>
        <polyline points={points} fill="none" stroke="currentColor" stroke-width="1.5" />
      </svg>
    </figure>
  );
}
