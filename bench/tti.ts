import { Sandbox } from '@warren/sdk';
import { SMALL_DISK_MB, startControllerProcess, type ControllerProcess } from './controller-process.js';
import { fmt, hasRunsc, machine, metricValue, percentiles, progress, table, writeOut } from './modes-common.js';
import { report } from './modes-common.js';

interface TtiRow {
  what: string;
  runtime: 'runc' | 'runsc';
  samples: number[];
  errors: number;
  /** For a burst: from the first create sent to the last first output. */
  wallMs?: number;
}

/**
 * `scripts/bench --tti [--burst N]`: time to interactive as a user of the SDK sees it, from
 * `Sandbox.create()` to the output of the first command (`echo ready`), cold (an env the warm
 * pool's template lacks) and from the warm pool, one after another and as a burst of N
 * concurrent creates. Kills are not timed. The controller runs on this machine: no network
 * between client and controller, unlike hosted services' published figures.
 */
export async function ttiMode(options: { burst: number; sequential: number; image: string; jsonFile: string }): Promise<void> {
  const { burst, sequential, image } = options;
  const rows: TtiRow[] = [];
  const runtimes: ('runc' | 'runsc')[] = (await hasRunsc()) ? ['runc', 'runsc'] : ['runc'];
  // The pool's template is the default image and settings; a pool as large as the burst, so a pooled burst is all claims.
  const poolSize = Math.min(100, Math.max(2, burst));
  const controller = await startControllerProcess({
    WARREN_POOL_SIZE: String(poolSize),
    // A pool and bursts of up to 100 default 1 GiB disks would not fit the host's disk budget.
    WARREN_DISK_MB: String(SMALL_DISK_MB),
    WARREN_MAX_SANDBOXES: String(burst * 2 + 20),
    WARREN_MAX_QUEUED_CREATES: String(burst + 10),
    WARREN_MAX_CONNECTIONS: String(burst * 2 + 100),
  });
  const base = { baseUrl: controller.url, apiKey: controller.apiKey };
  try {
    // The pool fills first: its creates would otherwise compete for the cores with the cold rows.
    progress(`tti: waiting for the warm pool of ${poolSize} to fill`);
    await poolReady(controller, poolSize, 600_000);
    for (const runtime of runtimes) {
      const cold = { ...base, image, env: { WARREN_BENCH: 'cold' }, ...(runtime === 'runsc' ? { runtime } : {}) };
      progress(`tti: ${sequential} cold creates one after another (${runtime})`);
      rows.push({ what: 'cold, sequential', runtime, ...(await sequentialRun(sequential, () => toFirstOutput(cold))) });
      progress(`tti: a burst of ${burst} cold creates (${runtime})`);
      rows.push({ what: `cold, burst of ${burst}`, runtime, ...(await burstRun(burst, () => toFirstOutput(cold))) });
    }
    progress(`tti: ${sequential} creates from the warm pool, one after another (each waits for the pool to refill)`);
    rows.push({
      what: 'warm pool, sequential',
      runtime: 'runc',
      ...(await sequentialRun(sequential, async () => {
        await poolReady(controller, 1);
        return toFirstOutput(base);
      })),
    });
    progress(`tti: waiting for a pool of ${Math.min(100, burst)}, then a burst of ${burst} pooled creates`);
    await poolReady(controller, Math.min(100, burst), 600_000);
    rows.push({ what: `warm pool, burst of ${burst}`, runtime: 'runc', ...(await burstRun(burst, () => toFirstOutput(base))) });
  } finally {
    // A pool fill still under way when the controller stops would outlive it: let the pool settle first.
    await poolReady(controller, poolSize).catch(() => undefined);
    await controller.stop();
  }
  const gvisor = runtimes.includes('runsc') ? 'gVisor (runsc) rows included' : 'gVisor: skipped, the engine has no runsc runtime';
  const header = ['Sandbox.create() to first output', 'runtime', 'n', 'errors', 'p50 (ms)', 'p95 (ms)', 'p99 (ms)', 'burst wall time (ms)'];
  const lines = rows.map((r) => {
    const p = percentiles(r.samples);
    return [r.what, r.runtime, String(p.n), String(r.errors), fmt(p.p50), fmt(p.p95), fmt(p.p99), r.wallMs === undefined ? '-' : fmt(r.wallMs)];
  });
  report(
    `\nTime to interactive, measured locally (SDK and controller on this machine, no network between them). Machine: ${machine()}\n\n${table(header, lines)}\n\n${gvisor}\n`,
  );
  await writeOut(
    options.jsonFile,
    `${JSON.stringify({ date: new Date().toISOString(), machine: machine(), image, burst, rows: rows.map((r) => ({ ...r, ...percentiles(r.samples) })) }, null, 2)}\n`,
  );
}

/** `Sandbox.create()` to the first command's output; the kill afterwards is not timed. */
async function toFirstOutput(options: Parameters<typeof Sandbox.create>[0]): Promise<{ ms: number; kill: () => Promise<void> }> {
  const started = performance.now();
  const sandbox = await Sandbox.create(options);
  const { stdout } = await sandbox.commands.run('echo ready');
  const ms = performance.now() - started;
  if (stdout.trim() !== 'ready') throw new Error(`the first command printed '${stdout.trim()}'`);
  return { ms, kill: () => sandbox.kill() };
}

async function sequentialRun(count: number, one: () => Promise<{ ms: number; kill: () => Promise<void> }>): Promise<{ samples: number[]; errors: number }> {
  const samples: number[] = [];
  let errors = 0;
  for (let i = 0; i < count; i++) {
    try {
      const { ms, kill } = await one();
      samples.push(ms);
      await kill().catch(() => undefined);
    } catch {
      errors++;
    }
  }
  return { samples, errors };
}

async function burstRun(
  count: number,
  one: () => Promise<{ ms: number; kill: () => Promise<void> }>,
): Promise<{ samples: number[]; errors: number; wallMs: number }> {
  const started = performance.now();
  const outcomes = await Promise.allSettled(Array.from({ length: count }, one));
  const wallMs = performance.now() - started;
  const samples: number[] = [];
  for (const o of outcomes) if (o.status === 'fulfilled') samples.push(o.value.ms);
  for (let i = 0; i < outcomes.length; i += 10)
    await Promise.all(outcomes.slice(i, i + 10).map((o) => (o.status === 'fulfilled' ? o.value.kill().catch(() => undefined) : Promise.resolve())));
  return { samples, errors: count - samples.length, wallMs };
}

/** Waits until the warm pool holds at least `size` ready sandboxes. */
async function poolReady(controller: ControllerProcess, size: number, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while ((await metricValue(controller.url, controller.apiKey, 'warren_sandboxes', '{state="pooled"}')) < size) {
    if (Date.now() > deadline) throw new Error(`the warm pool did not reach ${size} ready sandboxes within ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
