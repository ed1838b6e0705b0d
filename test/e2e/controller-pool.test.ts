import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { Credentials, startController, type Controller, silentLogger } from '@warren/controller';
import { Sandbox } from '@warren/sdk';
import { startTestController } from '../support/fixtures.js';
import { until } from '../support/wait.js';
import { removeStateDir } from '../support/state-dir.js';

describe('the warm pool', () => {
  const docker = new Docker();
  const apiKey = `wk_test_${randomBytes(16).toString('hex')}`;
  const masterKey = randomBytes(32);
  let stateDir: string;
  const controllers: Controller[] = [];

  const start = async () => {
    const controller = await startController({
      credentials: Credentials.inMemory(apiKey, masterKey),
      logger: silentLogger(),
      config: { port: 0, stateDir, poolSize: 1, reapIntervalMs: 1000 },
    });
    controllers.push(controller);
    return controller;
  };

  afterAll(async () => {
    const last = controllers.at(-1);
    if (last) for (const r of last.sandboxes.list()) await last.sandboxes.kill(r.id).catch(() => undefined);
    for (const c of controllers) await c.close();
    await removeStateDir(stateDir);
  });

  it('hands a matching create a ready sandbox with a fresh identity, refills, starts others cold, and survives a restart', async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-pool-'));
    const first = await start();
    await until('the pool to fill', () => (first.pool!.readyCount === 1 ? true : undefined));
    const metrics = () => fetch(`${first.url}/metrics`, { headers: { authorization: `Bearer ${apiKey}` } }).then((r) => r.text());
    expect(await metrics()).toMatch(/^warren_sandboxes\{state="pooled"\} 1/m);

    // A create that matches (labels, ttl and policy do not need another container).
    const created = await fetch(`${first.url}/v1/sandboxes`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ labels: { from: 'pool' }, ttlSeconds: 300, policy: { root: '/workspace', readOnly: false } }),
    }).then((r) => r.json() as Promise<{ id: string; token: string; pooled: boolean; readyMs: number; labels: Record<string, string> }>);
    expect(created).toMatchObject({ pooled: true, labels: { from: 'pool' } });
    const record = first.sandboxes.record(created.id);
    const { Config, Name } = await docker.getContainer(record.containerId).inspect();
    // Fresh identity: the public id is new; the container keeps the id it was made with.
    expect(record.agentId).not.toBe(created.id);
    expect(Config.Labels['warren.sandbox']).toBe(record.agentId);
    expect(Config.Labels['warren.pool']).toBe('1');
    expect(Name).not.toContain(created.id);

    const pooled = await Sandbox.connect(created.id, { baseUrl: first.url, token: created.token });
    try {
      await pooled.files.write('/workspace/p.txt', 'from the pool');
      expect((await pooled.commands.run('cat /workspace/p.txt')).stdout).toBe('from the pool');
    } finally {
      pooled.close();
    }
    // The old pool id is no public id, and its token would not be the new one.
    expect((await fetch(`${first.url}/v1/sandboxes/${record.agentId}`, { headers: { authorization: `Bearer ${apiKey}` } })).status).toBe(404);

    await until('the pool to refill', () => (first.pool!.readyCount === 1 ? true : undefined));

    // Another image does not match: cold.
    const cold = await Sandbox.create({ baseUrl: first.url, apiKey, image: 'warren/test-busybox:latest' });
    expect(first.sandboxes.record(cold.id).pooled).toBe(false);
    await cold.kill();
    expect(await metrics()).toMatch(/^warren_sandbox_creates_total\{source="pool",outcome="ok"\} 1/m);

    // A restart keeps the claimed sandbox under its public id, with its labels and token.
    await first.close();
    const second = await start();
    expect(second.sandboxes.has(created.id)).toBe(true);
    expect(await second.sandboxes.get(created.id)).toMatchObject({ id: created.id, labels: { from: 'pool' }, state: 'running' });
    const again = await Sandbox.connect(created.id, { baseUrl: second.url, token: created.token });
    try {
      expect(await again.files.read('/workspace/p.txt')).toBe('from the pool');
    } finally {
      again.close();
    }
    await until('the new pool to fill', () => (second.pool!.readyCount === 1 ? true : undefined));
  });
});

describe('the warm pool and egress', () => {
  it('never hands a sandbox with an egress policy or brokered secrets a pool member (made without relay or placeholders): those start cold', async () => {
    await using warren = await startTestController({ config: { poolSize: 1 } });
    const pool = warren.controller.pool!;
    await until('the pool to fill', () => (pool.readyCount === 1 ? true : undefined));
    const owner = warren.controller.sandboxes.credentials.instanceId;
    const members = await poolMembers(owner);
    expect(members).toHaveLength(1);
    // No traffic leaves: the policy names a host nobody resolves, and nothing is fetched.
    await using withPolicy = await Sandbox.create({
      baseUrl: warren.url,
      apiKey: warren.apiKey,
      egress: { mode: 'allow', rules: [{ host: 'registry.invalid', ports: [443] }] },
    });
    await using withSecret = await Sandbox.create({
      baseUrl: warren.url,
      apiKey: warren.apiKey,
      secrets: [{ name: 'API_KEY', value: 'pool-test-value', hosts: ['api.invalid'], target: { header: 'Authorization', template: 'Bearer {secret}' } }],
    });
    for (const sandbox of [withPolicy, withSecret]) {
      const record = warren.controller.sandboxes.record(sandbox.id);
      expect(record.pooled).toBe(false);
      expect(record.agentId).toBe(sandbox.id);
      const env = (await sandbox.commands.run('env')).stdout;
      expect(env).toMatch(/^HTTPS_PROXY=http:\/\/127\.0\.0\.1:3128$/m);
      expect(warren.controller.sandboxes.egress?.has(record.agentId)).toBe(true);
    }
    expect((await withSecret.commands.run('printenv API_KEY')).stdout.trim()).toMatch(/^WARREN_SECRET_[0-9a-f]{32}$/);
    // The pool member was left for creates without egress, untouched.
    expect(pool.readyCount).toBe(1);
    expect(await poolMembers(owner)).toEqual(members);
    // And a create without egress still takes it.
    await using plain = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    expect(warren.controller.sandboxes.record(plain.id).pooled).toBe(true);
    expect((await plain.commands.run('env')).stdout).not.toMatch(/PROXY/);
  });
});

/** The ids of one controller's warm-pool containers (label warren.pool=1), claimed or not. */
async function poolMembers(owner: string): Promise<string[]> {
  const docker = new Docker();
  const found = await docker.listContainers({ filters: { label: ['warren.pool=1', `warren.owner=${owner}`] } });
  return found.map((c) => c.Id).sort();
}
