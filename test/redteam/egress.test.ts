import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { DEFAULT_EGRESS } from '@warren/controller';
import { Sandbox } from '@warren/sdk';
import { EgressLab } from '../support/egress-lab.js';
import { startTestController, type TestController } from '../support/fixtures.js';
import { until } from '../support/wait.js';

// Every packet in this file goes to loopback or to the network namespace the lab makes: the
// sandboxes have network none, and the gateway (in this process) dials only the lab's upstream.
const execFileAsync = promisify(execFile);
const SECRET = 'e2e-s3cr3t-value-0f1e2d3c4b5a';
const run = EgressLab.available() ? describe : describe.skip;

/** A Python script run in the sandbox: urllib honours HTTP(S)_PROXY and, through OpenSSL, SSL_CERT_FILE. */
const FETCH = `
import json, os, ssl, sys, urllib.request, urllib.error
url = sys.argv[1]
ctx = ssl.create_default_context(cafile=sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] else None
headers = {}
if os.environ.get('API_KEY'):
    headers['Authorization'] = 'Bearer ' + os.environ['API_KEY']
try:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=15, context=ctx) as r:
        print(json.dumps({'status': r.status, 'body': r.read().decode()}))
except urllib.error.HTTPError as e:
    print(json.dumps({'status': e.code, 'body': e.read().decode()}))
except Exception as e:
    print(json.dumps({'status': -1, 'body': type(e).__name__ + ': ' + str(e)}))
`;

/**
 * A client that ignores the proxy variables (as curl --noproxy '*' or a Go binary with its own dialer
 * would): it resolves through /etc/resolv.conf and connects to :80 and :443 itself.
 */
const NO_PROXY_SCRIPT = [
  'import socket, ssl, urllib.request',
  'print(open("/etc/resolv.conf").read().split("nameserver ")[1].split()[0])',
  'print(socket.gethostbyname("registry.test"))',
  'try:',
  '  socket.gethostbyname("other.test"); print("other resolved")',
  'except OSError:',
  '  print("other unknown")',
  // No proxy at all: the opener ignores HTTP(S)_PROXY, as curl --noproxy '*' or a Go binary with its own dialer would.
  'opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile="/workspace/lab-ca.pem")))',
  'print(opener.open("http://registry.test/noproxy-plain", timeout=15).status)',
  'print(opener.open("https://registry.test/noproxy-tls", timeout=15).status)',
].join('\n');

interface Fetched {
  status: number;
  body: string;
}

async function fetchIn(sandbox: Sandbox, url: string, cafile = ''): Promise<Fetched> {
  const { stdout, stderr } = await sandbox.commands.run(['python3', '/workspace/fetch.py', url, cafile], { timeoutMs: 30_000 });
  try {
    return JSON.parse(stdout.trim().split('\n').at(-1) ?? '') as Fetched;
  } catch {
    throw new Error(`fetch.py said: ${stdout} ${stderr}`);
  }
}

async function controllerWith(lab: EgressLab, daemonChannel: 'socket' | 'exec'): Promise<TestController> {
  return startTestController({
    config: {
      daemonChannel,
      egress: {
        ...DEFAULT_EGRESS,
        labCidrs: [lab.labCidr],
        resolvers: [`127.0.0.1:${lab.dnsPort}`],
        maxConnectionsPerSandbox: 16,
      },
    },
    egressUpstreamCa: [lab.caPem],
  });
}

