import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { ALL_TRAFFIC, Sandbox } from 'e2b';
import { DEFAULT_EGRESS } from '@warren/controller';
import { EgressLab } from '../support/egress-lab.js';
import { startTestController, type TestController } from '../support/fixtures.js';

// Every packet in this file goes to loopback or to the network namespace the lab makes: the
// sandboxes have network none, and the gateway (in this process) dials only the lab's upstream.
const run = EgressLab.available() ? describe : describe.skip;

/** Python in the sandbox: urllib honours HTTP_PROXY (the relay); prints the status, or -1 when no connection was made. */
const FETCH = `
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=15) as r:
        print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception as e:
    print(-1)
`;

/**
 * E2B's network settings (`network` and `allowInternetAccess` at create, `updateNetwork`) through
 * the real `e2b` SDK, mapped onto Warren's egress policy and enforced by its gateway
 * (docs/e2b.md#network).
 */
run('the e2b SDK: network settings on real sandboxes through the egress gateway', () => {
  let lab: EgressLab;
  let warren: TestController;
  let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };

  beforeAll(async () => {
    lab = await EgressLab.start(['registry.test', 'other.test']);
    for (const name of ['registry.test', 'other.test']) lab.records.set(name, [lab.upstreamAddress]);
    warren = await startTestController({
      config: { egress: { ...DEFAULT_EGRESS, labCidrs: [lab.labCidr], resolvers: [`127.0.0.1:${lab.dnsPort}`] } },
      egressUpstreamCa: [lab.caPem],
    });
    opts = { apiKey: warren.apiKey, apiUrl: `${warren.url}/e2b`, sandboxUrl: `${warren.url}/e2b` };
  }, 60_000);
  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    await lab?.stop();
  }, 60_000);

  const reach = async (sandbox: Sandbox) => {
    await sandbox.files.write('fetch.py', FETCH);
    const status = async (url: string) => Number((await sandbox.commands.run(`python3 fetch.py ${url}`, { timeoutMs: 30_000 })).stdout.trim());
    return { registry: await status('http://registry.test/r'), other: await status('http://other.test/o') };
  };

  it('allows only the hosts allowOut names when denyOut denies all, and updateNetwork swaps them at once', async () => {
    const sandbox = await Sandbox.create({ ...opts, network: { allowOut: ['registry.test'], denyOut: [ALL_TRAFFIC] } });
    try {
      expect(await reach(sandbox)).toEqual({ registry: 200, other: 403 });
      expect(lab.seenAt('/r').length).toBeGreaterThan(0);
      expect(lab.seenAt('/o')).toHaveLength(0);
      const info = await sandbox.getInfo();
      expect(info).toMatchObject({ allowInternetAccess: false, network: { allowOut: ['registry.test'], denyOut: [ALL_TRAFFIC] } });

      await sandbox.updateNetwork({ allowOut: ['other.test'], denyOut: [ALL_TRAFFIC] });
      expect(await reach(sandbox)).toEqual({ registry: 403, other: 200 });

      await sandbox.updateNetwork({ allowInternetAccess: false });
      expect(await reach(sandbox)).toEqual({ registry: 403, other: 403 });

      // E2B allows all traffic when nothing is denied; this controller's egress.maxMode is 'allow', so that is refused, saying how to allow hosts.
      await expect(sandbox.updateNetwork({ allowOut: ['registry.test'] })).rejects.toThrow(/403.*not permitted.*denyOut/);
      // What Warren cannot enforce is refused, naming it; the policy stays as it was.
      await expect(sandbox.updateNetwork({ allowOut: [lab.upstreamAddress], denyOut: [ALL_TRAFFIC] })).rejects.toThrow(/400.*never addresses/);
      await expect(sandbox.updateNetwork({ denyOut: ['10.0.0.0/8'] })).rejects.toThrow(/400.*denyOut/);
      expect(await reach(sandbox)).toEqual({ registry: 403, other: 403 });
      // A lab address asked for by number is never reachable, whatever the policy.
      await sandbox.updateNetwork({ allowOut: ['registry.test'], denyOut: [ALL_TRAFFIC] });
      expect(Number((await sandbox.commands.run(`python3 fetch.py http://${lab.upstreamAddress}/n`)).stdout.trim())).toBe(403);
    } finally {
      await sandbox.kill();
    }
  }, 180_000);

  it('opens a sandbox created with no internet access later; a sandbox created without network settings says why it cannot change', async () => {
    const closed = await Sandbox.create({ ...opts, allowInternetAccess: false });
    const plain = await Sandbox.create(opts);
    try {
      expect(await reach(closed)).toEqual({ registry: 403, other: 403 });
      await closed.updateNetwork({ allowOut: ['registry.test'], denyOut: [ALL_TRAFFIC] });
      expect(await reach(closed)).toEqual({ registry: 200, other: 403 });

      await expect(plain.updateNetwork({ allowOut: ['registry.test'], denyOut: [ALL_TRAFFIC] })).rejects.toThrow(
        /400.*created without a network configuration.*allowInternetAccess/,
      );
      expect(await reach(plain)).toEqual({ registry: -1, other: -1 });
      // A derived, narrower token may not change the network (lifecycle access), as on Warren's own route.
      const derived = await fetch(`${warren.url}/v1/sandboxes/${closed.sandboxId}/derive`, {
        method: 'POST',
        headers: { authorization: `Bearer ${warren.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ allowExec: false }),
      });
      const { token } = (await derived.json()) as { token: string };
      const refused = await fetch(`${opts.apiUrl}/sandboxes/${closed.sandboxId}/network`, {
        method: 'PUT',
        headers: { 'x-api-key': token, 'content-type': 'application/json' },
        body: JSON.stringify({ allow_internet_access: true }),
      });
      expect(refused.status).toBe(401);
      // At create too: what Warren cannot enforce is refused before anything is made.
      await expect(Sandbox.create({ ...opts, network: { allowOut: ['8.8.8.8'], denyOut: [ALL_TRAFFIC] } })).rejects.toThrow(/400.*never addresses/);
      await expect(Sandbox.create({ ...opts, network: { allowOut: ['registry.test'] } })).rejects.toThrow(/403/);
      expect(warren.controller.sandboxes.list()).toHaveLength(2);
    } finally {
      await closed.kill();
      await plain.kill();
    }
  }, 180_000);
  it('keeps the link to the egress gateway in forks and in sandboxes made from a snapshot, so their network can change too', async () => {
    const parent = await Sandbox.create({ ...opts, allowInternetAccess: false });
    const made: Sandbox[] = [];
    try {
      const [fork] = await parent.fork({ count: 1 });
      expect(fork).toBeInstanceOf(Sandbox);
      made.push(fork as Sandbox);
      const snapshot = await parent.createSnapshot();
      const restored = await Sandbox.create(snapshot.snapshotId, opts);
      made.push(restored);
      for (const sandbox of made) {
        expect(await reach(sandbox)).toEqual({ registry: 403, other: 403 });
        await sandbox.updateNetwork({ allowOut: ['registry.test'], denyOut: [ALL_TRAFFIC] });
        expect(await reach(sandbox)).toEqual({ registry: 200, other: 403 });
      }
      expect(await Sandbox.deleteSnapshot(snapshot.snapshotId, opts)).toBe(true);
    } finally {
      for (const sandbox of [parent, ...made]) await sandbox.kill().catch(() => undefined);
    }
  }, 180_000);
});
