import { useEffect, useState } from 'preact/hooks';
import { highlighted } from './highlight.js';
import { bytes, ErrorBox } from './ui.js';
import type { Wire } from './wire.js';

interface Entry {
  path: string;
  type: string;
  size: number;
  mtimeMs: number;
  linkTarget?: string;
}

interface OpenFile {
  path: string;
  text: string;
  sha256: string;
  size: number;
  binary: boolean;
  truncated: boolean;
}

/** Files shown or edited in the browser: larger ones are downloaded instead. */
const MAX_VIEW = 2 * 1024 * 1024;

function join(dir: string, name: string): string {
  return dir === '.' ? name : `${dir}/${name}`;
}

function parent(dir: string): string {
  const i = dir.lastIndexOf('/');
  return i <= 0 ? '.' : dir.slice(0, i);
}

/**
 * The sandbox's files through its policy (paths relative to its root): list, view with syntax
 * highlighting, edit and save with the conditional write (`expectedSha256`, so a file changed by
 * the agent meanwhile is not overwritten), upload and download. Names and contents are text.
 */
export function FilesPanel({ wire }: { wire: Wire }) {
  const [dir, setDir] = useState('.');
  const [entries, setEntries] = useState<Entry[] | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const [file, setFile] = useState<OpenFile | undefined>(undefined);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    setEntries(undefined);
    wire.call<{ entries: Entry[]; truncated: boolean }>('fs.list', { path: dir, maxEntries: 1000 }).then(
      ({ result }) => {
        setEntries(result.entries.sort((a, b) => Number(b.type === 'dir') - Number(a.type === 'dir') || a.path.localeCompare(b.path)));
        setError(undefined);
      },
      (err: unknown) => setError(err),
    );
  }, [wire, dir, tick]);

  const open = async (path: string) => {
    setError(undefined);
    try {
      const { result: stat } = await wire.call<{ size: number }>('fs.stat', { path });
      if (stat.size > MAX_VIEW) return setFile({ path, text: '', sha256: '', size: stat.size, binary: false, truncated: true });
      const { result, payload } = await wire.call<{ size: number; sha256: string }>('fs.read', { path, hash: true });
      const raw = payload ?? new Uint8Array();
      const binary = raw.subarray(0, 8000).includes(0);
      setFile({ path, text: binary ? '' : new TextDecoder().decode(raw), sha256: result.sha256, size: result.size, binary, truncated: false });
    } catch (err) {
      setError(err);
    }
  };

  const download = async (path: string) => {
    try {
      const { payload } = await wire.call('fs.read', { path });
      const url = URL.createObjectURL(new Blob([(payload ?? new Uint8Array()) as Uint8Array<ArrayBuffer>], { type: 'application/octet-stream' }));
      const a = document.createElement('a');
      a.href = url;
      a.download = path.split('/').pop() ?? 'file';
      a.click();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (err) {
      setError(err);
    }
  };

  const upload = async (files: FileList | null) => {
    if (!files) return;
    setError(undefined);
    try {
      for (const f of Array.from(files)) await wire.call('fs.write', { path: join(dir, f.name) }, { payload: new Uint8Array(await f.arrayBuffer()) });
      setTick((t) => t + 1);
    } catch (err) {
      setError(err);
    }
  };

  if (file)
    return <FileView wire={wire} file={file} onClose={() => setFile(undefined)} onSaved={(f) => setFile(f)} onDownload={() => void download(file.path)} />;
  return (
    <div class="files">
      <div class="toolbar">
        <nav aria-label="Folder" class="crumbs">
          <button type="button" class="link" onClick={() => setDir('.')}>
            root
          </button>
          {dir === '.'
            ? null
            : dir.split('/').map((part, i, all) => (
                <span key={i}>
                  {' / '}
                  <button type="button" class="link" onClick={() => setDir(all.slice(0, i + 1).join('/'))}>
                    {part}
                  </button>
                </span>
              ))}
        </nav>
        <label class="upload">
          Upload <input type="file" multiple onChange={(e) => void upload(e.currentTarget.files)} />
        </label>
        <button type="button" class="secondary" onClick={() => setTick((t) => t + 1)}>
          Refresh
        </button>
      </div>
      <ErrorBox error={error} />
      {entries === undefined && !error ? <p class="muted">Loading…</p> : null}
      {entries?.length === 0 ? <p class="empty">This folder is empty.</p> : null}
      {entries && entries.length > 0 ? (
        <ul class="entries">
          {dir !== '.' ? (
            <li>
              <button type="button" class="link" onClick={() => setDir(parent(dir))}>
                ..
              </button>
            </li>
          ) : null}
          {entries.map((e) => (
            <li key={e.path} data-type={e.type}>
              <button
                type="button"
                class="link"
                data-entry={e.path}
                onClick={() => (e.type === 'dir' ? setDir(join(dir, e.path)) : void open(join(dir, e.path)))}
              >
                {e.type === 'dir' ? '📁 ' : e.type === 'symlink' ? '↪ ' : ''}
                {e.path}
              </button>
              {e.linkTarget !== undefined ? <span class="muted"> → {e.linkTarget}</span> : null}
              <span class="muted size">{e.type === 'file' ? bytes(e.size) : ''}</span>
              {e.type === 'file' ? (
                <button type="button" class="link small" aria-label={`Download ${e.path}`} onClick={() => void download(join(dir, e.path))}>
                  download
                </button>
              ) : null}
            </li>
          ))}
        </ul>
      ) : null}
    </div>
  );
}

