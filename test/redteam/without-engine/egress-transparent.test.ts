import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import { Resolver } from 'node:dns/promises';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import dnsPacket from 'dns-packet';
import { startAgentServer, type AgentServer } from '../../../packages/agent/src/server.js';
import { EgressCa } from '../../../packages/controller/src/egress/ca.js';
import type { EgressEvent } from '../../../packages/controller/src/egress/events.js';
import { EgressGateway } from '../../../packages/controller/src/egress/gateway.js';
import { DnsResolver } from '../../../packages/controller/src/egress/resolver.js';
import { SandboxEgress } from '../../../packages/controller/src/egress/sandbox-egress.js';
import { EgressLab } from '../../support/egress-lab.js';
import { until } from '../../support/wait.js';

// The transparent path (clients that ignore proxy variables): the daemon's relay answers DNS and
// takes :80/:443 on a loopback address of its own, and the gateway decides everything. The
// daemon runs in-process, so the relay listens on a fresh 127.88.x.1 of the host's loopback, on
// the real ports 53/80/443 (this tier runs as root); every other packet goes into the lab's namespace.
const run = EgressLab.available() && process.getuid?.() === 0 ? describe : describe.skip;
const ADDRESS = `127.88.${1 + Math.floor(Math.random() * 250)}.1`;
const MAX = 8;

interface CurlResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** curl with no proxy at all, the name pinned to what our DNS answered (this curl has no resolver option of its own). */
function curl(args: string[]): Promise<CurlResult> {
  return new Promise((resolve) => {
    execFile(
      'curl',
      ['--noproxy', '*', '--silent', '--show-error', '--max-time', '10', ...args],
      { env: { PATH: process.env.PATH ?? '' } },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

function resolverAt(port: number): Resolver {
  const resolver = new Resolver({ timeout: 2000, tries: 1 });
  resolver.setServers([`${ADDRESS}:${port}`]);
  return resolver;
}

/** One DNS query over TCP (two-byte length framing); resolves with the answer packet, or undefined when the connection closes first. */
function tcpQuery(port: number, name: string): Promise<dnsPacket.Packet | undefined> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: ADDRESS, port });
    let data = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      data = Buffer.concat([data, chunk]);
      if (data.length >= 2 && data.length >= 2 + data.readUInt16BE(0)) {
        socket.destroy();
        resolve(dnsPacket.decode(data.subarray(2, 2 + data.readUInt16BE(0))));
      }
    });
    socket.on('close', () => resolve(undefined));
    socket.on('error', reject);
    socket.write(dnsPacket.streamEncode({ type: 'query', id: 7, flags: dnsPacket.RECURSION_DESIRED, questions: [{ type: 'A', name, class: 'IN' }] }));
  });
}

