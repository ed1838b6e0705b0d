import os from 'node:os';
import { Sandbox } from '@warren/sdk';
import { MiB, processRssMiB, startControllerProcess, type ControllerProcess, SMALL_DISK_MB } from './controller-process.js';
import {
  containerProcesses,
  fmt,
  hasRunsc,
  hostAvailableMiB,
  hostBusyJiffies,
  machine,
  metricValue,
  percentiles,
  progress,
  shimRssMiB,
  table,
  writeOut,
  type ProcessMemory,
} from './modes-common.js';
import { report } from './modes-common.js';

/** What the density run found; written as JSON beside the printed tables. */
interface DensityResult {
  date: string;
  machine: string;
  image: string;
  asked: number;
  reached: number;
  stopReason: string;
  createBands: { from: number; to: number; p50Ms: number; perSecond: number }[];
  execAt: { count: number; p50Ms: number; p99Ms: number }[];
  memoryPerSandboxMiB: {
    daemonRss: number;
    daemonPrivate: number;
    daemonFileMapped: number;
    otherProcesses: number;
    cgroup: number;
    kernelAndTmpfs: number;
    shim: number;
    controllerShare: number;
    hostTotal: number;
  };
  /** The controller's own RSS, absolute: with no sandbox and with all of them (the target: <= 150 MiB with 500). */
  controllerRssMiB: { atStart: number; atMax: number };
  frozen: { cpuPercentRunning: number; cpuPercentFrozen: number; cgroupMiBRunning: number; cgroupMiBFrozen: number };
  thaw: { firstCallMs: ReturnType<typeof percentiles>; awakeCallMs: ReturnType<typeof percentiles>; thawSecondsMean: number };
  gvisor: string;
}

/**
 * `scripts/bench --density[=N]`: starts idle sandboxes one after another until N, until the host's
 * available memory falls below a floor (15 % of it, at least 2 GiB), or until a create fails, and
 * reports what each idle sandbox costs, how the create rate and a call's latency hold up as the
 * count grows, and what freezing changes.
 */
