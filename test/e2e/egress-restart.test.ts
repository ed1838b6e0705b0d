import { mkdir, mkdtemp, readdir, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { Sandbox } from '@warren/sdk';
import { EgressLab } from '../support/egress-lab.js';
import { ControllerProcess } from '../support/reliability.js';
import { removeStateDir } from '../support/state-dir.js';
import { until } from '../support/wait.js';

// Every packet in this file goes to loopback or to the network namespace the lab makes.
const SECRET = 'restart-s3cr3t-7a6b5c4d3e2f1a0b';
const run = EgressLab.available() ? describe : describe.skip;
const docker = new Docker();

/** urllib through the proxy variables; with `noproxy`, a client that ignores them (the transparent path). */
const FETCH = `
import json, os, sys, urllib.request, urllib.error
url, mode = sys.argv[1], sys.argv[2]
headers = {'Authorization': 'Bearer ' + os.environ['API_KEY']} if os.environ.get('API_KEY') and 'api.test' in url else {}
opener = urllib.request.build_opener(urllib.request.ProxyHandler({})) if mode == 'noproxy' else urllib.request.build_opener()
try:
    with opener.open(urllib.request.Request(url, headers=headers), timeout=15) as r:
        print(json.dumps({'status': r.status, 'body': r.read().decode()}))
except urllib.error.HTTPError as e:
    print(json.dumps({'status': e.code, 'body': e.read().decode()}))
except Exception as e:
    print(json.dumps({'status': -1, 'body': type(e).__name__ + ': ' + str(e)}))
`;

async function fetchIn(sandbox: Sandbox, url: string, mode: 'proxy' | 'noproxy' = 'proxy'): Promise<{ status: number; body: string }> {
  const { stdout, stderr } = await sandbox.commands.run(['python3', '/workspace/fetch.py', url, mode], { timeoutMs: 30_000 });
  try {
    return JSON.parse(stdout.trim().split('\n').at(-1) ?? '') as { status: number; body: string };
  } catch {
    throw new Error(`fetch.py said: ${stdout} ${stderr}`);
  }
}

run('egress across a controller restart (SIGKILL, then started again on the same state folder)', () => {
  let lab: EgressLab;
  let stateDir: string;
  const processes: ControllerProcess[] = [];
  const containers: string[] = [];

  beforeAll(async () => {
    lab = await EgressLab.start(['registry.test', 'api.test', 'other.test', 'blocked.test']);
    for (const name of ['registry.test', 'api.test', 'other.test', 'blocked.test']) lab.records.set(name, [lab.upstreamAddress]);
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-egress-restart-'));
  });

  afterAll(async () => {
    for (const p of processes) await p.stop('SIGKILL');
    for (const id of containers)
      await docker
        .getContainer(id)
        .remove({ force: true, v: true })
        .catch(() => undefined);
    await removeStateDir(stateDir);
    await lab?.stop();
  });

  it.each(['socket', 'exec'] as const)(
    'keeps the policy (with its live update), the brokered secret and the transparent path (daemonChannel %s); the stored state is private and goes with the sandbox',
    async (channel) => {
      const dir = path.join(stateDir, channel);
      await mkdir(dir);
      const config = path.join(dir, 'config.json');
      // The secret comes from the operator's configuration (a `ref`), so a restart must find it again by name.
      await writeFile(
        config,
        JSON.stringify({
          egress: { labCidrs: [lab.labCidr], resolvers: [`127.0.0.1:${lab.dnsPort}`], maxConnectionsPerSandbox: 16, secrets: { lab_api: SECRET } },
        }),
      );
      const caFile = path.join(dir, 'lab-ca.pem');
      await writeFile(caFile, lab.caPem);
      const first = await ControllerProcess.start({
        WARREN_STATE_DIR: path.join(dir, 'state'),
        WARREN_CONFIG: config,
        WARREN_TEST_EGRESS_UPSTREAM_CA: caFile,
        WARREN_DAEMON_CHANNEL: channel,
      });
      processes.push(first);

      const sandbox = await Sandbox.create({
        ...first.options,
        egress: {
          mode: 'allow',
          rules: [
            { host: 'registry.test', ports: [80] },
            { host: 'api.test', ports: [443] },
          ],
        },
        secrets: [{ name: 'API_KEY', ref: 'lab_api', hosts: ['api.test'], target: { header: 'Authorization', template: 'Bearer {secret}' } }],
      });
      const [found] = await docker.listContainers({ all: true, filters: { label: [`warren.sandbox=${sandbox.id}`] } });
      containers.push(found!.Id);
      await sandbox.files.write('fetch.py', FETCH);
      expect((await fetchIn(sandbox, 'http://registry.test/before')).status).toBe(200);
      expect((await fetchIn(sandbox, `https://api.test/v1/before-${channel}`)).status).toBe(200);
      expect(lab.seenAt(`/v1/before-${channel}`).at(-1)?.headers.authorization).toBe(`Bearer ${SECRET}`);
      expect((await fetchIn(sandbox, 'http://other.test/before')).status).toBe(403);
      await sandbox.network.update({
        mode: 'allow',
        rules: [
          { host: 'registry.test', ports: [80] },
          { host: 'api.test', ports: [443] },
          { host: 'other.test', ports: [80] },
        ],
      });
      // A second sandbox is paused across the restart: it gets its relay back when it is resumed.
      const paused = await Sandbox.create({ ...first.options, egress: { mode: 'allow', rules: [{ host: 'registry.test', ports: [80] }] } });
      const [pausedContainer] = await docker.listContainers({ all: true, filters: { label: [`warren.sandbox=${paused.id}`] } });
      containers.push(pausedContainer!.Id);
      await paused.files.write('fetch.py', FETCH);
      const lifecycle = (base: string, action: 'pause' | 'resume') =>
        fetch(`${base}/v1/sandboxes/${paused.id}/${action}`, { method: 'POST', headers: { authorization: `Bearer ${first.apiKey}` } }).then((r) => {
          expect(r.status).toBe(200);
        });
      await lifecycle(first.url, 'pause');
      const placeholder = (await sandbox.commands.run('printenv API_KEY')).stdout.trim();
      expect(placeholder).toMatch(/^WARREN_SECRET_[0-9a-f]{32}$/);

      // What the controller keeps: one file for the sandbox, readable by the controller only.
      const egressDir = path.join(dir, 'state', 'egress');
      expect((await stat(egressDir)).mode & 0o777).toBe(0o700);
      expect((await readdir(egressDir)).sort()).toEqual([`${paused.id}.json`, `${sandbox.id}.json`].sort());
      expect((await stat(path.join(egressDir, `${sandbox.id}.json`))).mode & 0o777).toBe(0o600);

      await first.stop('SIGKILL');
      sandbox.close();
      paused.close();
      const second = await ControllerProcess.start({}, first);
      processes.push(second);
      const again = await Sandbox.connect(sandbox.id, { baseUrl: second.url, token: sandbox.token });
      try {
        expect(await again.network.get()).toMatchObject({ egress: { mode: 'allow' }, version: 2 });
        // The relay is opened again by the new controller: the allowed hosts work, through the proxy and without it.
        const registry = await until('the relay to be open again', async () => {
          const r = await fetchIn(again, 'http://registry.test/after');
          return r.status === 200 ? r : undefined;
        });
        expect(JSON.parse(registry.body).url).toBe('/after');
        expect((await fetchIn(again, `http://registry.test/after-noproxy-${channel}`, 'noproxy')).status).toBe(200);
        expect(lab.seenAt(`/after-noproxy-${channel}`)).toHaveLength(1);
        expect((await fetchIn(again, 'http://other.test/after')).status).toBe(200);
        const denied = await fetchIn(again, 'http://blocked.test/after');
        expect([denied.status, JSON.parse(denied.body).rule]).toEqual([403, 'no-matching-rule']);
        expect(lab.seenAt('/after').every((s) => s.headers.host !== 'blocked.test')).toBe(true);
        // The same placeholder inside, the real value still added on the way out, to the bound host only.
        expect((await again.commands.run('printenv API_KEY')).stdout.trim()).toBe(placeholder);
        const brokered = await fetchIn(again, `https://api.test/v1/after-${channel}`);
        expect(brokered.status).toBe(200);
        expect(brokered.body).not.toContain(SECRET);
        expect(lab.seenAt(`/v1/after-${channel}`).at(-1)?.headers.authorization).toBe(`Bearer ${SECRET}`);
        const elsewhere = await again.commands.run([
          'python3',
          '-c',
          "import os, sys, urllib.request\nr = urllib.request.urlopen(urllib.request.Request('http://other.test/leak-' + sys.argv[1], headers={'Authorization': 'Bearer ' + os.environ['API_KEY']}), timeout=15)\nprint(r.status)",
          channel,
        ]);
        expect(elsewhere.stdout.trim()).toBe('200');
        expect(lab.seenAt(`/leak-${channel}`).at(-1)?.headers.authorization).toBe(`Bearer ${placeholder}`);

        await lifecycle(second.url, 'resume');
        const thawed = await Sandbox.connect(paused.id, { baseUrl: second.url, token: paused.token });
        try {
          expect((await fetchIn(thawed, `http://registry.test/thawed-${channel}`)).status).toBe(200);
          expect((await fetchIn(thawed, 'http://other.test/thawed')).status).toBe(403);
          await thawed.kill();
        } finally {
          thawed.close();
        }

        await again.kill();
        expect(await readdir(egressDir)).toEqual([]);
      } finally {
        again.close();
      }
    },
  );
});