function FileView({
  wire,
  file,
  onClose,
  onSaved,
  onDownload,
}: {
  wire: Wire;
  file: OpenFile;
  onClose: () => void;
  onSaved: (f: OpenFile) => void;
  onDownload: () => void;
}) {
  const [editing, setEditing] = useState(false);
  const [draft, setDraft] = useState(file.text);
  const [error, setError] = useState<unknown>(undefined);
  const [saved, setSaved] = useState('');
  const html = editing || file.binary ? undefined : highlighted(file.text, file.path);
  const save = async () => {
    setError(undefined);
    try {
      const content = new TextEncoder().encode(draft);
      const { result } = await wire.call<{ sha256: string }>('fs.write', { path: file.path, expectedSha256: file.sha256, hash: true }, { payload: content });
      onSaved({ ...file, text: draft, sha256: result.sha256, size: content.length });
      setEditing(false);
      setSaved('Saved.');
    } catch (err) {
      setError(err);
    }
  };
  return (
    <div class="file">
      <div class="toolbar">
        <button type="button" class="secondary" onClick={onClose}>
          ← Files
        </button>
        <h2 class="path">{file.path}</h2>
        <span class="muted">{bytes(file.size)}</span>
        {!file.binary && !file.truncated && !editing ? (
          <button type="button" onClick={() => (setDraft(file.text), setEditing(true), setSaved(''))}>
            Edit
          </button>
        ) : null}
        {editing ? (
          <>
            <button type="button" onClick={() => void save()}>
              Save
            </button>
            <button type="button" class="secondary" onClick={() => setEditing(false)}>
              Cancel
            </button>
          </>
        ) : null}
        <button type="button" class="secondary" onClick={onDownload}>
          Download
        </button>
      </div>
      {saved ? <p class="ok">{saved}</p> : null}
      <ErrorBox error={error} />
      {(error as { code?: string } | undefined)?.code === 'CONFLICT' ? (
        <p class="muted">The file changed since it was opened; go back and open it again.</p>
      ) : null}
      {file.truncated ? (
        <p class="empty">This file is larger than {bytes(MAX_VIEW)}: download it to look inside.</p>
      ) : file.binary ? (
        <p class="empty">A binary file: download it to look inside.</p>
      ) : editing ? (
        <textarea class="editor" aria-label={`Contents of ${file.path}`} value={draft} onInput={(e) => setDraft(e.currentTarget.value)} spellcheck={false} />
      ) : html !== undefined ? (
        <pre class="code hljs">
          <code dangerouslySetInnerHTML={{ __html: html }} />
        </pre>
      ) : (
        <pre class="code">
          <code>{file.text}</code>
        </pre>
      )}
    </div>
  );
}
