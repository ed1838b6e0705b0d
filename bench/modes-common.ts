import { execFile } from 'node:child_process';
import { mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { repo } from './controller-process.js';

/** The machine, in one line, for every mode's header. */
export function machine(): string {
  return `${os.cpus().length} cores (${os.cpus()[0]?.model ?? 'unknown CPU'}), ${Math.round(os.totalmem() / 1024 ** 3)} GiB, ${os.type()} ${os.release()}, Node ${process.version}`;
}

let reported = '';

/** Prints a mode's results and keeps them for `--markdown` (see {@link takeReport}). */
export function report(text: string): void {
  reported += text;
  process.stdout.write(text);
}

/** What the mode reported so far, and forgets it. */
export function takeReport(): string {
  const text = reported;
  reported = '';
  return text;
}

export function progress(what: string): void {
  process.stderr.write(`==> ${what}\n`);
}

export const fmt = (x: number | undefined, digits = 2) => (x === undefined || Number.isNaN(x) ? '-' : x >= 100 ? x.toFixed(0) : x.toFixed(digits));

/** A Markdown table from a header and rows of cells. */
export function table(header: string[], rows: string[][]): string {
  return [header, header.map(() => '---'), ...rows].map((cells) => `| ${cells.join(' | ')} |`).join('\n');
}

/** p50/p95/p99 of a sample (nearest rank), in the sample's unit. */
export function percentiles(samples: number[]): { n: number; p50: number; p95: number; p99: number; max: number } {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? NaN;
  return { n: sorted.length, p50: at(0.5), p95: at(0.95), p99: at(0.99), max: sorted[sorted.length - 1] ?? NaN };
}

/** Writes a file below the repository, making its folder, and says so. */
export async function writeOut(file: string, text: string): Promise<void> {
  const target = path.resolve(repo, file);
  await mkdir(path.dirname(target), { recursive: true });
  await writeFile(target, text);
  process.stdout.write(`wrote ${path.relative(repo, target)}\n`);
}

/** MemAvailable of this host, in MiB. */
export async function hostAvailableMiB(): Promise<number> {
  const meminfo = await readFile('/proc/meminfo', 'utf8');
  return Number(/MemAvailable:\s+(\d+)/.exec(meminfo)?.[1] ?? NaN) / 1024;
}

/** The host's busy CPU jiffies (all cores), from /proc/stat. */
export async function hostBusyJiffies(): Promise<number> {
  const [cpu] = (await readFile('/proc/stat', 'utf8')).split('\n');
  const fields = (cpu ?? '').trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
  return fields.reduce((a, b) => a + b, 0) - (fields[3] ?? 0) - (fields[4] ?? 0);
}

/**
 * The resident memory of the engine's per-container shims (`containerd-shim-runc-v2`, or
 * Podman's `conmon`) whose command line names one of `containerIds`, in MiB each.
 */
export async function shimRssMiB(containerIds: string[]): Promise<number[]> {
  const wanted = new Set(containerIds);
  const out: number[] = [];
  for (const pid of await readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(pid)) continue;
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (!/containerd-shim|conmon/.test(cmdline)) continue;
    if (!cmdline.split('\0').some((arg) => wanted.has(arg))) continue;
    const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
    const rss = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN) / 1024;
    if (!Number.isNaN(rss)) out.push(rss);
  }
  return out;
}

/** Whether the engine has gVisor's runtime registered (`docker info` lists `runsc`). */
export async function hasRunsc(): Promise<boolean> {
  try {
    const { stdout } = await promisify(execFile)('docker', ['info', '--format', '{{json .Runtimes}}']);
    return Object.keys(JSON.parse(stdout) as Record<string, unknown>).includes('runsc');
  } catch {
    return false;
  }
}

/** Prometheus text: the value of one series (the first line that matches `name` and, if given, `labels`). */
export async function metricValue(url: string, apiKey: string, name: string, labels = ''): Promise<number> {
  const text = await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${apiKey}` } })).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `));
  return Number(line?.split(' ').pop() ?? NaN);
}

/** Resident memory of one process inside a container, in MiB: its own pages and the file pages it maps (shared where the file is). */
export interface ProcessMemory {
  container: string;
  pid: number;
  command: string;
  anonMiB: number;
  fileMiB: number;
}

/** Every process of the given containers (found by their cgroup path naming the container id), with its memory. */
export async function containerProcesses(containerIds: string[]): Promise<ProcessMemory[]> {
  const out: ProcessMemory[] = [];
  for (const pid of await readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(pid)) continue;
    const cgroup = await readFile(`/proc/${pid}/cgroup`, 'utf8').catch(() => '');
    const container = containerIds.find((id) => cgroup.includes(id));
    if (!container) continue;
    const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
    const kib = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? 0) / 1024;
    const command = (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).split('\0').join(' ').trim();
    out.push({ container, pid: Number(pid), command, anonMiB: kib('RssAnon'), fileMiB: kib('RssFile') + kib('RssShmem') });
  }
  return out;
}
