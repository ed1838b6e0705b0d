import { useEffect, useState } from 'preact/hooks';
import { request, type SandboxInfo, type SnapshotInfo } from './api.js';
import { AuditPanel } from './audit.js';
import { FilesPanel } from './files.js';
import { ProcessesPanel } from './processes.js';
import { TerminalPanel } from './terminal.js';
import { bytes, duration, ErrorBox, Labels, StateBadge, usePoll } from './ui.js';
import { Wire } from './wire.js';

const TABS = ['Terminal', 'Files', 'Audit', 'Processes'] as const;
type Tab = (typeof TABS)[number];

export function SandboxPage({ id }: { id: string }) {
  const info = usePoll(() => request<SandboxInfo>('GET', `/v1/sandboxes/${id}`), 3000, [id]);
  const [tab, setTab] = useState<Tab>('Terminal');
  const [wire, setWire] = useState<Wire | undefined>(undefined);
  const [wireError, setWireError] = useState<unknown>(undefined);
  const state = info.data?.state;
  // One connection per page while the sandbox runs; reopened after a resume.
  useEffect(() => {
    if (state !== 'running') return;
    let current: Wire | undefined;
    let stopped = false;
    Wire.open(id).then(
      (w) => {
        if (stopped) return w.close();
        current = w;
        setWire(w);
        setWireError(undefined);
        w.onClose((reason) => {
          if (!stopped) {
            setWire(undefined);
            setWireError(new Error(`The connection to the sandbox ended: ${reason}.`));
          }
        });
      },
      (err: unknown) => setWireError(err),
    );
    return () => {
      stopped = true;
      current?.close();
      setWire(undefined);
    };
  }, [id, state]);

  if (info.error && !info.data)
    return (
      <section>
        <h1>Sandbox {id.slice(0, 12)}</h1>
        <ErrorBox error={info.error} />
        <a href="#/">Back to the list</a>
      </section>
    );
  if (!info.data) return <p class="muted">Loading…</p>;
  const s = info.data;
  return (
    <section aria-labelledby="sandbox-title">
      <div class="toolbar">
        <h1 id="sandbox-title">
          Sandbox <code>{s.id}</code>
        </h1>
        <StateBadge sandbox={s} />
      </div>
      <dl class="facts">
        <dt>Image</dt>
        <dd>{s.image}</dd>
        <dt>Labels</dt>
        <dd>
          <Labels labels={s.labels} />
        </dd>
        <dt>Created</dt>
        <dd>{duration(Date.now() - Date.parse(s.createdAt))} ago</dd>
        <dt>Expires</dt>
        <dd>in {duration(Date.parse(s.expiresAt) - Date.now())}</dd>
      </dl>
      <Actions sandbox={s} onChange={info.refresh} />
      <ErrorBox error={info.error} />
      <div role="tablist" aria-label="Sandbox views" class="tabs">
        {TABS.map((t) => (
          <button type="button" role="tab" key={t} id={`tab-${t}`} aria-selected={tab === t} aria-controls={`panel-${t}`} onClick={() => setTab(t)}>
            {t}
          </button>
        ))}
      </div>
      <div role="tabpanel" id={`panel-${tab}`} aria-labelledby={`tab-${tab}`} class="panel">
        {tab === 'Audit' ? (
          <AuditPanel id={id} />
        ) : s.state !== 'running' ? (
          <p class="empty">
            The sandbox is {s.state}; {NOT_RUNNING[s.state] ?? 'it has no daemon to talk to.'}
          </p>
        ) : !wire ? (
          wireError ? (
            <ErrorBox error={wireError} />
          ) : (
            <p class="muted">Connecting…</p>
          )
        ) : tab === 'Terminal' ? (
          <TerminalPanel wire={wire} />
        ) : tab === 'Files' ? (
          <FilesPanel wire={wire} />
        ) : (
          <ProcessesPanel wire={wire} />
        )}
      </div>
    </section>
  );
}

const NOT_RUNNING: Partial<Record<SandboxInfo['state'], string>> = {
  paused: 'resume it to use its terminal, files and processes.',
  hibernated: 'its files are kept and its processes stopped. Wake it to use its terminal, files and processes (they start anew).',
};

