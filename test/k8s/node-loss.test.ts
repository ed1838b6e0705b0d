import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { CoreV1Api, type V1Pod } from '@kubernetes/client-node';
import { Credentials, silentLogger, startController, type Controller } from '@warren/controller';
import { ERROR_CODE_LIST } from '@warren/protocol';
import { Sandbox } from '@warren/sdk';
import { CLUSTER_STATE, openK8sFixture, type K8sFixture } from '../support/k8s-cluster.js';
import { removeStateDir } from '../support/state-dir.js';
import { until } from '../support/wait.js';

// A node running sandboxes goes away. So as not to disturb the tier's two nodes (other test files
// use them at the same time), the test adds a third node of its own (scripts/lib/k8s-cluster.sh
// add-node 3: its own network namespace, containerd and kubelet), tainted so that only pods that
// tolerate it land there, and removes it at the end.
const script = path.resolve(import.meta.dirname, '../../scripts/lib/k8s-cluster.sh');
const run = (...args: string[]) => promisify(execFile)(script, args, { timeout: 240_000 });
const NODE = 'node3';

describe('a node going away', () => {
  let fixture: K8sFixture;
  let core: CoreV1Api;
  let controller: Controller | undefined;
  let stateDir: string | undefined;
  let added = false;

  const pods = async (): Promise<V1Pod[]> =>
    (await core.listNamespacedPod({ namespace: fixture.namespace, labelSelector: 'app.kubernetes.io/managed-by=warren' })).items;
  const running = (p: V1Pod) => !p.metadata?.deletionTimestamp && p.status?.containerStatuses?.some((c) => c.name === 'sandbox' && c.state?.running);
  const poolPods = async () => (await pods()).filter((p) => p.metadata?.labels?.['warren.pool'] === '1' && running(p));
  const podOf = async (id: string) =>
    (await pods()).find((p) => JSON.parse(p.metadata?.annotations?.['warren.dev/record'] ?? '{}').id === id || p.metadata?.labels?.['warren.sandbox'] === id);

  beforeAll(async () => {
    fixture = await openK8sFixture();
    core = fixture.admin.makeApiClient(CoreV1Api);
    added = true;
    await run('add-node', '3');
    // The runtime image of this checkout, which openK8sFixture loaded on the tier's nodes only.
    const hash = fixture.runtimeImage.split(':')[1]!;
    await run('load-image', path.join(CLUSTER_STATE, 'images', `runtime-${hash}.tar`), '3');
  }, 300_000);
  afterAll(async () => {
    await controller?.close().catch(() => undefined);
    if (added) await run('remove-node', '3').catch((e: unknown) => console.error('remove-node 3 failed', e));
    await fixture?.close();
    if (stateDir) await removeStateDir(stateDir);
  }, 120_000);

  it('reports its sandboxes lost with typed errors, replaces its pool member, places new creates on live nodes, and leaves no pod or Secret behind', async () => {
    const apiKey = `wk_test_${randomBytes(16).toString('hex')}`;
    const credentials = Credentials.inMemory(apiKey, randomBytes(32));
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-k8s-node-loss-'));
    // Sandboxes may go to node 3 (they tolerate its taint) and prefer it while it is there.
    const provider = await fixture.provider({
      daemonChannel: 'pod-ip',
      daemonSecret: (agentId) => credentials.agentSecret(agentId),
      tolerations: [{ key: 'warren.dev/extra-node', operator: 'Exists', effect: 'NoSchedule' }],
      affinity: {
        nodeAffinity: {
          preferredDuringSchedulingIgnoredDuringExecution: [
            { weight: 100, preference: { matchExpressions: [{ key: 'warren.dev/test-node', operator: 'In', values: [NODE] }] } },
          ],
        },
      },
      nodeLostSeconds: 5,
    });
    controller = await startController({
      provider,
      credentials,
      logger: silentLogger(),
      config: {
        port: 0,
        stateDir,
        reapIntervalMs: 1000,
        poolSize: 1,
        limits: { memoryMb: 256, cpus: 0.25, pidsLimit: 512, ttlSeconds: 600, tmpMb: 64, openFiles: 4096, fileSizeMb: 4096, diskMb: 512 },
      },
    });
    const options = { baseUrl: controller.url, apiKey };

    // A pool member on node 3; a sandbox claims it, and the pool refills, on node 3 again.
    await until('a pool member on node 3', async () => ((await poolPods()).some((p) => p.spec?.nodeName === NODE) ? true : undefined), 120_000, 500);
    const lost = await Sandbox.create({ ...options, labels: { suite: 'node-loss' } });
    const lostPod = (await podOf(lost.id))!;
    expect(lostPod.spec!.nodeName).toBe(NODE);
    expect((await lost.commands.run('echo alive')).stdout).toBe('alive\n');
    await until('the pool to refill on node 3', async () => ((await poolPods()).some((p) => p.spec?.nodeName === NODE) ? true : undefined), 120_000, 500);
    const lostMember = (await poolPods()).find((p) => p.spec?.nodeName === NODE)!.metadata!.name!;
    // A call in flight when the node goes away.
    const inFlight = lost.commands.run('sleep 600').then(
      () => ({ code: 'none', message: 'the call succeeded' }),
      (e: { code?: string; message?: string }) => ({ code: e.code ?? 'no code', message: e.message }),
    );

    const killedAt = Date.now();
    await run('kill-node', '3');

    // The call in flight ends with a typed error (the SDK's CONNECTION_CLOSED once its reconnects
    // fail, or the controller's) when Kubernetes gives the node up, not never: nothing from the
    // node closes the connection, the provider ends it when the watch reports the pod gone.
    const ended = await inFlight;
    expect([...ERROR_CODE_LIST, 'CONNECTION_CLOSED']).toContain(ended.code);
    const endedAfterMs = Date.now() - killedAt;
    // Then the sandbox is gone from listings, and calls are refused as such.
    await until(
      'the lost sandbox to leave the listing',
      async () => ((await Sandbox.list(options)).some((s) => s.id === lost.id) ? undefined : true),
      120_000,
      1000,
    );
    const lostAfterMs = Date.now() - killedAt;
    // Refused as lost, with the node named, not as a sandbox that never existed.
    const why = /was lost: its node node3 stopped answering/;
    await expect(lost.commands.run('true')).rejects.toMatchObject({ code: expect.stringMatching(/^(SANDBOX_NOT_FOUND|CONNECTION_CLOSED)$/), message: why });
    await expect(Sandbox.connect(lost.id, options)).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND', message: why });

    // The pool member on node 3 was replaced by one on a live node.
    await until(
      'a pool member on a live node',
      async () => ((await poolPods()).some((p) => p.spec?.nodeName !== NODE && p.metadata?.name !== lostMember) ? true : undefined),
      120_000,
      1000,
    );
    // New creates go to live nodes.
    const fresh = await Sandbox.create({ ...options, labels: { suite: 'node-loss' } });
    try {
      expect(['node1', 'node2']).toContain((await podOf(fresh.id))!.spec!.nodeName);
      expect((await fresh.commands.run('echo fresh')).stdout).toBe('fresh\n');
    } finally {
      await fresh.kill();
    }
    // No pod of the lost node and no Secret of its pods are left.
    await until('no pod on node 3', async () => ((await pods()).some((p) => p.spec?.nodeName === NODE) ? undefined : true), 60_000, 1000);
    await until(
      'the Secrets of the lost pods to be collected',
      async () => {
        const names = (await core.listNamespacedSecret({ namespace: fixture.namespace })).items.map((s) => s.metadata!.name!);
        return names.includes(lostPod.metadata!.name!) || names.includes(lostMember) ? undefined : true;
      },
      60_000,
      1000,
    );
    console.info(
      `node-loss: the in-flight call ended with ${ended.code} (${ended.message}) after ${endedAfterMs} ms; the sandbox left the listing ${lostAfterMs} ms after the node was killed`,
    );
  }, 600_000);
});
