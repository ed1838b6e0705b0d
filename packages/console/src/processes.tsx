import { useState } from 'preact/hooks';
import { ErrorBox, usePoll } from './ui.js';
import type { Wire } from './wire.js';

interface ProcessInfo {
  handle: string;
  pid: number;
  cmd: string;
  tag?: string;
  running: boolean;
  exitCode: number | null;
  signal: string | null;
  startedAt: string;
}

/** Background processes the daemon started (`process.list`): their output (replayed by `process.attach`) and a kill. */
export function ProcessesPanel({ wire }: { wire: Wire }) {
  const list = usePoll(() => wire.call<{ processes: ProcessInfo[] }>('process.list', {}).then((a) => a.result.processes), 3000, [wire]);
  const [output, setOutput] = useState<{ handle: string; text: string } | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const show = async (handle: string) => {
    setError(undefined);
    const decoder = new TextDecoder();
    let text = '';
    try {
      await wire.call(
        'process.attach',
        { handle, follow: false },
        { onEvent: (_e, _d, payload) => (text += payload ? decoder.decode(payload, { stream: true }) : '') },
      );
      setOutput({ handle, text });
    } catch (err) {
      setError(err);
    }
  };
  const kill = async (handle: string) => {
    setError(undefined);
    try {
      await wire.call('process.kill', { handle });
      list.refresh();
    } catch (err) {
      setError(err);
    }
  };
  return (
    <div>
      <ErrorBox error={list.error ?? error} />
      {list.data?.length === 0 ? <p class="empty">No background processes. Start one with the SDK's commands.run(cmd, {'{ background: true }'}).</p> : null}
      {list.data && list.data.length > 0 ? (
        <div class="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">PID</th>
                <th scope="col">Command</th>
                <th scope="col">State</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {list.data.map((p) => (
                <tr key={p.handle}>
                  <td data-label="PID">{p.pid}</td>
                  <td data-label="Command" class="wrap">
                    <code>{p.cmd}</code>
                    {p.tag ? <span class="chip">{p.tag}</span> : null}
                  </td>
                  <td data-label="State">{p.running ? 'running' : `exited ${p.exitCode ?? p.signal ?? ''}`}</td>
                  <td data-label="Actions">
                    <button type="button" class="secondary" onClick={() => void show(p.handle)}>
                      Output
                    </button>{' '}
                    {p.running ? (
                      <button type="button" class="danger" onClick={() => void kill(p.handle)}>
                        Kill
                      </button>
                    ) : null}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
      {output ? (
        <div>
          <h2>Output of {output.handle}</h2>
          <pre class="code">{output.text || '(no output)'}</pre>
        </div>
      ) : null}
    </div>
  );
}