run('egress through the gateway from real sandboxes (network none, relay over the daemon channel)', () => {
  let lab: EgressLab;
  let warren: TestController;

  beforeAll(async () => {
    lab = await EgressLab.start(['registry.test', 'api.test', 'other.test', 'meta.test', 'private.test']);
    for (const name of ['registry.test', 'api.test', 'other.test']) lab.records.set(name, [lab.upstreamAddress]);
    lab.records.set('meta.test', ['169.254.169.254']);
    lab.records.set('private.test', ['10.1.2.3']);
    // The host's own end of the lab's link: inside the opened lab range, and still the host.
    lab.records.set('host.test', [lab.hostSide]);
    warren = await controllerWith(lab, 'socket');
  });

  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    await lab?.stop();
  });

  it('allows the allowed host over HTTP and HTTPS, refuses the rest clearly, and brokers a secret the sandbox never sees', async () => {
    await using sandbox = await Sandbox.create({
      baseUrl: warren.url,
      apiKey: warren.apiKey,
      egress: {
        mode: 'allow',
        rules: [
          { host: 'registry.test', ports: [80, 443] },
          { host: 'api.test', ports: [443] },
          { host: 'meta.test', ports: [80] },
          { host: 'private.test', ports: [80] },
          { host: 'host.test', ports: [80, Number(new URL(warren.url).port)] },
        ],
      },
      secrets: [{ name: 'API_KEY', value: SECRET, hosts: ['api.test'], target: { header: 'Authorization', template: 'Bearer {secret}' } }],
    });
    await sandbox.files.write('fetch.py', FETCH);
    await sandbox.files.write('lab-ca.pem', lab.caPem);

    const plain = await fetchIn(sandbox, 'http://registry.test/simple/left-pad');
    expect([plain.status, JSON.parse(plain.body).url]).toEqual([200, '/simple/left-pad']);
    // Spliced: the sandbox's TLS goes end to end to the upstream (verified with the lab's CA).
    const spliced = await fetchIn(sandbox, 'https://registry.test/tls', '/workspace/lab-ca.pem');
    expect([spliced.status, JSON.parse(spliced.body).scheme]).toEqual([200, 'https']);
    // Intercepted: the sandbox trusts Warren's CA through SSL_CERT_FILE; the upstream gets the real key.
    const brokered = await fetchIn(sandbox, 'https://api.test/v1/models');
    expect(brokered.status).toBe(200);
    expect(lab.seenAt('/v1/models').at(-1)?.headers.authorization).toBe(`Bearer ${SECRET}`);
    expect(brokered.body).not.toContain(SECRET);

    const denied = await fetchIn(sandbox, 'http://other.test/');
    expect(denied.status).toBe(403);
    expect(JSON.parse(denied.body)).toMatchObject({ error: 'egress_denied', rule: 'no-matching-rule' });
    expect((await fetchIn(sandbox, `http://${lab.upstreamAddress}/`)).status).toBe(403);
    const meta = await fetchIn(sandbox, 'http://meta.test/latest/meta-data/');
    expect([meta.status, JSON.parse(meta.body).reason]).toEqual([403, 'address-floor']);
    const priv = await fetchIn(sandbox, 'http://private.test/');
    expect([priv.status, JSON.parse(priv.body).reason]).toEqual([403, 'address-floor']);
    // A name for the host's own address, even inside the lab range the operator opened: the controller's port and any other.
    for (const target of [`http://host.test:${new URL(warren.url).port}/healthz`, 'http://host.test/']) {
      const self = await fetchIn(sandbox, target);
      expect([target, self.status, JSON.parse(self.body).rule]).toEqual([target, 403, 'floor:self']);
    }
    // The controller's own port: not reachable directly (no route), and below the floor through the relay.
    const port = new URL(warren.url).port;
    const own = await sandbox.commands.run([
      'python3',
      '-c',
      [
        'import socket',
        'try:',
        `  socket.create_connection(('127.0.0.1', ${port}), timeout=5); print('direct open')`,
        'except OSError as e:',
        "  print('direct refused')",
        "s = socket.create_connection(('127.0.0.1', 3128), timeout=10)",
        `s.sendall(b'GET http://127.0.0.1:${port}/healthz HTTP/1.1\\r\\nHost: 127.0.0.1:${port}\\r\\n\\r\\n')`,
        "print(s.recv(200).split(b'\\r\\n')[0].decode())",
      ].join('\n'),
    ]);
    expect(own.stdout.trim().split('\n')).toEqual(['direct refused', 'HTTP/1.1 403 Forbidden']);

    // The secret is nowhere inside: not in the environment, not in any process's, not in a file.
    const env = await sandbox.commands.run('env');
    expect(env.stdout).toMatch(/^API_KEY=WARREN_SECRET_[0-9a-f]{32}$/m);
    expect(env.stdout).toMatch(/^SSL_CERT_FILE=\/run\/warren-egress\/bundle.pem$/m);
    // The pattern matches the value without spelling it, so the search's own command line is not a hit.
    const pattern = `${SECRET.slice(0, -1)}[${SECRET.slice(-1)}]`;
    const search = await sandbox.commands.run(
      `grep -rls '${pattern}' /proc/[0-9]*/environ /proc/[0-9]*/cmdline /workspace /tmp /run/warren-egress /etc 2>/dev/null; echo done`,
    );
    expect(search.stdout.trim()).toBe('done');
    // Only loopback: the container has no other interface.
    const links = await sandbox.commands.run("awk 'NR>2 {print $1}' /proc/net/dev");
    expect(links.stdout.trim()).toBe('lo:');

    const events = await sandbox.network.events();
    expect(events.entries.some((e) => e.decision === 'denied' && e.host === 'other.test')).toBe(true);
    expect(events.entries.some((e) => e.decision === 'allowed' && e.host === 'api.test' && (e.secrets ?? []).includes('API_KEY'))).toBe(true);
    expect(JSON.stringify(events)).not.toContain(SECRET);
  });

  it('carries a client that ignores the proxy variables: names resolve through the relay, :80 and :443 go through the gateway', async () => {
    await using sandbox = await Sandbox.create({
      baseUrl: warren.url,
      apiKey: warren.apiKey,
      egress: { mode: 'allow', rules: [{ host: 'registry.test', ports: [80, 443] }] },
    });
    await sandbox.files.write('lab-ca.pem', lab.caPem);
    const script = NO_PROXY_SCRIPT;
    const run = await sandbox.commands.run(['python3', '-c', script], { timeoutMs: 60_000 });
    expect(run.stdout.trim().split('\n')).toEqual(['127.0.88.1', '127.0.88.1', 'other unknown', '200', '200']);
    expect(lab.seenAt('/noproxy-plain')).toHaveLength(1);
    expect(lab.seenAt('/noproxy-tls')).toHaveLength(1);
    // A daemon killed from inside: the supervisor starts the container again (a fresh daemon folder), and the
    // resolver file bound over /etc/resolv.conf must be there again, or the engine would refuse the start.
    const started = Date.now() - (await sandbox.daemonInfo()).uptimeMs;
    const { pid } = await sandbox.daemonInfo();
    const { stdout: container } = await execFileAsync('docker', ['ps', '-q', '--filter', `label=warren.sandbox=${sandbox.id}`]);
    // As root through the engine (a command runs as the sandbox user and cannot signal the daemon); 137: the exec died with the container.
    await execFileAsync('docker', ['exec', container.trim(), 'sh', '-c', `kill -9 ${pid}`]).catch((err: { code?: unknown }) => {
      if (err.code !== 137) throw err;
    });
    await until(
      'the sandbox to be started again',
      async () => {
        const info = await sandbox.daemonInfo({ timeoutMs: 5_000 }).catch(() => undefined);
        return info && Date.now() - info.uptimeMs > started + 500 ? true : undefined;
      },
      60_000,
    );
    const again = await sandbox.commands.run(['python3', '-c', script], { timeoutMs: 60_000 });
    expect(again.stdout.trim().split('\n')).toEqual(['127.0.88.1', '127.0.88.1', 'other unknown', '200', '200']);
    const hasCurl = await sandbox.commands.run('command -v curl || true');
    if (hasCurl.stdout.trim() !== '') {
      const curl = await sandbox.commands.run(
        "curl --noproxy '*' -sS -o /dev/null -w '%{http_code}' --cacert /workspace/lab-ca.pem https://registry.test/noproxy-curl",
      );
      expect(curl.stdout).toBe('200');
    }
  });

  it('takes a live policy update without a restart', async () => {
    await using sandbox = await Sandbox.create({
      baseUrl: warren.url,
      apiKey: warren.apiKey,
      egress: { mode: 'allow', rules: [{ host: 'registry.test', ports: [80] }] },
    });
    await sandbox.files.write('fetch.py', FETCH);
    expect((await fetchIn(sandbox, 'http://registry.test/a')).status).toBe(200);
    expect((await fetchIn(sandbox, 'http://other.test/a')).status).toBe(403);
    const updated = await sandbox.network.update({ mode: 'allow', rules: [{ host: 'other.test', ports: [80] }] });
    expect(updated.version).toBe(2);
    expect((await sandbox.network.get()).egress).toEqual({ mode: 'allow', rules: [{ host: 'other.test', ports: [80] }] });
    expect((await fetchIn(sandbox, 'http://other.test/b')).status).toBe(200);
    expect((await fetchIn(sandbox, 'http://registry.test/b')).status).toBe(403);
    await sandbox.network.update({ mode: 'none' });
    expect(JSON.parse((await fetchIn(sandbox, 'http://other.test/c')).body).rule).toBe('policy:none');
  });

  it('gives a sandbox with egress none no route at all: no relay, no interface, no packet out', async () => {
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    const probe = await sandbox.commands.run([
      'python3',
      '-c',
      `import socket\nfor target in [('127.0.0.1', 3128), ('${lab.upstreamAddress}', 80)]:\n  try:\n    socket.create_connection(target, timeout=5); print('open')\n  except OSError as e:\n    print('closed', e.errno)`,
    ]);
    expect(probe.stdout).not.toContain('open');
    expect((await sandbox.commands.run("awk 'NR>2 {print $1}' /proc/net/dev")).stdout.trim()).toBe('lo:');
    expect((await sandbox.commands.run('env')).stdout).not.toMatch(/PROXY/);
    await expect(sandbox.network.update({ mode: 'allow', rules: [{ host: 'registry.test' }] })).rejects.toThrow(/created without egress/);
  });

  it('keeps serving one sandbox while another floods its relay, and each sandbox reaches only its own gateway', async () => {
    const create = () =>
      Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, egress: { mode: 'allow', rules: [{ host: 'registry.test', ports: [80] }] } });
    await using flooder = await create();
    await using calm = await create();
    await calm.files.write('fetch.py', FETCH);
    const flood = flooder.commands.run(
      [
        'python3',
        '-c',
        "import socket, time\nheld = []\nfor i in range(200):\n  try:\n    held.append(socket.create_connection(('127.0.0.1', 3128), timeout=5))\n  except OSError:\n    pass\ntime.sleep(6)\nalive = 0\nfor s in held:\n  s.setblocking(False)\n  try:\n    alive += 0 if s.recv(1) == b'' else 1\n  except BlockingIOError:\n    alive += 1\n  except OSError:\n    pass\nprint(len(held), alive)",
      ],
      { timeoutMs: 60_000 },
    );
    await until('the flooder to hold its relay full', () => (warren.controller.sandboxes.egress?.openConnections(flooder.id) ?? 0) >= 16 || undefined, 20_000);
    const served = await fetchIn(calm, 'http://registry.test/calm');
    expect(served.status).toBe(200);
    const [, alive] = (await flood).stdout.trim().split(' ').map(Number);
    expect(alive).toBeLessThanOrEqual(16);
    const mine = (await calm.network.events()).entries;
    expect(mine.every((e) => e.sandboxId === calm.id)).toBe(true);
  });
});

