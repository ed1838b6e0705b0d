import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { CoreV1Api } from '@kubernetes/client-node';
import { CLAIM_ANNOTATION, Credentials, silentLogger, startController, UNCLAIMED, type Controller } from '@warren/controller';
import { Sandbox } from '@warren/sdk';
import { CLUSTER_STATE, openK8sFixture, type K8sFixture } from '../support/k8s-cluster.js';
import { removeStateDir } from '../support/state-dir.js';
import { until } from '../support/wait.js';

// Two controller replicas with the same keys on one namespace, as behind one Service: the state
// that matters lives on the pods (labels, the record annotation, the pool claim annotation), so
// either replica serves any sandbox, and a warm-pool pod is never handed to two sandboxes.
const repoRoot = path.resolve(import.meta.dirname, '../..');

describe('two controller replicas on one cluster', () => {
  let fixture: K8sFixture;
  let core: CoreV1Api;
  const apiKey = `wk_test_${randomBytes(16).toString('hex')}`;
  const masterKey = randomBytes(32);
  const dirs: string[] = [];
  const replicas: Controller[] = [];

  const start = async (poolSize: number): Promise<Controller> => {
    const stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-k8s-replica-'));
    dirs.push(stateDir);
    const credentials = Credentials.inMemory(apiKey, masterKey);
    const controller = await startController({
      provider: await fixture.provider({ daemonSecret: (agentId) => credentials.agentSecret(agentId) }),
      credentials,
      logger: silentLogger(),
      config: {
        port: 0,
        stateDir,
        reapIntervalMs: 1000,
        poolSize,
        limits: { memoryMb: 256, cpus: 0.25, pidsLimit: 512, ttlSeconds: 600, tmpMb: 64, openFiles: 4096, fileSizeMb: 4096, diskMb: 512 },
      },
    });
    replicas.push(controller);
    return controller;
  };
  const sandboxPods = async () =>
    (await core.listNamespacedPod({ namespace: fixture.namespace, labelSelector: 'app.kubernetes.io/managed-by=warren' })).items.filter(
      (p) => !p.metadata?.deletionTimestamp,
    );

  beforeAll(async () => {
    fixture = await openK8sFixture();
    core = fixture.admin.makeApiClient(CoreV1Api);
  }, 180_000);
  afterAll(async () => {
    for (const controller of replicas) await controller.close().catch(() => undefined);
    await fixture?.close();
    for (const dir of dirs) await removeStateDir(dir);
  });

  it("each sees and serves the other's sandboxes, and a pool race hands out distinct pods", async () => {
    const a = await start(1);
    const b = await start(1);
    await until(
      'both pools to hold a ready pod',
      async () => {
        const pool = (await sandboxPods()).filter((p) => p.metadata?.annotations?.[CLAIM_ANNOTATION] === UNCLAIMED && p.status?.phase === 'Running');
        return pool.length >= 2 ? true : undefined;
      },
      120_000,
      500,
    );

    // Made on A after B started: B finds it by id, lists it and runs commands in it, and the other way round.
    const fromA = await Sandbox.create({ baseUrl: a.url, apiKey, labels: { suite: 'replicas' }, ttlSeconds: 300 });
    const viaB = await Sandbox.connect(fromA.id, { baseUrl: b.url, apiKey });
    await fromA.files.write('/workspace/who.txt', 'a');
    expect((await viaB.commands.run('cat /workspace/who.txt')).stdout).toBe('a');
    expect((await Sandbox.list({ baseUrl: b.url, apiKey, labels: { suite: 'replicas' } })).map((s) => s.id)).toContain(fromA.id);
    viaB.close();
    const fromB = await Sandbox.create({ baseUrl: b.url, apiKey, labels: { suite: 'replicas' }, ttlSeconds: 300 });
    expect((await Sandbox.connect(fromB.id, { baseUrl: a.url, apiKey }).then((s) => s.commands.run('echo hi'))).stdout).toBe('hi\n');

    // A keepalive through B moves the expiry A sees (the record lives on the pod, not in A's memory).
    const before = (await Sandbox.list({ baseUrl: a.url, apiKey, labels: { suite: 'replicas' } })).find((s) => s.id === fromA.id)!.expiresAt;
    await new Promise((r) => setTimeout(r, 1100));
    await (await Sandbox.connect(fromA.id, { baseUrl: b.url, apiKey })).setTimeout(500);
    const after = (await Sandbox.list({ baseUrl: a.url, apiKey, labels: { suite: 'replicas' } })).find((s) => s.id === fromA.id)!.expiresAt;
    expect(Date.parse(after)).toBeGreaterThan(Date.parse(before));

    // The race: four creates at once, two on each replica, over however many pool pods are left.
    const raced = await Promise.all([a, b, a, b].map((c) => Sandbox.create({ baseUrl: c.url, apiKey, labels: { suite: 'race' }, ttlSeconds: 300 })));
    const hosts = await Promise.all(raced.map(async (s) => (await s.commands.run('cat /etc/hostname')).stdout.trim()));
    expect(new Set(hosts).size).toBe(4);
    expect(new Set(raced.map((s) => s.id)).size).toBe(4);
    // Every claimed pod names exactly one sandbox, and no sandbox id is on two pods.
    const claims = (await sandboxPods()).map((p) => p.metadata?.annotations?.[CLAIM_ANNOTATION]).filter((c) => c !== undefined && c !== UNCLAIMED);
    expect(new Set(claims).size).toBe(claims.length);
    for (const s of [...raced, fromA, fromB]) await s.kill();
  });

  it('keeps sandboxes usable through one replica when the other is killed (SIGKILL) mid-use', async () => {
    // Replica A as its own process (the CLI, as deployed), with the same keys as the in-process B.
    const dirA = await mkdtemp(path.join(os.tmpdir(), 'warren-k8s-replica-a-'));
    dirs.push(dirA);
    await writeFile(path.join(dirA, 'master.key'), masterKey.toString('hex'), { mode: 0o600 });
    const configFile = path.join(dirA, 'warren.json');
    await writeFile(
      configFile,
      JSON.stringify({
        provider: 'kubernetes',
        kubernetes: { namespace: fixture.namespace, kubeconfig: path.join(CLUSTER_STATE, 'tester.kubeconfig'), imagePullPolicy: 'Never' },
        limits: { memoryMb: 256, cpus: 0.25, pidsLimit: 512, ttlSeconds: 600, tmpMb: 64, openFiles: 4096, fileSizeMb: 4096, diskMb: 512 },
      }),
    );
    const child = spawn(process.execPath, [path.join(repoRoot, 'packages/cli/bin/warren.js'), 'serve', '--port', '0'], {
      env: { ...process.env, WARREN_CONFIG: configFile, WARREN_STATE_DIR: dirA, WARREN_API_KEY: apiKey, LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
    try {
      const urlA = await new Promise<string>((resolve, reject) => {
        let out = '';
        child.stdout.on('data', (c: Buffer) => {
          out += c.toString();
          const match = /listening on (http:\/\/\S+)/.exec(out);
          if (match) resolve(match[1]!);
        });
        void exited.then(() => reject(new Error(`replica A exited: ${out}`)));
      });
      const b = replicas[1] ?? (await start(0));
      const sandbox = await Sandbox.create({ baseUrl: urlA, apiKey, ttlSeconds: 300 });
      await sandbox.files.write('/workspace/kept.txt', 'still here');
      const pod = (await sandbox.commands.run('cat /etc/hostname')).stdout.trim();
      // Mid-use: a command is running through A when A dies.
      const running = sandbox.commands.run('sleep 30').catch((err: unknown) => err);
      await new Promise((r) => setTimeout(r, 500));
      child.kill('SIGKILL');
      expect(await exited).toBe('SIGKILL');
      expect(await running).toBeInstanceOf(Error);

      const again = await Sandbox.connect(sandbox.id, { baseUrl: b.url, apiKey });
      expect((await again.commands.run('cat /workspace/kept.txt')).stdout).toBe('still here');
      expect((await again.commands.run('echo $((6*7))')).stdout).toBe('42\n');
      expect((await sandboxPods()).map((p) => p.metadata!.name)).toContain(pod);
      await again.kill();
      await until('the pod to go', async () => ((await sandboxPods()).some((p) => p.metadata!.name === pod) ? undefined : true), 60_000, 500);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