export async function densityMode(max: number, image: string, jsonFile: string): Promise<void> {
  const floorMiB = Math.max(2048, (os.totalmem() / MiB) * 0.15);
  const controller = await startControllerProcess({
    WARREN_POOL_SIZE: '0',
    WARREN_MAX_SANDBOXES: String(max + 10),
    WARREN_MAX_CONNECTIONS: String(max + 100),
  });
  const options = { baseUrl: controller.url, apiKey: controller.apiKey, diskMb: SMALL_DISK_MB };
  const ids: string[] = [];
  const createMs: number[] = [];
  const execAt: DensityResult['execAt'] = [];
  let stopReason = `reached the asked count (${max})`;
  try {
    const hostAtStart = await hostAvailableMiB();
    const controllerAtStart = await processRssMiB(controller.pid);
    progress(`density: creating up to ${max} idle sandboxes (stops when the host has less than ${Math.round(floorMiB)} MiB available)`);
    while (ids.length < max) {
      const available = await hostAvailableMiB();
      if (available < floorMiB) {
        stopReason = `the host's available memory fell to ${Math.round(available)} MiB (floor ${Math.round(floorMiB)} MiB)`;
        break;
      }
      const started = performance.now();
      try {
        const sandbox = await Sandbox.create({ ...options, image, ttlSeconds: 3600 });
        createMs.push(performance.now() - started);
        ids.push(sandbox.id);
        // Idle means idle: no client connection held open.
        sandbox.close();
      } catch (err) {
        stopReason = `a create failed: ${(err as Error).message.split('\n')[0]}`;
        break;
      }
      if (ids.length % 50 === 0) progress(`density: ${ids.length} sandboxes`);
      if (ids.length === 10 || ids.length === 100) execAt.push({ count: ids.length, ...(await execLatency(options, ids)) });
    }
    if (ids.length === 0) throw new Error(`no sandbox could be created: ${stopReason}`);
    if (execAt.at(-1)?.count !== ids.length) execAt.push({ count: ids.length, ...(await execLatency(options, ids)) });

    progress('density: memory per idle sandbox');
    const sample = spread(ids, 20);
    const daemon = await meanOf(sample, async (id) => {
      const s = await Sandbox.connect(id, options);
      try {
        return (await s.daemonInfo()).rssBytes / MiB;
      } finally {
        s.close();
      }
    });
    const cgroup = await cgroupMiB(options, sample);
    const containerIds = (await Promise.all(sample.map((id) => containerIdOf(id)))).filter((c): c is string => c !== undefined);
    const shims = await shimRssMiB(containerIds);
    const shim = shims.length > 0 ? shims.reduce((a, b) => a + b, 0) / shims.length : NaN;
    const processes = await containerProcesses(containerIds);
    const perContainer = (pick: (p: ProcessMemory) => boolean, field: 'anonMiB' | 'fileMiB') =>
      processes.filter(pick).reduce((a, p) => a + p[field], 0) / Math.max(1, containerIds.length);
    const isDaemon = (p: ProcessMemory) => p.command.includes('warren-agent');
    const daemonPrivate = perContainer(isDaemon, 'anonMiB');
    const daemonFileMapped = perContainer(isDaemon, 'fileMiB');
    const otherProcesses = perContainer((p) => !isDaemon(p), 'anonMiB');
    const controllerAtMax = await processRssMiB(controller.pid);
    const controllerShare = (controllerAtMax - controllerAtStart) / ids.length;
    const hostTotal = (hostAtStart - (await hostAvailableMiB())) / ids.length;

    progress('density: idle CPU and memory, running and then frozen');
    const cpuRunning = await hostCpuPercent(10_000);
    const cgroupRunning = cgroup;
    await inBatches(ids, 8, (id) => rest(options, 'POST', `/v1/sandboxes/${id}/pause`));
    const cpuFrozen = await hostCpuPercent(10_000);
    const cgroupFrozen = await cgroupMiB(options, sample);
    await inBatches(ids, 8, (id) => rest(options, 'POST', `/v1/sandboxes/${id}/resume`));

    progress('density: thaw on the first call (a controller of its own with freezeAfterIdleSeconds=1)');
    const thaw = await thawLatency(image);
    const gvisor = (await hasRunsc())
      ? 'runsc is registered: run `scripts/bench --tti` for its create rows; density under gVisor is not measured by this mode yet'
      : 'skipped: the engine has no runsc runtime (gVisor)';

    const result: DensityResult = {
      date: new Date().toISOString(),
      machine: machine(),
      image,
      asked: max,
      reached: ids.length,
      stopReason,
      createBands: bands(createMs),
      execAt,
      memoryPerSandboxMiB: {
        daemonRss: daemon,
        daemonPrivate,
        daemonFileMapped,
        otherProcesses,
        cgroup,
        kernelAndTmpfs: cgroup - daemonPrivate - otherProcesses,
        shim,
        controllerShare,
        hostTotal,
      },
      controllerRssMiB: { atStart: controllerAtStart, atMax: controllerAtMax },
      frozen: { cpuPercentRunning: cpuRunning, cpuPercentFrozen: cpuFrozen, cgroupMiBRunning: cgroupRunning, cgroupMiBFrozen: cgroupFrozen },
      thaw,
      gvisor,
    };
    printDensity(result);
    await writeOut(jsonFile, `${JSON.stringify(result, null, 2)}\n`);
  } finally {
    progress(`density: removing ${ids.length} sandboxes`);
    await inBatches(ids, 8, (id) => rest(options, 'DELETE', `/v1/sandboxes/${id}`).catch(() => undefined));
    await controller.stop();
  }
}