run('egress over the exec daemon channel (remote engines, Docker Desktop)', () => {
  let lab: EgressLab;
  let warren: TestController;

  beforeAll(async () => {
    lab = await EgressLab.start(['registry.test']);
    lab.records.set('registry.test', [lab.upstreamAddress]);
    warren = await controllerWith(lab, 'exec');
  });

  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    await lab?.stop();
  });

  it('carries HTTP and HTTPS through the relay when the daemon is reached through the engine', async () => {
    await using sandbox = await Sandbox.create({
      baseUrl: warren.url,
      apiKey: warren.apiKey,
      egress: { mode: 'allow', rules: [{ host: 'registry.test', ports: [80, 443] }] },
    });
    await sandbox.files.write('fetch.py', FETCH);
    await sandbox.files.write('lab-ca.pem', lab.caPem);
    expect((await fetchIn(sandbox, 'http://registry.test/exec')).status).toBe(200);
    expect((await fetchIn(sandbox, 'https://registry.test/exec-tls', '/workspace/lab-ca.pem')).status).toBe(200);
    expect((await fetchIn(sandbox, 'http://other.test/')).status).toBe(403);
  });

  it('carries a client that ignores the proxy variables here too: the relay answers DNS and takes :80 and :443', async () => {
    await using sandbox = await Sandbox.create({
      baseUrl: warren.url,
      apiKey: warren.apiKey,
      egress: { mode: 'allow', rules: [{ host: 'registry.test', ports: [80, 443] }] },
    });
    await sandbox.files.write('lab-ca.pem', lab.caPem);
    const run = await sandbox.commands.run(['python3', '-c', NO_PROXY_SCRIPT], { timeoutMs: 60_000 });
    expect(run.stdout.trim().split('\n')).toEqual(['127.0.88.1', '127.0.88.1', 'other unknown', '200', '200']);
    expect(lab.seenAt('/noproxy-plain')).toHaveLength(1);
    expect(lab.seenAt('/noproxy-tls')).toHaveLength(1);
  });
});

