/**
 * Kubernetes rows for scripts/bench (`--kubernetes`): on the test cluster of the k8s tier
 * (scripts/lib/k8s-cluster.sh up), a controller process with `provider: kubernetes` per daemon
 * channel, measuring create to first exec (cold, and from the warm pool) and the `true` exec round
 * trip through the controller. The Docker provider's rows of the same machine come from bench/run.ts
 * (`exec \`true\` round trip`, `create to first exec`). Reports; never fails on timing.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { access, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs, promisify } from 'node:util';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { CLAIM_ANNOTATION, collectRuntime, loadConfig, runtimeImageName, runtimeImageTar, UNCLAIMED } from '@warren/controller';
import { Sandbox } from '@warren/sdk';
import { summarize, timeIt, type Summary } from './stats.js';

const { values: flags } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    json: { type: 'string', default: 'bench-results/kubernetes.json' },
    channels: { type: 'string', default: 'pod-ip,port-forward,exec' },
  },
  strict: false,
});
const scale = flags.quick ? 0.2 : 1;
const n = (count: number) => Math.max(3, Math.round(count * scale));
const repo = path.resolve(new URL('..', import.meta.url).pathname);
const state = process.env.WARREN_K8S_STATE ?? '/var/lib/warren-k8s';
const kubeconfig = path.join(state, 'admin.kubeconfig');

interface Row {
  name: string;
  summary: Summary;
}

async function main(): Promise<void> {
  await access(kubeconfig).catch(() => {
    throw new Error(`no test cluster (${kubeconfig} is missing): scripts/lib/k8s-cluster.sh up`);
  });
  const admin = new KubeConfig();
  admin.loadFromFile(kubeconfig);
  const core = admin.makeApiClient(CoreV1Api);
  await loadRuntimeImage();
  const namespace = `warren-bench-${randomBytes(3).toString('hex')}`;
  await core.createNamespace({ body: { metadata: { name: namespace } } });
  for (let i = 0; i < 100; i++) {
    if ((await core.listNamespacedServiceAccount({ namespace })).items.some((a) => a.metadata?.name === 'default')) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const rows: Row[] = [];
  try {
    for (const channel of String(flags.channels).split(',')) {
      const controller = await startControllerProcess(namespace, channel, channel === 'pod-ip' ? 1 : 0);
      try {
        const opts = { baseUrl: controller.url, apiKey: controller.apiKey };
        progress(`${channel}: create to first exec (cold)`);
        const cold = await timeIt(
          n(10),
          async () => {
            const s = await Sandbox.create({ ...opts, ttlSeconds: 300, env: { BENCH: 'cold' } }); // env: never from the pool
            await s.commands.run('true');
            await s.kill();
          },
          1,
        );
        rows.push({ name: `k8s ${channel}: create to first exec (cold)`, summary: summarize(cold) });
        if (channel === 'pod-ip') {
          progress(`${channel}: create to first exec (pool)`);
          const pooled: number[] = [];
          for (let i = 0; i < n(10); i++) {
            await untilPoolReady(core, namespace).catch((err: Error) => {
              throw new Error(`${err.message}; the controller said: ${controller.log()}`);
            });
            const start = performance.now();
            const s = await Sandbox.create({ ...opts, ttlSeconds: 300 });
            await s.commands.run('true');
            pooled.push(performance.now() - start);
            await s.kill();
          }
          rows.push({ name: `k8s ${channel}: create to first exec (pool)`, summary: summarize(pooled) });
        }
        progress(`${channel}: exec \`true\``);
        const s = await Sandbox.create({ ...opts, ttlSeconds: 600, env: { BENCH: 'exec' } });
        try {
          rows.push({ name: `k8s ${channel}: exec \`true\` round trip`, summary: summarize(await timeIt(n(200), () => s.commands.run('true'))) });
          // A new SDK connection per call: what the channel's connect costs (TLS, port-forward, or exec).
          rows.push({
            name: `k8s ${channel}: connect + exec \`true\``,
            summary: summarize(
              await timeIt(n(30), async () => {
                const again = await Sandbox.connect(s.id, opts);
                await again.commands.run('true');
                again.close();
              }),
            ),
          });
        } finally {
          await s.kill();
        }
      } finally {
        await controller.stop();
      }
    }
  } finally {
    await core.deleteNamespace({ name: namespace, gracePeriodSeconds: 0 }).catch(() => undefined);
  }
  report(rows);
}

/** Waits until the namespace holds a running, unclaimed pool pod. */
async function untilPoolReady(core: CoreV1Api, namespace: string): Promise<void> {
  for (let i = 0; i < 600; i++) {
    const pods = await core.listNamespacedPod({ namespace, labelSelector: 'warren.pool=1' });
    const ready = pods.items.some(
      (p) =>
        p.metadata?.annotations?.[CLAIM_ANNOTATION] === UNCLAIMED &&
        !p.metadata.deletionTimestamp &&
        p.status?.containerStatuses?.every((c) => c.ready || c.state?.running),
    );
    // The pool member's daemon answered before it was listed as ready in the controller; a short
    // margin covers the controller's own bookkeeping.
    if (ready) return void (await new Promise((r) => setTimeout(r, 500)));
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error('the warm pool did not refill within two minutes');
}

async function loadRuntimeImage(): Promise<void> {
  const runtime = await collectRuntime(loadConfig({}, { stateDir: '/nonexistent' }).agentBundlePath);
  const name = runtimeImageName(runtime);
  const marker = path.join(state, 'images', `.runtime-${runtime.hash}.loaded`);
  if (
    await access(marker).then(
      () => true,
      () => false,
    )
  )
    return;
  await mkdir(path.dirname(marker), { recursive: true });
  const file = path.join(state, 'images', `runtime-${runtime.hash}.tar`);
  await writeFile(file, await runtimeImageTar(runtime, name));
  await promisify(execFile)(path.join(repo, 'scripts/lib/k8s-cluster.sh'), ['load-image', file], { timeout: 120_000 });
  await writeFile(marker, name);
}

interface ControllerProcess {
  url: string;
  apiKey: string;
  /** The controller's last warnings, for an error message. */
  log(): string;
  stop(): Promise<void>;
}

async function startControllerProcess(namespace: string, channel: string, poolSize: number): Promise<ControllerProcess> {
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-bench-k8s-'));
  const apiKey = `wk_bench_${randomBytes(16).toString('hex')}`;
  const config = path.join(stateDir, 'warren.json');
  await writeFile(
    config,
    JSON.stringify({
      provider: 'kubernetes',
      kubernetes: { namespace, kubeconfig, imagePullPolicy: 'Never', daemonChannel: channel },
      limits: { memoryMb: 256, cpus: 0.25, pidsLimit: 512, ttlSeconds: 600, tmpMb: 64, openFiles: 4096, fileSizeMb: 4096, diskMb: 512 },
    }),
  );
  const child: ChildProcess = spawn(process.execPath, [path.join(repo, 'packages/cli/bin/warren.js'), 'serve', '--port', '0'], {
    env: { ...process.env, LOG_LEVEL: 'warn', WARREN_CONFIG: config, WARREN_STATE_DIR: stateDir, WARREN_API_KEY: apiKey, WARREN_POOL_SIZE: String(poolSize) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  let out = '';
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (c: Buffer) => {
      out = (out + c.toString()).slice(-4000);
      const match = /listening on (http:\/\/\S+)/.exec(out);
      if (match) resolve(match[1]!);
    });
    child.once('exit', (code) => reject(new Error(`the controller exited (${code}): ${stderr}`)));
  });
  return {
    url,
    apiKey,
    log: () => `${out}${stderr}`.slice(-2000),
    stop: async () => {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
      await rm(stateDir, { recursive: true, force: true });
    },
  };
}

const fmt = (x: number) => (Number.isNaN(x) ? '-' : x >= 100 ? x.toFixed(0) : x.toFixed(2));

function report(rows: Row[]): void {
  const header = ['what', 'n', 'p50', 'p90', 'p99'];
  const lines = rows.map((r) => [r.name, String(r.summary.n), fmt(r.summary.p50), fmt(r.summary.p90), fmt(r.summary.p99)]);
  const table = [header, header.map(() => '---'), ...lines].map((cells) => `| ${cells.join(' | ')} |`).join('\n');
  const machine = `${os.cpus().length} cores, ${Math.round(os.totalmem() / 1024 ** 3)} GiB, Node ${process.version}`;
  process.stdout.write(`\nWarren on the k8s test cluster (Kubernetes 1.20, two nodes on this machine), milliseconds. Machine: ${machine}\n\n${table}\n`);
  const file = path.resolve(repo, String(flags.json));
  void mkdir(path.dirname(file), { recursive: true }).then(() =>
    writeFile(file, `${JSON.stringify({ date: new Date().toISOString(), machine, quick: flags.quick, rows }, null, 2)}\n`),
  );
}

function progress(what: string): void {
  process.stderr.write(`  ${what}...\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench (kubernetes) failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