function printDensity(r: DensityResult): void {
  const m = r.memoryPerSandboxMiB;
  const out = [
    `\nDensity: ${r.reached} idle sandboxes of ${r.image} (asked ${r.asked}; stopped because ${r.stopReason}). Machine: ${r.machine}\n`,
    table(
      ['memory per idle sandbox', 'MiB', 'how it is measured'],
      [
        ['daemon (Node) RSS, as it reports it', fmt(m.daemonRss), "`system.info`'s rssBytes on up to 20 sandboxes spread over the run"],
        ['  of which its own pages (RssAnon)', fmt(m.daemonPrivate), 'what each further daemon costs: /proc/<pid>/status of the daemon, from the host'],
        [
          '  of which mapped files (RssFile)',
          fmt(m.daemonFileMapped),
          'node and its libraries from the runtime volume: one copy in the page cache for all sandboxes',
        ],
        ['other processes in the container', fmt(m.otherProcesses), 'their RssAnon: the init (docker-init), anything left running'],
        ["container's cgroup memory", fmt(m.cgroup), "the engine's count without page cache (GET /v1/sandboxes/<id>/metrics)"],
        ['  kernel and tmpfs (the rest of it)', fmt(m.kernelAndTmpfs), 'cgroup memory minus the processes above: page tables, socket buffers, /tmp'],
        ['engine shim on the host', fmt(m.shim), 'RSS of the `containerd-shim` (or `conmon`) of each sampled container'],
        ["controller's share", fmt(m.controllerShare), "the controller's RSS growth from 0 to all sandboxes, divided by their count"],
        [
          'host, everything',
          fmt(m.hostTotal),
          "MemAvailable's drop from 0 to all sandboxes, divided by their count (includes the workspace disks' page cache)",
        ],
      ],
    ),
    `\nThe controller's RSS: ${fmt(r.controllerRssMiB.atStart)} MiB with no sandbox, ${fmt(r.controllerRssMiB.atMax)} MiB with ${r.reached} (one process: the REST API, the relay, the pool and the engine client).\n`,
    table(
      ['sandboxes', 'create p50 (ms)', 'creates/s (one at a time)'],
      r.createBands.map((b) => [`${b.from}-${b.to}`, fmt(b.p50Ms), fmt(b.perSecond)]),
    ),
    '',
    table(
      ['exec `true` with this many sandboxes alive', 'p50 (ms)', 'p99 (ms)'],
      r.execAt.map((e) => [String(e.count), fmt(e.p50Ms), fmt(e.p99Ms)]),
    ),
    '',
    table(
      ['all sandboxes idle', 'running', 'frozen (cgroup freezer)'],
      [
        ['host CPU busy, % of all cores (10 s)', fmt(r.frozen.cpuPercentRunning), fmt(r.frozen.cpuPercentFrozen)],
        ['cgroup memory per sandbox (MiB)', fmt(r.frozen.cgroupMiBRunning), fmt(r.frozen.cgroupMiBFrozen)],
      ],
    ),
    '',
    table(
      ['thaw', 'n', 'p50 (ms)', 'p95 (ms)', 'p99 (ms)'],
      [
        [
          'first `commands.run(true)` on a frozen sandbox (thaw + call)',
          String(r.thaw.firstCallMs.n),
          fmt(r.thaw.firstCallMs.p50),
          fmt(r.thaw.firstCallMs.p95),
          fmt(r.thaw.firstCallMs.p99),
        ],
        ['the next call, awake', String(r.thaw.awakeCallMs.n), fmt(r.thaw.awakeCallMs.p50), fmt(r.thaw.awakeCallMs.p95), fmt(r.thaw.awakeCallMs.p99)],
      ],
    ),
    `\nwarren_sandbox_thaw_seconds, mean: ${fmt(r.thaw.thawSecondsMean * 1000)} ms. gVisor: ${r.gvisor}\n`,
  ];
  report(out.join('\n'));
}

/** p50 and p99 of `commands.run('true')` over up to 20 sandboxes spread over the live ones, 60 calls. */
async function execLatency(options: { baseUrl: string; apiKey: string }, ids: string[]): Promise<{ p50Ms: number; p99Ms: number }> {
  const picked = spread(ids, 20);
  const handles = await Promise.all(picked.map((id) => Sandbox.connect(id, options)));
  try {
    for (const h of handles) await h.commands.run('true');
    const samples: number[] = [];
    for (let i = 0; i < 60; i++) {
      const started = performance.now();
      await handles[i % handles.length]!.commands.run('true');
      samples.push(performance.now() - started);
    }
    const p = percentiles(samples);
    return { p50Ms: p.p50, p99Ms: p.p99 };
  } finally {
    for (const h of handles) h.close();
  }
}

/**
 * A controller of its own that freezes after one idle second: five sandboxes, three rounds each
 * of waiting until frozen and timing the first call (thaw + call), then a second call awake.
 */
