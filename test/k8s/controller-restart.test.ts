import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Credentials, silentLogger, startController, type Controller } from '@warren/controller';
import { Sandbox } from '@warren/sdk';
import { openK8sFixture, type K8sFixture } from '../support/k8s-cluster.js';
import { removeStateDir } from '../support/state-dir.js';

// The controller keeps no state of its own that a sandbox needs: a new controller with the same
// keys (a restart, or another replica started later) rebuilds its table from the pods alone.
describe('a controller on Kubernetes restarts from the cluster alone', () => {
  let fixture: K8sFixture;
  const apiKey = `wk_test_${randomBytes(16).toString('hex')}`;
  const masterKey = randomBytes(32);
  const dirs: string[] = [];

  const start = async (): Promise<Controller> => {
    // A fresh, empty state folder each time: nothing carries over but the cluster's pods.
    const stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-k8s-'));
    dirs.push(stateDir);
    const credentials = Credentials.inMemory(apiKey, masterKey);
    return startController({
      // The daemon's TLS key comes from the secret the master key derives, as in a deployed controller.
      provider: await fixture.provider({ daemonSecret: (agentId) => credentials.agentSecret(agentId) }),
      credentials,
      logger: silentLogger(),
      config: { port: 0, stateDir, reapIntervalMs: 1000 },
    });
  };

  beforeAll(async () => {
    fixture = await openK8sFixture();
  }, 180_000);
  afterAll(async () => {
    await fixture?.close();
    for (const dir of dirs) await removeStateDir(dir);
  });

  it('finds the sandbox, its labels and its files after the first controller is gone', async () => {
    const first = await start();
    const sandbox = await Sandbox.create({ baseUrl: first.url, apiKey, labels: { suite: 'k8s-restart' }, ttlSeconds: 300 });
    await sandbox.files.write('/workspace/kept.txt', 'still here');
    sandbox.close();
    await first.close();

    const second = await start();
    try {
      const listed = await Sandbox.list({ baseUrl: second.url, apiKey, labels: { suite: 'k8s-restart' } });
      expect(listed.map((s) => s.id)).toEqual([sandbox.id]);
      const again = await Sandbox.connect(sandbox.id, { baseUrl: second.url, apiKey });
      expect((await again.commands.run('cat /workspace/kept.txt')).stdout).toBe('still here');
      await again.kill();
    } finally {
      await second.close();
    }
  });
});
