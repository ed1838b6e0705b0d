import type { Command } from 'commander';
import type { SandboxInfo, SandboxMetrics } from '@warren/protocol';
import type { WatchEvent } from '@warren/sdk';
import { wantsJson } from './args.js';
import { formatBytes, printable, printJson, table } from './output.js';
import { connectSandbox, restClient } from './sandbox-commands.js';

/** One watch event as a line: `create  src/a.ts`, `rename  old -> new`, `overflow (queue, 12 dropped): rescan`. */
export function watchLine(event: WatchEvent): string {
  if (event.type === 'overflow') return `overflow  (${event.reason}, ${event.dropped} dropped): rescan the folder`;
  const name = printable(event.path) + (event.directory ? '/' : '');
  return `${event.type.padEnd(8)}${event.from !== undefined ? `${printable(event.from)} -> ` : ''}${name}`;
}

/**
 * `warren watch ID PATH`: prints each change under a folder of the sandbox as it happens (one
 * line each, or one JSON object per line with --json) until interrupted or the folder goes away.
 */
export async function watchCommand(id: string, folder: string, options: { recursive: boolean }, command: Command): Promise<void> {
  const sandbox = await connectSandbox(command, id);
  const stop = new AbortController();
  const interrupt = () => stop.abort();
  process.once('SIGINT', interrupt);
  try {
    const json = wantsJson(command);
    const watcher = await sandbox.files.watch(folder, { recursive: options.recursive, signal: stop.signal });
    process.stderr.write(`warren: watching ${printable(folder)} in ${id} (Ctrl-C stops)\n`);
    for await (const event of watcher) process.stdout.write(json ? `${JSON.stringify(event)}\n` : `${watchLine(event)}\n`);
  } finally {
    process.off('SIGINT', interrupt);
    sandbox.close();
  }
}

/** One `warren top` row per sandbox, busiest first; sandboxes without a sample (not running) last. */
export function topRows(sandboxes: SandboxInfo[], samples: Map<string, SandboxMetrics>): string[][] {
  const cpu = (id: string) => samples.get(id)?.cpuPercent ?? -1;
  return [...sandboxes]
    .sort((a, b) => cpu(b.id) - cpu(a.id) || a.id.localeCompare(b.id))
    .map((s) => {
      const m = samples.get(s.id);
      if (!m) return [s.id, s.state, '-', '-', '-', '-', s.image];
      const memory = `${formatBytes(m.memoryBytes)}${m.memoryLimitBytes ? ` / ${formatBytes(m.memoryLimitBytes)}` : ''}`;
      const disk = m.disk ? `${formatBytes(m.disk.usedBytes)} / ${formatBytes(m.disk.limitBytes)}` : '-';
      return [s.id, s.state, m.cpuPercent === undefined ? '...' : `${m.cpuPercent.toFixed(1)}%`, memory, String(m.pids), disk, s.image];
    });
}

/**
 * `warren top`: a live table of every sandbox with its CPU share, memory, processes and workspace
 * disk, busiest first, redrawn every `--interval` seconds until interrupted; `--once` (or output
 * that is not a terminal) prints one table (the CPU share needs two samples: the first round shows
 * `...` for a sandbox the controller has not sampled before).
 */
export async function topCommand(options: { interval: number; once?: boolean }, command: Command): Promise<void> {
  const rest = restClient(command);
  const live = !options.once && !wantsJson(command) && process.stdout.isTTY;
  const stop = new AbortController();
  const interrupt = () => stop.abort();
  process.once('SIGINT', interrupt);
  try {
    do {
      const sandboxes = await rest.list({});
      const samples = new Map<string, SandboxMetrics>();
      await Promise.all(
        sandboxes
          .filter((s) => s.state === 'running')
          .map(async (s) => {
            const sample = await rest.metrics(s.id, false, stop.signal).catch(() => undefined); // gone or stopped meanwhile
            if (sample) samples.set(s.id, sample);
          }),
      );
      if (wantsJson(command)) return printJson(sandboxes.map((s) => ({ ...s, metrics: samples.get(s.id) ?? null })));
      const text = table(['ID', 'STATE', 'CPU', 'MEMORY', 'PIDS', 'DISK', 'IMAGE'], topRows(sandboxes, samples));
      // Clear and redraw in place on a terminal; a pipe gets one table.
      process.stdout.write(live ? `\x1b[H\x1b[2J${new Date().toLocaleTimeString()}  ${sandboxes.length} sandboxes\n${text}` : text);
      if (!live) return;
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, options.interval * 1000);
        stop.signal.addEventListener('abort', () => (clearTimeout(timer), resolve(undefined)), { once: true });
      });
    } while (!stop.signal.aborted);
  } finally {
    process.off('SIGINT', interrupt);
  }
}