async function thawLatency(image: string): Promise<DensityResult['thaw']> {
  const controller: ControllerProcess = await startControllerProcess({ WARREN_POOL_SIZE: '0', WARREN_FREEZE_AFTER_IDLE_SECONDS: '1' });
  const options = { baseUrl: controller.url, apiKey: controller.apiKey, diskMb: SMALL_DISK_MB };
  const sandboxes: Sandbox[] = [];
  try {
    for (let i = 0; i < 5; i++) sandboxes.push(await Sandbox.create({ ...options, image }));
    const first: number[] = [];
    const awake: number[] = [];
    for (let round = 0; round < 3; round++) {
      for (const s of sandboxes) {
        const deadline = Date.now() + 30_000;
        while (!(await s.info()).frozen) {
          if (Date.now() > deadline) throw new Error('a sandbox did not freeze within 30 s');
          await new Promise((r) => setTimeout(r, 100));
        }
      }
      for (const s of sandboxes) {
        let started = performance.now();
        await s.commands.run('true');
        first.push(performance.now() - started);
        started = performance.now();
        await s.commands.run('true');
        awake.push(performance.now() - started);
      }
    }
    const sum = await metricValue(controller.url, controller.apiKey, 'warren_sandbox_thaw_seconds_sum');
    const count = await metricValue(controller.url, controller.apiKey, 'warren_sandbox_thaw_seconds_count');
    return { firstCallMs: percentiles(first), awakeCallMs: percentiles(awake), thawSecondsMean: sum / count };
  } finally {
    for (const s of sandboxes) await s.kill().catch(() => undefined);
    await controller.stop();
  }
}

/** Creates per band of the count (1-10, 11-50, 51-100, 101-250, 251-500, 501-1000, ...). */
function bands(createMs: number[]): DensityResult['createBands'] {
  const edges = [10, 50, 100, 250, 500, 1000, 2000];
  const out: DensityResult['createBands'] = [];
  let from = 1;
  for (const edge of edges) {
    if (from > createMs.length) break;
    const slice = createMs.slice(from - 1, Math.min(edge, createMs.length));
    const totalSeconds = slice.reduce((a, b) => a + b, 0) / 1000;
    out.push({ from, to: from + slice.length - 1, p50Ms: percentiles(slice).p50, perSecond: slice.length / totalSeconds });
    from = edge + 1;
  }
  return out;
}

/** Up to `count` items spread evenly over `items` (first and last included). */
function spread<T>(items: T[], count: number): T[] {
  if (items.length <= count) return [...items];
  return Array.from({ length: count }, (_, i) => items[Math.round((i * (items.length - 1)) / (count - 1))]!);
}

async function meanOf<T>(items: T[], value: (item: T) => Promise<number>): Promise<number> {
  const values: number[] = [];
  for (const item of items) values.push(await value(item));
  return values.reduce((a, b) => a + b, 0) / Math.max(1, values.length);
}

/** The mean cgroup memory (without page cache) of the sampled sandboxes, from the controller's metrics route (the engine's count). */
async function cgroupMiB(options: { baseUrl: string; apiKey: string }, ids: string[]): Promise<number> {
  return meanOf(ids, async (id) => ((await (await rest(options, 'GET', `/v1/sandboxes/${id}/metrics`)).json()) as { memoryBytes: number }).memoryBytes / MiB);
}

/** The engine's container id of a sandbox made cold (its `warren.sandbox` label is its id). */
async function containerIdOf(id: string): Promise<string | undefined> {
  const { execFile } = await import('node:child_process');
  const { promisify } = await import('node:util');
  const { stdout } = await promisify(execFile)('docker', ['ps', '-q', '--no-trunc', '--filter', `label=warren.sandbox=${id}`]);
  return stdout.trim().split('\n')[0] || undefined;
}

/** The host's busy CPU over `ms`, as a percentage of all its cores. */
async function hostCpuPercent(ms: number): Promise<number> {
  const hz = 100; // USER_HZ on Linux
  const before = await hostBusyJiffies();
  await new Promise((r) => setTimeout(r, ms));
  const busy = (await hostBusyJiffies()) - before;
  return (busy / hz / (ms / 1000) / os.cpus().length) * 100;
}

async function rest(options: { baseUrl: string; apiKey: string }, method: string, route: string): Promise<Response> {
  const res = await fetch(`${options.baseUrl}${route}`, { method, headers: { authorization: `Bearer ${options.apiKey}` } });
  if (!res.ok) throw new Error(`${method} ${route}: ${res.status} ${await res.text()}`);
  return res;
}

async function inBatches<T>(items: T[], size: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(fn));
}