run('the transparent egress path: DNS and :80/:443 on the sandbox loopback, decided by the gateway', () => {
  let lab: EgressLab;
  let egress: SandboxEgress;
  let agent: AgentServer;
  let dir: string;
  let ports: { dns: number; http: number; tls: number };
  const events: EgressEvent[] = [];
  const ID = 'transparent-a';

  beforeAll(async () => {
    lab = await EgressLab.start(['registry.test', 'api.test']);
    for (const name of ['registry.test', 'api.test']) lab.records.set(name, [lab.upstreamAddress]);
    const operator = { deny: [], labCidrs: [lab.labCidr], resolvers: [`127.0.0.1:${lab.dnsPort}`], maxConnectionsPerSandbox: MAX, secrets: {} };
    const gateway = new EgressGateway({
      operator,
      ca: (await EgressCa.create()).ca,
      upstreamCa: [lab.caPem],
      headerTimeoutMs: 1500,
      onEvent: (e) => events.push(e),
      resolver: new DnsResolver({ servers: operator.resolvers, timeoutMs: 500, tries: 1 }),
    });
    egress = await SandboxEgress.create({ gateway, maxConnections: MAX, relayPort: 0, transparent: { address: ADDRESS, resolvConf: true } });
    dir = await mkdtemp(path.join(os.tmpdir(), 'warren-transparent-'));
    await writeFile(path.join(dir, 'resolv.conf'), 'nameserver 192.0.2.1\n');
    const secret = randomBytes(32).toString('hex');
    await egress.register(ID, { mode: 'allow', rules: [{ host: 'registry.test', ports: [80, 443] }] }, []);
    agent = await startAgentServer({
      socketPath: path.join(dir, 'agent.sock'),
      secret,
      policy: { root: dir, readOnly: false },
      home: dir,
      egress: { trustDir: path.join(dir, 'trust'), resolvConf: path.join(dir, 'resolv.conf') },
    });
    await egress.connect(ID, { socketPath: agent.socketPath }, secret);
    ports = egress.transparentPorts(ID)!;
  });

  afterAll(async () => {
    await egress?.close();
    await agent?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
    await lab?.stop();
  });

  it('listens on the real DNS, HTTP and HTTPS ports of its own loopback address, and leaves a resolver with other interfaces alone', async () => {
    expect(ports).toEqual({ dns: 53, http: 80, tls: 443 });
    // The host has interfaces besides loopback: not a network-none sandbox, so its resolver file is not the relay's to change.
    expect(await readFile(path.join(dir, 'resolv.conf'), 'utf8')).toBe('nameserver 192.0.2.1\n');
  });

  it('answers an allowed name with its own address and a denied one with NXDOMAIN, on UDP and TCP', async () => {
    const resolver = resolverAt(ports.dns);
    expect(await resolver.resolve4('registry.test')).toEqual([ADDRESS]);
    await expect(resolver.resolve4('api.test')).rejects.toMatchObject({ code: 'ENOTFOUND' });
    await expect(resolver.resolve4('evil.example')).rejects.toMatchObject({ code: 'ENOTFOUND' });
    const allowed = await tcpQuery(ports.dns, 'registry.test');
    expect(allowed?.answers?.map((a) => ('data' in a ? a.data : undefined))).toEqual([ADDRESS]);
    const denied = await tcpQuery(ports.dns, 'api.test');
    expect((denied as { rcode?: string } | undefined)?.rcode).toBe('NXDOMAIN');
    expect(events.some((e) => e.kind === 'dns' && e.host === 'api.test' && e.decision === 'denied')).toBe(true);
    // Nothing was forwarded: the lab's own DNS server only ever hears the gateway resolving what it dials.
    expect(lab.queries.filter((q) => q === 'evil.example')).toEqual([]);
  });

  it('carries curl --noproxy to https:// and http:// of an allowed name, through DNS and the transparent listeners', async () => {
    const [address] = await resolverAt(ports.dns).resolve4('registry.test');
    const caFile = path.join(dir, 'lab-ca.pem');
    await writeFile(caFile, lab.caPem);
    const secure = await curl(['--cacert', caFile, '--resolve', `registry.test:443:${address}`, 'https://registry.test/transparent-tls']);
    expect(secure).toMatchObject({ code: 0 });
    expect(lab.seenAt('/transparent-tls')).toHaveLength(1);
    const plain = await curl(['--resolve', `registry.test:80:${address}`, '-o', '/dev/null', '-w', '%{http_code}', 'http://registry.test/transparent-plain']);
    expect(plain.stdout).toBe('200');
    expect(lab.seenAt('/transparent-plain')).toHaveLength(1);
  });

  it('refuses a TLS hello naming a host the policy denies, and an HTTP Host it denies, whatever address was dialled', async () => {
    const closed = await new Promise<string>((resolve) => {
      const socket = tls.connect({ host: ADDRESS, port: ports.tls, servername: 'api.test', rejectUnauthorized: false });
      socket.on('secureConnect', () => resolve('connected'));
      socket.on('error', () => resolve('refused'));
      socket.on('close', () => resolve('refused'));
    });
    expect(closed).toBe('refused');
    const status = await new Promise<number>((resolve, reject) => {
      const req = http.request({ host: ADDRESS, port: ports.http, path: '/x', headers: { host: 'api.test' }, agent: false }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end();
    });
    expect(status).toBe(403);
    expect(lab.seenAt('/x')).toEqual([]);
    expect(events.some((e) => e.kind === 'sni' && e.host === 'api.test' && e.decision === 'denied')).toBe(true);
  });

  it('refuses IP literals, metadata and loopback as the Host on :80, a hello without SNI on :443, and an allowed name rebound to loopback', async () => {
    const plainTo = (host: string, target: string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = http.request({ host: ADDRESS, port: ports.http, path: target, headers: { host }, agent: false }, (res) => {
          let body = '';
          res.on('data', (chunk: Buffer) => (body += chunk.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        });
        req.on('error', reject);
        req.end();
      });
    for (const host of ['169.254.169.254', lab.upstreamAddress, '127.0.0.1:8080', '[::1]', '2130706433', '[fd00:ec2::254]']) {
      const answer = await plainTo(host, '/literal');
      expect([host, answer.status, JSON.parse(answer.body).reason]).toEqual([host, 403, 'ip-literal']);
    }
    // Node sends no SNI for an IP address: a hello that names nothing is closed, never dialled somewhere.
    const noSni = await new Promise<string>((resolve) => {
      const socket = tls.connect({ host: ADDRESS, port: ports.tls, rejectUnauthorized: false, servername: '' });
      socket.on('secureConnect', () => resolve('connected'));
      socket.on('error', () => resolve('refused'));
      socket.on('close', () => resolve('refused'));
    });
    expect(noSni).toBe('refused');
    // The relay's DNS answered with its own address; the gateway resolves the name again when it dials.
    lab.records.set('registry.test', ['127.0.0.1']);
    try {
      const rebound = await plainTo('registry.test', '/rebound');
      expect([rebound.status, JSON.parse(rebound.body).rule]).toEqual([403, 'floor:loopback']);
      lab.records.set('registry.test', ['169.254.169.254']);
      expect(JSON.parse((await plainTo('registry.test', '/rebound')).body).rule).toBe('floor:link-local');
    } finally {
      lab.records.set('registry.test', [lab.upstreamAddress]);
    }
    expect(lab.seenAt('/literal')).toEqual([]);
    expect(lab.seenAt('/rebound')).toEqual([]);
  });

  it('bounds a DNS flood and garbage (oversized, truncated, odd bytes in names) and still answers afterwards', async () => {
    const flood = dgram.createSocket('udp4');
    await new Promise<void>((resolve) => flood.bind(0, ADDRESS, () => resolve()));
    let answers = 0;
    flood.on('message', () => (answers += 1));
    let peak = 0;
    const sampler = setInterval(() => (peak = Math.max(peak, egress.openConnections(ID))), 5);
    const send = (message: Buffer) => new Promise<void>((resolve) => flood.send(message, ports.dns, ADDRESS, () => resolve()));
    const query = (name: string, id: number) =>
      dnsPacket.encode({ type: 'query', id, flags: dnsPacket.RECURSION_DESIRED, questions: [{ type: 'A', name, class: 'IN' }] });
    for (let i = 0; i < 2000; i++) {
      await send(query(`n${i}.flood.test`, i & 0xffff));
      if (i % 20 === 0) await new Promise((resolve) => setTimeout(resolve, 1)); // let the relay (same process) read
    }
    await send(randomBytes(5000));
    await send(randomBytes(3));
    await send(randomBytes(300));
    const odd = Buffer.from(query('aaaa.test', 1));
    odd.write('\u0000\u00ff\n\r', 13, 'latin1'); // bytes inside the first label
    await send(odd);
    await send(Buffer.concat([query('registry.test', 2).subarray(0, 20)]));
    // One slot per query in flight, never more than the cap, on the relay's side and the controller's.
    clearInterval(sampler);
    expect(peak).toBeGreaterThan(0);
    expect(peak).toBeLessThanOrEqual(MAX);
    await until('the flood drained', async () => (egress.openConnections(ID) === 0 ? true : undefined), 10_000);
    expect(answers).toBeLessThan(2000);
    expect(answers).toBeGreaterThan(0);
    // Queries still queued in the socket's buffer are worked off a few at a time; then the next one is answered.
    const again = await until(
      'answered after the flood',
      async () =>
        resolverAt(ports.dns)
          .resolve4('registry.test')
          .catch(() => undefined),
      15_000,
    );
    expect(again).toEqual([ADDRESS]);
    flood.close();
    const secure = await curl([
      '-k',
      '--resolve',
      `registry.test:443:${ADDRESS}`,
      '-o',
      '/dev/null',
      '-w',
      '%{http_code}',
      'https://registry.test/after-flood',
    ]);
    expect(secure.stdout).toBe('200');
  }, 30_000);
});
