// The long reliability run (scripts/soak): N sandboxes, several SDK clients each, file and exec
// calls for a bounded time, with faults injected along the way; then every acknowledged write is
// read back. Prints one summary: calls, errors by code, lost writes, peak memory, faults.
// The controller runs as its own process, as users run it (`warren serve`), so it can be killed.
import { spawn, type ChildProcess } from 'node:child_process';
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream, mkdirSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs, promisify } from 'node:util';
import { Sandbox, WarrenError } from '@warren/sdk';
import { reasonNotToRestartEngine, startEngine, stopEngine } from '../test/support/engine.js';

const run = promisify(execFile);
// Both soak/run.ts and its bundle in .warren/ sit one folder below the repository.
const repo = path.resolve(new URL('..', import.meta.url).pathname);
// The controller's own log (one JSON object per line), kept for after the run.
const controllerLogPath = path.join(repo, '.warren', 'logs', 'soak-controller.log');
mkdirSync(path.dirname(controllerLogPath), { recursive: true });
const controllerLog = createWriteStream(controllerLogPath, { flags: 'w' });
const MiB = 1024 * 1024;
/** A hang guard per call: a call that gets no answer at all counts as REQUEST_TIMEOUT. */
const CALL_TIMEOUT_MS = 30_000;

const { values: flags } = parseArgs({
  options: {
    duration: { type: 'string', default: '10m' },
    sandboxes: { type: 'string', default: '50' },
    clients: { type: 'string', default: '2' },
    'no-faults': { type: 'boolean', default: false },
    'restart-docker': { type: 'boolean', default: false },
    image: { type: 'string', default: 'warren/sandbox:latest' },
  },
});

function parseDuration(text: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!match) throw new Error(`--duration '${text}' is not a duration; use e.g. 90s, 10m or 1h`);
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[(match[2] ?? 's') as 'ms' | 's' | 'm' | 'h'];
  return Number(match[1]) * unit;
}

const durationMs = parseDuration(flags.duration);
const sandboxCount = Number(flags.sandboxes);
const clientsPer = Number(flags.clients);
if (!Number.isInteger(sandboxCount) || sandboxCount < 1) throw new Error('--sandboxes must be a positive integer');
if (!Number.isInteger(clientsPer) || clientsPer < 1) throw new Error('--clients must be a positive integer');
const faultsOn = !flags['no-faults'];
// The victims of the sandbox-level faults need sandboxes of their own besides the survivors.
if (faultsOn && sandboxCount < 4) throw new Error('with faults, --sandboxes must be at least 4 (two are fault victims)');