describe.each(['socket', 'exec'] as const)('egress under gVisor (runtime runsc, daemonChannel %s)', (channel) => {
  let lab: EgressLab | undefined;
  let warren: TestController | undefined;
  let gvisor = false;

  beforeAll(async () => {
    if (!EgressLab.available()) return;
    lab = await EgressLab.start(['registry.test', 'api.test', 'meta.test']);
    for (const name of ['registry.test', 'api.test']) lab.records.set(name, [lab.upstreamAddress]);
    lab.records.set('meta.test', ['169.254.169.254']);
    warren = await controllerWith(lab, channel);
    // The remap engine lists runsc (it reads the same daemon.json), but gVisor does not start under its user namespace here.
    gvisor = warren.controller.sandboxes.runtimes.includes('runsc') && process.env.WARREN_TEST_ENGINE !== 'userns-remap';
  });

  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    await lab?.stop();
  });

  it('works as under runc: proxy and transparent paths, refusals, a brokered secret absent inside', async () => {
    if (!lab || !warren || !gvisor) {
      console.warn(
        'skipped: gVisor (runsc) is not registered with this Docker engine (or it is the remapped one), or the egress lab cannot run here (needs root and ip netns)',
      );
      return;
    }
    await using sandbox = await Sandbox.create({
      baseUrl: warren.url,
      apiKey: warren.apiKey,
      runtime: 'runsc',
      egress: {
        mode: 'allow',
        rules: [
          { host: 'registry.test', ports: [80, 443] },
          { host: 'api.test', ports: [443] },
          { host: 'meta.test', ports: [80] },
        ],
      },
      secrets: [{ name: 'API_KEY', value: SECRET, hosts: ['api.test'], target: { header: 'Authorization', template: 'Bearer {secret}' } }],
    });
    expect((await sandbox.info()).settings.runtime).toBe('runsc');
    const { stdout: runtime } = await execFileAsync('docker', [
      'inspect',
      '--format',
      '{{.HostConfig.Runtime}}',
      warren.controller.sandboxes.record(sandbox.id).containerId,
    ]);
    expect(runtime.trim()).toBe('runsc');
    // gVisor's own kernel answers, not the host's.
    expect((await sandbox.commands.run('dmesg')).stdout).toMatch(/gVisor/);
    await sandbox.files.write('fetch.py', FETCH);
    await sandbox.files.write('lab-ca.pem', lab.caPem);
    expect((await fetchIn(sandbox, `http://registry.test/gvisor-${channel}`)).status).toBe(200);
    expect((await fetchIn(sandbox, `https://registry.test/gvisor-tls-${channel}`, '/workspace/lab-ca.pem')).status).toBe(200);
    expect((await fetchIn(sandbox, `https://api.test/v1/gvisor-${channel}`)).status).toBe(200);
    expect(lab.seenAt(`/v1/gvisor-${channel}`).at(-1)?.headers.authorization).toBe(`Bearer ${SECRET}`);
    const denied = await fetchIn(sandbox, 'http://other.test/');
    expect([denied.status, JSON.parse(denied.body).rule]).toEqual([403, 'no-matching-rule']);
    expect((await fetchIn(sandbox, 'http://169.254.169.254/latest/meta-data/')).status).toBe(403);
    const meta = await fetchIn(sandbox, 'http://meta.test/latest/meta-data/');
    expect([meta.status, JSON.parse(meta.body).reason]).toEqual([403, 'address-floor']);
    const transparent = await sandbox.commands.run(['python3', '-c', NO_PROXY_SCRIPT], { timeoutMs: 60_000 });
    expect(transparent.stdout.trim().split('\n')).toEqual(['127.0.88.1', '127.0.88.1', 'other unknown', '200', '200']);
    const pattern = `${SECRET.slice(0, -1)}[${SECRET.slice(-1)}]`;
    const search = await sandbox.commands.run(
      `grep -rls '${pattern}' /proc/[0-9]*/environ /proc/[0-9]*/cmdline /workspace /tmp /run/warren-egress /etc 2>/dev/null; echo done`,
    );
    expect(search.stdout.trim()).toBe('done');
    expect((await sandbox.commands.run("awk 'NR>2 {print $1}' /proc/net/dev")).stdout.trim()).toBe('lo:');
  });
});
