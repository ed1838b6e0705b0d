import { useState } from 'preact/hooks';
import { request, type SnapshotInfo } from './api.js';
import { bytes, duration, ErrorBox, Labels, usePoll } from './ui.js';

/** The API key's snapshots (docs/state.md): a new sandbox from one, or delete it. */
export function SnapshotList() {
  const list = usePoll(() => request<{ snapshots: SnapshotInfo[] }>('GET', '/v1/snapshots').then((a) => a.snapshots), 5000);
  const [busy, setBusy] = useState('');
  const [error, setError] = useState<unknown>(undefined);
  const act = async (name: string, work: () => Promise<unknown>) => {
    setBusy(name);
    setError(undefined);
    try {
      await work();
      list.refresh();
    } catch (err) {
      setError(err);
    } finally {
      setBusy('');
    }
  };
  const now = Date.now();
  return (
    <section aria-labelledby="snapshots-title">
      <div class="toolbar">
        <h1 id="snapshots-title">Snapshots</h1>
      </div>
      <ErrorBox error={list.error} />
      <ErrorBox error={error} />
      {list.data === undefined && !list.error ? <p class="muted">Loading…</p> : null}
      {list.data?.length === 0 ? <p class="empty">No snapshots yet. Take one from a sandbox's page, or with the SDK or `warren snapshot`.</p> : null}
      {list.data && list.data.length > 0 ? (
        <div class="table-wrap">
          <table class="snapshots">
            <thead>
              <tr>
                <th scope="col">Snapshot</th>
                <th scope="col">Name</th>
                <th scope="col">Of sandbox</th>
                <th scope="col">Image</th>
                <th scope="col">Labels</th>
                <th scope="col">Age</th>
                <th scope="col">Size</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {list.data.map((snap) => (
                <tr key={snap.id} data-snapshot={snap.id}>
                  <td data-label="Snapshot">
                    <code>{snap.id.slice(0, 16)}</code>
                  </td>
                  <td data-label="Name">{snap.name ?? '–'}</td>
                  <td data-label="Of sandbox">
                    <a href={`#/sandboxes/${snap.sandboxId}`}>{snap.sandboxId.slice(0, 12)}</a>
                  </td>
                  <td data-label="Image">{snap.image}</td>
                  <td data-label="Labels">
                    <Labels labels={snap.labels} />
                  </td>
                  <td data-label="Age">{duration(now - Date.parse(snap.createdAt))}</td>
                  <td data-label="Size">{bytes(snap.sizeBytes)}</td>
                  <td data-label="Actions" class="row-actions">
                    <button
                      type="button"
                      disabled={!!busy}
                      onClick={() =>
                        void act(`create-${snap.id}`, async () => {
                          const created = await request<{ id: string }>('POST', '/v1/sandboxes', { snapshot: snap.id });
                          location.hash = `#/sandboxes/${created.id}`;
                        })
                      }
                    >
                      New sandbox
                    </button>
                    <button
                      type="button"
                      class="danger"
                      disabled={!!busy}
                      onClick={() =>
                        void act(`delete-${snap.id}`, async () => {
                          if (!window.confirm(`Delete snapshot ${snap.name ?? snap.id}? Sandboxes made from it keep their files.`)) return;
                          await request('DELETE', `/v1/snapshots/${encodeURIComponent(snap.id)}`);
                        })
                      }
                    >
                      Delete
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
    </section>
  );
}
