import { useRef, useState } from 'preact/hooks';
import { request } from './api.js';
import { ErrorBox, usePoll } from './ui.js';

interface AuditEntry {
  seq: number;
  time: string;
  method: string;
  paths: string[];
  command?: string;
  outcome: string;
  bytesIn: number;
  bytesOut: number;
  durationMs: number;
}

/** Entries kept in the page; older ones are dropped (the daemon's ring keeps its own). */
const MAX_KEPT = 2000;

/** The daemon's audit log, live (polled from the last sequence number seen) and filterable. Every field is text. */
export function AuditPanel({ id }: { id: string }) {
  const kept = useRef<AuditEntry[]>([]);
  const last = useRef(-1);
  const [filter, setFilter] = useState('');
  const [outcome, setOutcome] = useState('');
  const poll = usePoll(
    async () => {
      const since = last.current >= 0 ? `&since=${last.current}` : '';
      const page = await request<{ entries: AuditEntry[]; lastSeq: number; dropped: boolean }>('GET', `/v1/sandboxes/${id}/audit?limit=1000${since}`);
      if (page.entries.length > 0) {
        kept.current = [...kept.current, ...page.entries].slice(-MAX_KEPT);
        last.current = page.entries[page.entries.length - 1]!.seq;
      }
      return { count: kept.current.length, dropped: page.dropped };
    },
    2000,
    [id],
  );
  const needle = filter.toLowerCase();
  const shown = kept.current
    .filter(
      (e) =>
        (outcome === '' || (outcome === 'ok' ? e.outcome === 'ok' : e.outcome !== 'ok')) &&
        (!needle || [e.method, e.command ?? '', ...e.paths, e.outcome].some((t) => t.toLowerCase().includes(needle))),
    )
    .slice()
    .reverse();
  return (
    <div class="audit">
      <div class="filters" role="search">
        <label>
          Filter <input placeholder="method, path, command" value={filter} onInput={(e) => setFilter(e.currentTarget.value)} />
        </label>
        <label>
          Outcome{' '}
          <select value={outcome} onChange={(e) => setOutcome(e.currentTarget.value)}>
            <option value="">any</option>
            <option value="ok">ok</option>
            <option value="error">error</option>
          </select>
        </label>
        <span class="muted">{poll.data ? `${poll.data.count} calls, newest first, live` : ''}</span>
      </div>
      <ErrorBox error={poll.error} />
      {poll.data && shown.length === 0 ? <p class="empty">{kept.current.length === 0 ? 'No calls yet.' : 'No call matches the filter.'}</p> : null}
      {shown.length > 0 ? (
        <div class="table-wrap">
          <table class="audit-table">
            <thead>
              <tr>
                <th scope="col">#</th>
                <th scope="col">Time</th>
                <th scope="col">Method</th>
                <th scope="col">Paths / command</th>
                <th scope="col">Outcome</th>
                <th scope="col">ms</th>
              </tr>
            </thead>
            <tbody>
              {shown.slice(0, 500).map((e) => (
                <tr key={e.seq}>
                  <td data-label="#">{e.seq}</td>
                  <td data-label="Time">{new Date(e.time).toLocaleTimeString()}</td>
                  <td data-label="Method">{e.method}</td>
                  <td data-label="Paths / command" class="wrap">
                    {e.command ?? e.paths.join(', ')}
                  </td>
                  <td data-label="Outcome" class={e.outcome === 'ok' ? 'ok' : 'bad'}>
                    {e.outcome}
                  </td>
                  <td data-label="ms">{e.durationMs.toFixed(1)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
    </div>
  );
}