const log = (text: string) => process.stderr.write(`==> ${text}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The controller as `warren serve`, in its own process; restartable on the same port and state. */
class Controller {
  child!: ChildProcess;
  url = '';
  constructor(
    readonly stateDir: string,
    readonly apiKey: string,
  ) {}

  async start(port = 0): Promise<void> {
    const child = spawn(process.execPath, [path.join(repo, 'packages/cli/bin/warren.js'), 'serve', '--port', String(port)], {
      env: { ...process.env, WARREN_STATE_DIR: this.stateDir, WARREN_API_KEY: this.apiKey, WARREN_MAX_SANDBOXES: String(sandboxCount + 10) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => {
      stderr = (stderr + c.toString()).slice(-4000);
      controllerLog.write(c);
    });
    this.url = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (c: Buffer) => {
        out += c.toString();
        const match = /listening on (http:\/\/\S+)/.exec(out);
        if (match) resolve(match[1]!);
      });
      child.once('exit', (code, signal) => reject(new Error(`the controller exited (${code ?? signal}) before it listened: ${stderr}`)));
    });
    child.stdout.resume();
    this.child = child;
  }

  get port(): number {
    return Number(new URL(this.url).port);
  }

  async stop(signal: NodeJS.Signals): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    this.child.kill(signal);
    await exited;
  }

  async rssBytes(): Promise<number> {
    const status = await readFile(`/proc/${this.child.pid}/status`, 'utf8').catch(() => '');
    return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) * 1024;
  }
}

interface Stats {
  calls: number;
  ok: number;
  errors: Map<string, number>;
  /** Errors of sandboxes a fault hit on purpose (removed, or restarted), apart from the rest. */
  victimErrors: Map<string, number>;
  untyped: string[];
  mismatches: string[];
  peakControllerRss: number;
  peakDaemonRss: number;
  faults: string[];
}

const stats: Stats = {
  calls: 0,
  ok: 0,
  errors: new Map(),
  victimErrors: new Map(),
  untyped: [],
  mismatches: [],
  peakControllerRss: 0,
  peakDaemonRss: 0,
  faults: [],
};
const bump = (m: Map<string, number>, k: string) => m.set(k, (m.get(k) ?? 0) + 1);

interface Slot {
  index: number;
  owner: Sandbox;
  clients: Sandbox[];
  /** path -> content of every write that was acknowledged. */
  acked: Map<string, Buffer>;
  /** A fault hit this sandbox on purpose: its errors are counted apart. */
  victim: boolean;
  /** Removed from outside: nothing of it is read back. */
  removed: boolean;
  /** Started again (daemon killed, engine restarted): files are read back, its ticker is gone. */
  restarted: boolean;
}

async function main(): Promise<void> {
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-soak-'));
  const controller = new Controller(stateDir, `wk_soak_${randomBytes(16).toString('hex')}`);
  await controller.start();
  log(`controller at ${controller.url} (pid ${controller.child.pid}; its log: ${path.relative(process.cwd(), controllerLogPath)})`);
  const options = () => ({ baseUrl: controller.url, apiKey: controller.apiKey });
  const slots: Slot[] = [];
  try {
    log(`creating ${sandboxCount} sandboxes, ${clientsPer} SDK clients each`);
    for (let i = 0; i < sandboxCount; i += 5) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(5, sandboxCount - i) }, () =>
          Sandbox.create({ ...options(), image: flags.image, ttlSeconds: Math.ceil(durationMs / 1000) + 1800, labels: { purpose: 'soak' } }),
        ),
      );
      for (const owner of batch) {
        const extra = await Promise.all(
          Array.from({ length: clientsPer - 1 }, () => Sandbox.connect(owner.id, { baseUrl: controller.url, token: owner.token })),
        );
        slots.push({ index: slots.length, owner, clients: [owner, ...extra], acked: new Map(), victim: false, removed: false, restarted: false });
      }
    }
    // A background process in every sandbox: it must outlive a controller SIGKILL.
    await Promise.all(slots.map((s) => s.owner.files.mkdir('soak', { parents: true })));
    await Promise.all(
      slots.map((s) => s.owner.commands.start(['sh', '-c', 'while true; do date +%s%N >> /workspace/tick; sleep 1; done'], { tag: 'soak-ticker' })),
    );

    const deadline = Date.now() + durationMs;
    let stopping = false;
    const sampler = (async () => {
      for (let round = 0; !stopping; round++) {
        stats.peakControllerRss = Math.max(stats.peakControllerRss, await controller.rssBytes());
        if (round % 10 === 0) {
          for (const s of slots.filter((x) => !x.removed)) {
            const info = await s.owner.daemonInfo({ timeoutMs: 10_000 }).catch(() => undefined);
            if (info) stats.peakDaemonRss = Math.max(stats.peakDaemonRss, info.rssBytes);
          }
        }
        await sleep(1000);
      }
    })();

    const workers = slots.flatMap((slot) => slot.clients.map((client, c) => work(slot, client, c, () => stopping || Date.now() > deadline)));
    const faults = faultsOn ? injectFaults(controller, slots, deadline) : Promise.resolve();
    const progress = setInterval(
      () =>
        log(
          `${stats.calls} calls, ${stats.ok} ok, errors ${JSON.stringify(Object.fromEntries(stats.errors))}, controller RSS ${(stats.peakControllerRss / MiB).toFixed(0)} MiB peak`,
        ),
      15_000,
    );
    await Promise.all(workers);
    await faults;
    clearInterval(progress);
    stopping = true;
    await sampler;

    log('reading back every acknowledged write');
    let lost = 0;
    let checked = 0;
    const lostFiles: string[] = [];
    // Every acknowledged write of every sandbox that still exists, restarted ones included: a
    // restart keeps the workspace.
    for (const slot of slots.filter((s) => !s.removed)) {
      const fresh = await Sandbox.connect(slot.owner.id, { baseUrl: controller.url, token: slot.owner.token });
      try {
        const listing = (await fresh.commands.run('cd /workspace/soak 2>/dev/null && sha256sum *', { timeoutMs: 120_000 })).stdout;
        for (const [file, content] of slot.acked) {
          checked++;
          const want = createHash('sha256').update(content).digest('hex');
          if (!listing.includes(`${want}  ${path.basename(file)}`)) {
            lost++;
            lostFiles.push(`${slot.owner.id}:${file}`);
          }
        }
      } finally {
        fresh.close();
      }
    }
    const survivors = slots.filter((s) => !s.removed && !s.restarted);
    const ticking = await countTicking(survivors);
    printSummary({ checked, lost, lostFiles, ticking, survivors: survivors.length });
    if (lost > 0 || stats.untyped.length > 0 || stats.mismatches.length > 0) process.exitCode = 1;
  } finally {
    log('cleaning up');
    await Promise.all(slots.map((s) => s.owner.kill().catch(() => undefined)));
    await controller.stop('SIGTERM');
    await rm(stateDir, { recursive: true, force: true });
  }
}

/**
 * One SDK client's loop: writes (each one later read back), reads, execs. It goes on after a
 * fault ends its sandbox, so the summary shows what such a sandbox answers (victims' errors).
 */
async function work(slot: Slot, client: Sandbox, c: number, done: () => boolean): Promise<void> {
  for (let seq = 0; !done(); seq++) {
    const kind = seq % 5;
    let call: Promise<void>;
    if (kind === 0 || kind === 1) {
      const file = `soak/c${c}-${seq}.bin`;
      const content = randomBytes(kind === 0 ? 512 : 64 * 1024);
      call = (async () => {
        await client.files.write(file, content, { timeoutMs: CALL_TIMEOUT_MS });
        slot.acked.set(file, content);
      })();
    } else if (kind === 2 && slot.acked.size > 0) {
      const files = [...slot.acked.keys()];
      const file = files[seq % files.length]!;
      call = client.files.read(file, { format: 'bytes', timeoutMs: CALL_TIMEOUT_MS }).then((back) => {
        if (!Buffer.from(back).equals(slot.acked.get(file)!)) stats.mismatches.push(`${slot.owner.id}:${file}`);
      });
    } else if (kind === 3) {
      call = client.commands.run(['echo', `s${seq}`], { timeoutMs: CALL_TIMEOUT_MS }).then((r) => {
        if (r.stdout !== `s${seq}\n`) stats.mismatches.push(`${slot.owner.id}: echo answered ${JSON.stringify(r.stdout)}`);
      });
    } else {
      call = client.commands
        .run('ls /workspace/soak | wc -l >/dev/null; head -c 16384 /dev/urandom | sha256sum >/dev/null', { timeoutMs: CALL_TIMEOUT_MS })
        .then(() => undefined);
    }
    stats.calls++;
    try {
      await call;
      stats.ok++;
    } catch (err) {
      if (err instanceof WarrenError) bump(slot.victim ? stats.victimErrors : stats.errors, err.code);
      else stats.untyped.push(err instanceof Error ? `${err.name}: ${err.message}` : String(err));
      await sleep(200);
    }
  }
}

/** Faults at fixed points of the run; each is logged with what was observed. */
async function injectFaults(controller: Controller, slots: Slot[], deadline: number): Promise<void> {
  const start = Date.now();
  const at = async (fraction: number) => {
    const when = start + (deadline - start) * fraction;
    while (Date.now() < when) await sleep(Math.min(500, when - Date.now()));
  };
  /** How long until the controller has started the sandbox again (its daemon started after `killedAt`). */
  const restarted = async (sandbox: Sandbox, killedAt: number) => {
    for (;;) {
      const info = await sandbox.daemonInfo({ timeoutMs: 10_000 }).catch(() => undefined);
      if (info && Date.now() - info.uptimeMs > killedAt) return `started again with its files after ${((Date.now() - killedAt) / 1000).toFixed(1)} s`;
      if (Date.now() - killedAt > 120_000) return 'NOT started again within 120 s';
      await sleep(250);
    }
  };
  const ended = async (sandbox: Sandbox) => {
    const t = Date.now();
    for (;;) {
      const state = await sandbox.info().then(
        (i) => i.state,
        (err: unknown) => (err instanceof WarrenError ? err.code : 'UNTYPED'),
      );
      if (['exited', 'gone', 'SANDBOX_NOT_FOUND'].includes(state)) return `reported ${state} after ${((Date.now() - t) / 1000).toFixed(1)} s`;
      if (Date.now() - t > 60_000) return `still reported ${state} after 60 s (NOT detected)`;
      await sleep(250);
    }
  };

  await at(0.2);
  const daemonVictim = slots[slots.length - 1]!;
  daemonVictim.victim = true;
  daemonVictim.restarted = true;
  try {
    const { pid } = await daemonVictim.owner.daemonInfo();
    const [container] = await containerIds(daemonVictim.owner.id);
    const killedAt = Date.now();
    // The exec may die with the container (exit 137): that is the kill working.
    await run('docker', ['exec', container!, 'sh', '-c', `kill -9 ${pid}`]).catch(() => undefined);
    stats.faults.push(`daemon SIGKILL (sandbox ${daemonVictim.owner.id.slice(0, 8)}): ${await restarted(daemonVictim.owner, killedAt)}`);
  } catch (err) {
    stats.faults.push(`daemon SIGKILL: could not inject: ${(err as Error).message}`);
  }

  await at(0.35);
  const rmVictim = slots[slots.length - 2]!;
  rmVictim.victim = true;
  rmVictim.removed = true;
  try {
    const [container] = await containerIds(rmVictim.owner.id);
    await run('docker', ['rm', '-f', container!]);
    stats.faults.push(`docker rm -f (sandbox ${rmVictim.owner.id.slice(0, 8)}): ${await ended(rmVictim.owner)}`);
  } catch (err) {
    stats.faults.push(`docker rm -f: could not inject: ${(err as Error).message}`);
  }

  await at(0.5);
  {
    const okBefore = stats.ok;
    const port = controller.port;
    await controller.stop('SIGKILL');
    await sleep(1000);
    const t = Date.now();
    await controller.start(port);
    const back = Date.now() - t;
    // Calls succeed again through the same clients (the SDK reconnects them).
    const resumed = await waitFor(() => stats.ok > okBefore + 50, 60_000);
    const ticking = await countTicking(slots.filter((s) => !s.victim).slice(0, 5));
    stats.faults.push(
      `controller SIGKILL mid-load: restarted in ${(back / 1000).toFixed(1)} s, clients ${resumed ? 'resumed' : 'did NOT resume within 60 s'}, background processes ticking in ${ticking}/${Math.min(5, slots.length - 2)} sandboxes checked`,
    );
  }

  if (flags['restart-docker']) {
    await at(0.7);
    stats.faults.push(`Docker engine restart: ${await restartDocker(controller)}`);
    // Containers stop with the engine (no live-restore): the controller starts them again with
    // their files (read back at the end like the others), but their background tickers are gone.
    for (const s of slots) s.restarted = true;
  }
}

async function waitFor(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  const t = Date.now();
  while (!condition()) {
    if (Date.now() - t > timeoutMs) return false;
    await sleep(200);
  }
  return true;
}

/** Restarts dockerd (only with --restart-docker: it stops every container on this engine). */
async function restartDocker(controller: Controller): Promise<string> {
  const readyz = async () => (await fetch(`${controller.url}/readyz`).catch(() => undefined))?.status ?? 0;
  const refusal = await reasonNotToRestartEngine();
  if (refusal) return `skipped: ${refusal}`;
  await stopEngine();
  const whileDown = await readyz();
  const t = Date.now();
  await startEngine(repo);
  let status = 0;
  while (Date.now() - t < 180_000 && (status = await readyz()) !== 200) await sleep(500);
  return `/readyz answered ${whileDown} while the engine was down and ${status} ${((Date.now() - t) / 1000).toFixed(1)} s after it was started again (its sandboxes started again by then)`;
}

async function containerIds(sandboxId: string): Promise<string[]> {
  const { stdout } = await run('docker', ['ps', '-aq', '--no-trunc', '--filter', `label=warren.sandbox=${sandboxId}`]);
  const ids = stdout.split('\n').filter(Boolean);
  if (ids.length === 0) throw new Error(`no container for sandbox ${sandboxId}`);
  return ids;
}

/** How many of these sandboxes' background tickers wrote within the last few seconds. */
async function countTicking(slots: Slot[]): Promise<number> {
  const results = await Promise.all(
    slots.map(async (slot) => {
      const count = async () => Number((await slot.owner.commands.run('wc -l < /workspace/tick', { timeoutMs: 30_000 })).stdout.trim());
      const before = await count().catch(() => NaN);
      await sleep(2500);
      const after = await count().catch(() => NaN);
      return after > before;
    }),
  );
  return results.filter(Boolean).length;
}

function printSummary(result: { checked: number; lost: number; lostFiles: string[]; ticking: number; survivors: number }): void {
  const fmt = (m: Map<string, number>) => (m.size === 0 ? 'none' : [...m].map(([k, v]) => `${k} ${v}`).join(', '));
  const lines = [
    '',
    `Warren soak: ${flags.duration} with ${sandboxCount} sandboxes x ${clientsPer} SDK clients on ${os.cpus().length} cores, Node ${process.version}`,
    `  calls:              ${stats.calls} (${stats.ok} ok)`,
    `  errors by code:     ${fmt(stats.errors)}`,
    `  victims' errors:    ${fmt(stats.victimErrors)} (sandboxes a fault hit on purpose: removed, or restarted)`,
    `  untyped errors:     ${stats.untyped.length}${stats.untyped.length ? ` (${stats.untyped.slice(0, 3).join(' | ')})` : ''}`,
    `  wrong answers:      ${stats.mismatches.length}${stats.mismatches.length ? ` (${stats.mismatches.slice(0, 3).join(' | ')})` : ''}`,
    `  lost writes:        ${result.lost} of ${result.checked} acknowledged writes read back${result.lost ? ` (${result.lostFiles.slice(0, 3).join(', ')})` : ''}`,
    `  peak controller RSS: ${(stats.peakControllerRss / MiB).toFixed(0)} MiB`,
    `  peak daemon RSS:    ${(stats.peakDaemonRss / MiB).toFixed(0)} MiB`,
    `  background processes ticking at the end: ${result.ticking}/${result.survivors}`,
    `  faults injected:    ${stats.faults.length === 0 ? 'none' : ''}`,
    ...stats.faults.map((f) => `    - ${f}`),
    '',
  ];
  process.stdout.write(lines.join('\n'));
}

main().catch((err: unknown) => {
  process.stderr.write(`soak failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
