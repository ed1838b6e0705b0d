import { FitAddon } from '@xterm/addon-fit';
import { Terminal } from '@xterm/xterm';
import { useEffect, useRef, useState } from 'preact/hooks';
import { ErrorBox } from './ui.js';
import type { Wire } from './wire.js';

/**
 * A live terminal over Warren's PTY methods (`pty.open` streams `output` events whose payload is the
 * raw bytes; `pty.write`, `pty.resize`). xterm.js interprets the escape sequences as a terminal
 * does: into cells of text, never into the page's HTML; OSC 8 links open nothing (no prompt, no window).
 */
export function TerminalPanel({ wire }: { wire: Wire }) {
  const host = useRef<HTMLDivElement>(null);
  const [error, setError] = useState<unknown>(undefined);
  const [ended, setEnded] = useState('');
  useEffect(() => {
    const term = new Terminal({ fontSize: 13, cursorBlink: true, scrollback: 5000, linkHandler: { activate: () => undefined }, allowProposedApi: false });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(host.current!);
    fit.fit();
    let handle: string | undefined;
    // Keys typed before the terminal has started are sent once it has.
    let early = '';
    const send = (data: string) => wire.call('pty.write', { handle, data }).catch((err: unknown) => setError(err));
    wire
      .call<{ exitCode: number | null; signal: string | null }>(
        'pty.open',
        { cols: term.cols, rows: term.rows },
        {
          onEvent: (event, data, payload) => {
            if (event === 'started') {
              handle = (data as { handle: string }).handle;
              if (early) void send(early);
              early = '';
            } else if (event === 'output' && payload) term.write(payload);
          },
        },
      )
      .then(
        ({ result }) => setEnded(`The shell ended (exit ${result.exitCode ?? result.signal ?? '?'}).`),
        (err: unknown) => setError(err),
      );
    const input = term.onData((data) => {
      if (handle) void send(data);
      else early += data;
    });
    const resize = term.onResize(({ cols, rows }) => {
      if (handle) wire.call('pty.resize', { handle, cols, rows }).catch(() => undefined);
    });
    // The shell takes every key, Tab included; Escape twice in a row hands the keyboard back to the page.
    let lastEscape = 0;
    term.attachCustomKeyEventHandler((event) => {
      if (event.type !== 'keydown' || event.key !== 'Escape') return true;
      if (event.timeStamp - lastEscape < 600) {
        term.blur();
        document.getElementById('tab-Terminal')?.focus();
        return false;
      }
      lastEscape = event.timeStamp;
      return true;
    });
    const observer = new ResizeObserver(() => fit.fit());
    observer.observe(host.current!);
    term.focus();
    return () => {
      observer.disconnect();
      input.dispose();
      resize.dispose();
      if (handle) wire.call('pty.kill', { handle }).catch(() => undefined);
      term.dispose();
    };
  }, [wire]);
  return (
    <div>
      <div class="term-host" ref={host} aria-label="Terminal" />
      <p class="muted hint">The terminal takes every key; press Esc twice to move the keyboard back to the page.</p>
      {ended ? <p class="muted">{ended}</p> : null}
      <ErrorBox error={error} />
    </div>
  );
}