function Actions({ sandbox: s, onChange }: { sandbox: SandboxInfo; onChange: () => void }) {
  const [error, setError] = useState<unknown>(undefined);
  const [busy, setBusy] = useState('');
  const [token, setToken] = useState('');
  const [copied, setCopied] = useState(false);
  const [readonly, setReadonly] = useState(true);
  const [allowExec, setAllowExec] = useState(false);
  const [snapshot, setSnapshot] = useState<SnapshotInfo | undefined>(undefined);
  const act = async (name: string, work: () => Promise<unknown>) => {
    setBusy(name);
    setError(undefined);
    try {
      await work();
      onChange();
    } catch (err) {
      setError(err);
    } finally {
      setBusy('');
    }
  };
  const base = `/v1/sandboxes/${s.id}`;
  return (
    <div class="actions">
      <div class="buttons">
        <button type="button" disabled={!!busy} onClick={() => void act('keepalive', () => request('POST', `${base}/keepalive`))}>
          Keep alive
        </button>
        <button
          type="button"
          disabled={!!busy}
          onClick={() =>
            void act('extend', () =>
              request('POST', `${base}/timeout`, { ttlSeconds: Math.max(60, Math.round((Date.parse(s.expiresAt) - Date.now()) / 1000)) + 3600 }),
            )
          }
        >
          Extend 1 h
        </button>
        {s.state === 'paused' || s.state === 'hibernated' ? (
          <button type="button" disabled={!!busy} onClick={() => void act('resume', () => request('POST', `${base}/resume`))}>
            {s.state === 'paused' ? 'Resume' : 'Wake'}
          </button>
        ) : (
          <>
            <button type="button" disabled={!!busy || s.state !== 'running'} onClick={() => void act('pause', () => request('POST', `${base}/pause`))}>
              Pause
            </button>
            <button
              type="button"
              disabled={!!busy || s.state !== 'running'}
              title="Stop it to free its memory; its files are kept"
              onClick={() => void act('hibernate', () => request('POST', `${base}/hibernate`))}
            >
              Hibernate
            </button>
          </>
        )}
        <button
          type="button"
          disabled={!!busy || s.state !== 'running'}
          onClick={() =>
            void act('snapshot', async () => {
              setSnapshot(undefined);
              setSnapshot(await request<SnapshotInfo>('POST', `${base}/snapshot`, {}));
            })
          }
        >
          {busy === 'snapshot' ? 'Snapshotting…' : 'Snapshot'}
        </button>
        <button
          type="button"
          class="danger"
          disabled={!!busy}
          onClick={() =>
            void act('kill', async () => {
              if (!window.confirm(`Kill sandbox ${s.id}? Its container and files are removed.`)) return;
              await request('DELETE', base);
              location.hash = '#/';
            })
          }
        >
          Kill
        </button>
      </div>
      <details class="derive">
        <summary>Derive a token</summary>
        <label>
          <input type="checkbox" checked={readonly} onChange={(e) => setReadonly(e.currentTarget.checked)} /> read-only
        </label>
        <label>
          <input type="checkbox" checked={allowExec} onChange={(e) => setAllowExec(e.currentTarget.checked)} /> may run commands
        </label>
        <button
          type="button"
          disabled={!!busy}
          onClick={() =>
            void act('derive', async () => {
              const answer = await request<{ token: string }>('POST', `${base}/derive`, { readonly, allowExec, ttlSeconds: 3600 });
              setToken(answer.token);
              setCopied(false);
            })
          }
        >
          Derive (1 h)
        </button>
        {token ? (
          <div class="token">
            <input readOnly value={token} aria-label="Derived token" onFocus={(e) => e.currentTarget.select()} />
            <button
              type="button"
              onClick={() =>
                void navigator.clipboard.writeText(token).then(
                  () => setCopied(true),
                  (err: unknown) => setError(err),
                )
              }
            >
              {copied ? 'Copied' : 'Copy'}
            </button>
          </div>
        ) : null}
      </details>
      {busy ? <span class="muted">{busy}…</span> : null}
      {snapshot ? (
        <p class="notice" role="status">
          Snapshot <code>{snapshot.id}</code> taken ({bytes(snapshot.sizeBytes)}
          {snapshot.pausedMs !== undefined ? `, paused ${snapshot.pausedMs} ms` : ''}). <a href="#/snapshots">Snapshots</a>
        </p>
      ) : null}
      <ErrorBox error={error} />
    </div>
  );
}
