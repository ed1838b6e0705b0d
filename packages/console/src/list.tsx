import { useEffect, useLayoutEffect, useMemo, useRef, useState } from 'preact/hooks';
import { request, type SandboxInfo, type SandboxMetrics } from './api.js';
import { bytes, duration, ErrorBox, Labels, StateBadge, usePoll } from './ui.js';

/** The states the list can be narrowed to ('' is any); the type keeps them the API's own. */
const STATES: ('' | SandboxInfo['state'])[] = ['', 'running', 'paused', 'hibernated', 'exited'];
/** Usage is fetched for at most this many running sandboxes per round (one request each). */
const MAX_USAGE = 50;

export function SandboxList() {
  const [state, setState] = useState('');
  const [label, setLabel] = useState('');
  const [text, setText] = useState('');
  const query = useMemo(() => {
    const q = new URLSearchParams();
    if (state) q.set('state', state);
    for (const l of label
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s.includes('=')))
      q.append('label', l);
    return q.toString();
  }, [state, label]);
  const started = useRef(0);
  const list = usePoll(
    async () => {
      const answer = await request<{ sandboxes: SandboxInfo[] }>('GET', `/v1/sandboxes${query ? `?${query}` : ''}`);
      started.current = performance.now();
      return answer.sandboxes;
    },
    3000,
    [query],
  );
  const running = (list.data ?? []).filter((s) => s.state === 'running').slice(0, MAX_USAGE);
  const usage = usePoll(
    async () => {
      const pairs = await Promise.all(
        running.map((s) =>
          request<SandboxMetrics>('GET', `/v1/sandboxes/${s.id}/metrics`).then(
            (m) => [s.id, m] as const,
            () => [s.id, undefined] as const,
          ),
        ),
      );
      return new Map(pairs);
    },
    10_000,
    [running.map((s) => s.id).join(',')],
  );
  const shown = (list.data ?? []).filter(
    (s) => !text || s.id.includes(text) || s.image.includes(text) || Object.entries(s.labels).some(([k, v]) => `${k}=${v}`.includes(text)),
  );
  // The time from the answer to the rendered table, measured (not asserted) by the browser test.
  useLayoutEffect(() => {
    if (started.current === 0 || !list.data) return;
    const ms = performance.now() - started.current;
    document.body.dataset.listRenderMs = ms.toFixed(1);
    document.body.dataset.listRows = String(shown.length);
    started.current = 0;
  });
  return (
    <section aria-labelledby="list-title">
      <div class="toolbar">
        <h1 id="list-title">Sandboxes</h1>
        <CreateForm onCreated={(id) => (location.hash = `#/sandboxes/${id}`)} />
      </div>
      <div class="filters" role="search">
        <label>
          State{' '}
          <select value={state} onChange={(e) => setState(e.currentTarget.value)}>
            {STATES.map((s) => (
              <option value={s} key={s}>
                {s || 'any'}
              </option>
            ))}
          </select>
        </label>
        <label>
          Labels <input placeholder="team=red,env=ci" value={label} onChange={(e) => setLabel(e.currentTarget.value)} />
        </label>
        <label>
          Find <input placeholder="id, image or label" value={text} onInput={(e) => setText(e.currentTarget.value)} />
        </label>
      </div>
      <ErrorBox error={list.error} />
      {list.data === undefined && !list.error ? <p class="muted">Loading…</p> : null}
      {list.data !== undefined && shown.length === 0 ? (
        <p class="empty">
          {list.data.length === 0 ? 'No sandboxes yet. Create one above, or with the SDK or `warren create`.' : 'No sandbox matches these filters.'}
        </p>
      ) : null}
      {shown.length > 0 ? (
        <div class="table-wrap">
          <table class="sandboxes">
            <thead>
              <tr>
                <th scope="col">Sandbox</th>
                <th scope="col">State</th>
                <th scope="col">Image</th>
                <th scope="col">Labels</th>
                <th scope="col">Age</th>
                <th scope="col">Expires in</th>
                <th scope="col">CPU</th>
                <th scope="col">Memory</th>
              </tr>
            </thead>
            <tbody>
              {shown.map((s) => (
                <Row key={s.id} sandbox={s} usage={usage.data?.get(s.id)} />
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
    </section>
  );
}

function Row({ sandbox: s, usage }: { sandbox: SandboxInfo; usage: SandboxMetrics | undefined }) {
  const now = Date.now();
  return (
    <tr data-sandbox={s.id}>
      <td data-label="Sandbox">
        <a href={`#/sandboxes/${s.id}`}>{s.id.slice(0, 12)}</a>
      </td>
      <td data-label="State">
        <StateBadge sandbox={s} />
      </td>
      <td data-label="Image">{s.image}</td>
      <td data-label="Labels">
        <Labels labels={s.labels} />
      </td>
      <td data-label="Age">{duration(now - Date.parse(s.createdAt))}</td>
      <td data-label="Expires in">{duration(Date.parse(s.expiresAt) - now)}</td>
      <td data-label="CPU">{usage?.cpuPercent !== undefined ? `${usage.cpuPercent.toFixed(1)}%` : '–'}</td>
      <td data-label="Memory">{usage ? bytes(usage.memoryBytes) : '–'}</td>
    </tr>
  );
}

function CreateForm({ onCreated }: { onCreated: (id: string) => void }) {
  const [open, setOpen] = useState(false);
  const [image, setImage] = useState('');
  const [labels, setLabels] = useState('');
  const [error, setError] = useState<unknown>(undefined);
  const [busy, setBusy] = useState(false);
  const first = useRef<HTMLInputElement>(null);
  useEffect(() => {
    if (open) first.current?.focus();
  }, [open]);
  if (!open)
    return (
      <button type="button" onClick={() => setOpen(true)}>
        New sandbox
      </button>
    );
  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const body: Record<string, unknown> = {};
      if (image.trim()) body.image = image.trim();
      const pairs = labels
        .split(',')
        .map((p) => p.trim())
        .filter(Boolean)
        .map((p) => [p.slice(0, p.indexOf('=')), p.slice(p.indexOf('=') + 1)]);
      if (pairs.length > 0) body.labels = Object.fromEntries(pairs);
      const created = await request<{ id: string }>('POST', '/v1/sandboxes', body);
      onCreated(created.id);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="create" onSubmit={(e) => void submit(e)} aria-label="New sandbox">
      <label>
        Image <input ref={first} placeholder="default image" value={image} onInput={(e) => setImage(e.currentTarget.value)} />
      </label>
      <label>
        Labels <input placeholder="team=red" value={labels} onInput={(e) => setLabels(e.currentTarget.value)} />
      </label>
      <button type="submit" disabled={busy}>
        {busy ? 'Creating…' : 'Create'}
      </button>
      <button type="button" class="secondary" onClick={() => setOpen(false)}>
        Cancel
      </button>
      <ErrorBox error={error} />
    </form>
  );
}
