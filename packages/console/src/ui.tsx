import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, type SandboxInfo } from './api.js';

/** An error as the console shows it: the code, the message, the suggestion, as text. */
export function ErrorBox({ error }: { error: unknown }) {
  if (!error) return null;
  const e = error as Partial<ApiError> & { message?: string };
  return (
    <div class="error" role="alert">
      {e.code ? <strong>{e.code}: </strong> : null}
      {e.message ?? (typeof error === 'string' ? error : JSON.stringify(error))}
      {e.suggestion ? <div class="muted">{e.suggestion}</div> : null}
    </div>
  );
}

/** Runs `fn` now and every `ms` while mounted (and again when `deps` change); errors land in the returned state. */
export function usePoll<T>(fn: () => Promise<T>, ms: number, deps: unknown[] = []): { data: T | undefined; error: unknown; refresh: () => void } {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const [tick, setTick] = useState(0);
  const fnRef = useRef(fn);
  fnRef.current = fn;
  useEffect(() => {
    let stopped = false;
    let timer: number | undefined;
    const run = async () => {
      try {
        const value = await fnRef.current();
        if (!stopped) {
          setData(value);
          setError(undefined);
        }
      } catch (err) {
        if (!stopped) setError(err);
      }
      if (!stopped) timer = window.setTimeout(() => void run(), ms);
    };
    void run();
    return () => {
      stopped = true;
      window.clearTimeout(timer);
    };
  }, [...deps, tick, ms]);
  return { data, error, refresh: () => setTick((t) => t + 1) };
}

/** "3m", "2h 5m", "4d": how long from now (negative: ago) in words. */
export function duration(ms: number): string {
  const s = Math.abs(Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d`;
}

export function bytes(n: number | undefined): string {
  if (n === undefined) return '–';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 / 1024).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}

/** A sandbox's state, with `frozen` when the idle freezer holds it (it thaws on the next call). */
export function StateBadge({ sandbox: s }: { sandbox: SandboxInfo }) {
  return (
    <span class={`state state-${s.state}${s.frozen ? ' state-frozen' : ''}`} title={STATE_HELP[s.frozen ? 'frozen' : s.state]}>
      {s.state}
      {s.frozen ? ' · frozen' : ''}
    </span>
  );
}

const STATE_HELP: Record<SandboxInfo['state'] | 'frozen', string> = {
  running: 'Running.',
  frozen: 'Frozen for being idle: its memory is kept and the next call thaws it in milliseconds.',
  paused: 'Paused: its processes are frozen until it is resumed.',
  hibernated: 'Hibernated: stopped to free its memory, files kept; waking it starts its processes anew.',
  exited: 'Its container stopped.',
  gone: 'Its container is gone.',
};

/** Labels as `key=value` chips; keys and values are text, whatever they hold. */
export function Labels({ labels }: { labels: Record<string, string> }) {
  const entries = Object.entries(labels);
  if (entries.length === 0) return <span class="muted">none</span>;
  return (
    <span class="labels">
      {entries.map(([k, v]) => (
        <span class="chip" key={k}>
          {k}={v}
        </span>
      ))}
    </span>
  );
}
