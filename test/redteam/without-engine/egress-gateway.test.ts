import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { promises as dns } from 'node:dns';
import http from 'node:http';
import net from 'node:net';
import tls from 'node:tls';
import { promisify } from 'node:util';
import { AddressFloor, parseLabCidrs } from '../../../packages/controller/src/egress/address-floor.js';
import { EgressCa } from '../../../packages/controller/src/egress/ca.js';
import type { EgressOperatorConfig } from '../../../packages/controller/src/egress/decide.js';
import type { EgressEvent } from '../../../packages/controller/src/egress/events.js';
import { EgressGateway } from '../../../packages/controller/src/egress/gateway.js';
import { DnsResolver } from '../../../packages/controller/src/egress/resolver.js';
import { EgressLab } from '../../support/egress-lab.js';
import { until } from '../../support/wait.js';

// Every packet in this file goes to loopback or to the network namespace the lab makes.
const HOSTS = ['registry.test', 'api.test', 'other.test', 'rebind.test', 'meta.test', 'mixed.test', 'slow.test'];
const SECRET = 's3cr3t-value-0123456789';
const run = EgressLab.available() ? describe : describe.skip;

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

function readAll(stream: NodeJS.ReadableStream): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => resolve(Buffer.concat(chunks).toString()));
    stream.on('error', reject);
  });
}

/** A plain-HTTP request through the proxy in absolute form. */
function viaProxy(proxyPort: number, url: string, headers: Record<string, string> = {}, method = 'GET'): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: proxyPort, method, path: url, headers: { host: new URL(url).host, ...headers }, agent: false });
    req.on('response', (res) => void readAll(res).then((body) => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }), reject));
    req.on('error', reject);
    req.end();
  });
}

/** Opens a CONNECT tunnel; the status line's code, the socket, and the refusal's body when refused. */
function connect(
  proxyPort: number,
  authority: string,
  headers: Record<string, string> = { host: authority },
): Promise<{ status: number; socket: net.Socket; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: proxyPort, method: 'CONNECT', path: authority, headers, agent: false });
    req.on('connect', (res: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
      if (res.statusCode === 200) return resolve({ status: 200, socket, body: '' });
      void readAll(socket).then((rest) => resolve({ status: res.statusCode ?? 0, socket, body: head.toString() + rest }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** An HTTPS GET over an open tunnel or socket, with the lab CA trusted. */
function httpsOver(socket: net.Socket, servername: string, path: string, ca: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const secure = tls.connect({ socket, servername, ca });
    secure.on('error', reject);
    const req = http.request({ createConnection: () => secure, path, headers: { host: servername, ...headers } });
    req.on('response', (res) => void readAll(res).then((body) => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }), reject));
    req.on('error', reject);
    req.end();
  });
}

/** Resolves with the TLS error (or closure) a refused handshake ends in; rejects if the handshake succeeds. */
function expectHandshakeRefused(socket: net.Socket, servername: string | undefined, ca: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const secure = tls.connect({ socket, ...(servername === undefined ? {} : { servername }), ca });
    secure.once('secureConnect', () => reject(new Error('the handshake succeeded')));
    secure.once('error', (err) => resolve(err.message));
    secure.once('close', () => resolve('closed'));
  });
}

run('egress gateway against a lab network namespace', () => {
  let lab: EgressLab;
  let gateway: EgressGateway;
  let events: EgressEvent[];
  let operator: EgressOperatorConfig;
  let proxyA: number;
  let proxyB: number;
  let placeholder: string;
  let queryPlaceholder: string;
  let ca: EgressCa;

  beforeAll(async () => {
    lab = await EgressLab.start(HOSTS);
    for (const name of ['registry.test', 'api.test', 'other.test', 'rebind.test']) lab.records.set(name, [lab.upstreamAddress]);
    lab.records.set('meta.test', ['169.254.169.254']);
    lab.records.set('mixed.test', ['127.0.0.1', '10.0.0.9', lab.upstreamAddress]);
    events = [];
    operator = {
      defaultPolicy: { mode: 'none' },
      maxMode: 'open',
      deny: ['*.denied.test'],
      labCidrs: [lab.labCidr],
      resolvers: [`127.0.0.1:${lab.dnsPort}`],
      maxConnectionsPerSandbox: 16,
      secrets: { apiKey: SECRET },
    };
    ca = (await EgressCa.create()).ca;
    lab.silent.add('slow.test');
    gateway = new EgressGateway({
      operator,
      onEvent: (e) => events.push(e),
      headerTimeoutMs: 2000,
      ca,
      upstreamCa: [lab.caPem],
      resolver: new DnsResolver({ servers: operator.resolvers, timeoutMs: 500, tries: 1 }),
    });
    const { env } = gateway.addSandbox(
      'a',
      {
        mode: 'allow',
        rules: [
          { host: 'registry.test', ports: [80, 443] },
          { host: 'api.test', ports: [80, 443], methods: ['GET', 'POST'], pathPrefix: '/v1/' },
          { host: 'rebind.test', ports: [80] },
          { host: 'meta.test', ports: [80] },
          { host: 'mixed.test', ports: [80] },
          { host: 'slow.test', ports: [80] },
        ],
      },
      [
        { name: 'API_KEY', ref: 'apiKey', hosts: ['api.test'], target: { header: 'Authorization', template: 'Bearer {secret}' } },
        { name: 'QUERY_KEY', value: SECRET, hosts: ['api.test'], target: { query: 'key' } },
      ],
    );
    placeholder = env.API_KEY as string;
    queryPlaceholder = env.QUERY_KEY as string;
    gateway.addSandbox('b', { mode: 'allow', rules: [{ host: 'registry.test', ports: [80, 443] }] });
    proxyA = ((await gateway.listenProxy('a', { host: '127.0.0.1', port: 0 })) as net.AddressInfo).port;
    proxyB = ((await gateway.listenProxy('b', { host: '127.0.0.1', port: 0 })) as net.AddressInfo).port;
  });

  afterAll(async () => {
    await gateway?.close();
    await lab?.stop();
  });

  it('lets an allowed name through over plain HTTP, dialling the address it resolved, and reports it', async () => {
    const answer = await viaProxy(proxyA, 'http://registry.test/pkg/left-pad?v=1');
    expect(answer.status).toBe(200);
    const seen = JSON.parse(answer.body) as { url: string; headers: Record<string, string>; remote: string };
    expect(seen).toMatchObject({ url: '/pkg/left-pad?v=1', headers: { host: 'registry.test' }, remote: lab.hostSide });
    expect(seen.headers).not.toHaveProperty('proxy-connection');
    const event = events.find((e) => e.kind === 'http' && e.path === '/pkg/left-pad');
    expect(event).toMatchObject({
      sandboxId: 'a',
      host: 'registry.test',
      port: 80,
      method: 'GET',
      decision: 'allowed',
      rule: 'rules[0]:registry.test',
      address: lab.upstreamAddress,
    });
    expect(event?.bytesIn).toBeGreaterThan(0);
    expect(JSON.stringify(event)).not.toContain('v=1');
  });

  it('lets an allowed name through over HTTPS with CONNECT, for Node and for curl', async () => {
    const tunnel = await connect(proxyA, 'registry.test:443');
    expect(tunnel.status).toBe(200);
    const answer = await httpsOver(tunnel.socket, 'registry.test', '/secure', lab.caPem);
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.body)).toMatchObject({ scheme: 'https', url: '/secure', remote: lab.hostSide });

    const caFile = `${process.env.TMPDIR ?? '/tmp'}/warren-egress-ca-${process.pid}.pem`;
    (await import('node:fs')).writeFileSync(caFile, lab.caPem);
    const { stdout } = await promisify(execFile)('curl', ['-sS', '--proxy', `http://127.0.0.1:${proxyA}`, '--cacert', caFile, 'https://registry.test/by-curl']);
    expect(JSON.parse(stdout)).toMatchObject({ scheme: 'https', url: '/by-curl' });
  });

  it('refuses a name no rule allows with a 403 naming the rule, without resolving it', async () => {
    const before = lab.queries.length;
    const answer = await viaProxy(proxyA, 'http://other.test/');
    expect(answer.status).toBe(403);
    expect(JSON.parse(answer.body)).toMatchObject({ error: 'egress_denied', rule: 'no-matching-rule', reason: 'no-matching-rule' });
    expect(JSON.parse(answer.body).message).toMatch(/registry\.test/);
    const tunnel = await connect(proxyA, 'other.test:443');
    expect(tunnel.status).toBe(403);
    expect(tunnel.body).toContain('no-matching-rule');
    const denied = await connect(proxyA, 'x.denied.test:443');
    expect(denied.body).toContain('deny[0]:*.denied.test');
    expect(lab.queries.slice(before)).toEqual([]);
    expect(lab.seenAt('/').filter((s) => s.headers.host === 'other.test')).toEqual([]);
  });

  it('refuses IP literals in every spelling, as CONNECT and as absolute-form', async () => {
    for (const literal of [lab.upstreamAddress, '2130706433', '0x7f.1', '127.1', '0', '[::1]', '[::ffff:127.0.0.1]', '[::ffff:a9fe:a9fe]', '169.254.169.254']) {
      const answer = await viaProxy(proxyA, `http://${literal}/`);
      expect([answer.status, JSON.parse(answer.body).reason]).toEqual([403, 'ip-literal']);
      const tunnel = await connect(proxyA, `${literal}:443`);
      expect(tunnel.status).toBe(403);
      expect(tunnel.body).toContain('ip-literal');
    }
    expect(lab.seen.filter((s) => s.url === '/' && s.headers.host !== 'registry.test')).toEqual([]);
  });

  it('checks every resolved address: rebinding to loopback, a private address or metadata is refused; mixed answers dial the public one', async () => {
    expect((await viaProxy(proxyA, 'http://rebind.test/first')).status).toBe(200);
    lab.records.set('rebind.test', ['127.0.0.1']);
    const loop = await viaProxy(proxyA, 'http://rebind.test/second');
    expect([loop.status, JSON.parse(loop.body).rule]).toEqual([403, 'floor:loopback']);
    lab.records.set('rebind.test', ['10.99.0.7']);
    expect(JSON.parse((await viaProxy(proxyA, 'http://rebind.test/third')).body).rule).toBe('floor:private');
    lab.records.set('rebind.test', ['::ffff:127.0.0.1']);
    expect(JSON.parse((await viaProxy(proxyA, 'http://rebind.test/fourth')).body).rule).toBe('floor:loopback');
    lab.records.set('rebind.test', [lab.upstreamAddress]);
    expect(lab.seenAt('/first')).toHaveLength(1);
    expect(lab.seen.filter((s) => ['/second', '/third', '/fourth'].includes(s.url))).toEqual([]);

    const meta = await viaProxy(proxyA, 'http://meta.test/latest/meta-data/');
    expect([meta.status, JSON.parse(meta.body).rule]).toEqual([403, 'floor:link-local']);
    expect(events.find((e) => e.host === 'meta.test')).toMatchObject({ decision: 'denied', reason: 'address-floor', floor: 'link-local' });

    const mixed = await viaProxy(proxyA, 'http://mixed.test/mixed');
    expect(mixed.status).toBe(200);
    expect(events.find((e) => e.host === 'mixed.test')?.address).toBe(lab.upstreamAddress);
  });

  it('refuses a Host header that disagrees with the target, and an SNI that disagrees with the CONNECT', async () => {
    const absolute = await viaProxy(proxyA, 'http://registry.test/h', { host: 'internal' });
    expect([absolute.status, JSON.parse(absolute.body).reason]).toEqual([403, 'host-mismatch']);
    const connectHost = await connect(proxyA, 'registry.test:443', { host: 'api.test:443' });
    expect(connectHost.status).toBe(403);
    expect(connectHost.body).toContain('host-mismatch');

    const fronted = await connect(proxyA, 'registry.test:443');
    expect(fronted.status).toBe(200);
    await expectHandshakeRefused(fronted.socket, 'api.test', lab.caPem);
    const noSni = await connect(proxyA, 'registry.test:443');
    await expectHandshakeRefused(noSni.socket, undefined, lab.caPem);
    const notTls = await connect(proxyA, 'registry.test:443');
    notTls.socket.write('GET / HTTP/1.1\r\nHost: registry.test\r\n\r\n');
    await readAll(notTls.socket);
    expect(events.filter((e) => e.kind === 'connect' && e.rule.startsWith('sni:')).map((e) => e.rule)).toEqual(['sni:mismatch', 'sni:missing', 'sni:missing']);
  });

  it('applies method and path rules to plain HTTP, after normalising the path', async () => {
    expect((await viaProxy(proxyA, 'http://api.test/v1/items')).status).toBe(200);
    expect((await viaProxy(proxyA, 'http://api.test/v1/items', {}, 'DELETE')).status).toBe(403);
    expect((await viaProxy(proxyA, 'http://api.test/v2/items')).status).toBe(403);
    const sneaky = await viaProxy(proxyA, 'http://api.test/v1/%2e%2e/admin');
    expect([sneaky.status, JSON.parse(sneaky.body).reason]).toEqual([403, 'ambiguous-path']);
    expect(lab.seen.filter((s) => s.url.includes('admin') || s.url.startsWith('/v2'))).toEqual([]);
  });

  it('writes a brokered secret only into requests to its bound host, and never shows it to the sandbox', async () => {
    expect(placeholder).toMatch(/^WARREN_SECRET_[0-9a-f]{32}$/);
    const answer = await viaProxy(proxyA, `http://api.test/v1/me?key=${queryPlaceholder}`, { authorization: `Bearer ${placeholder}` });
    expect(answer.status).toBe(200);
    const upstream = lab.seenAt('/v1/me').at(-1);
    expect(upstream?.headers.authorization).toBe(`Bearer ${SECRET}`);
    expect(upstream?.url).toBe(`/v1/me?key=${SECRET}`);
    // The upstream echoes everything back; the sandbox's side of the answer carries only placeholders.
    expect(answer.body).not.toContain(SECRET);
    expect(answer.body).toContain(placeholder);
    expect(answer.headers['x-echo-authorization']).toBe(`Bearer ${placeholder}`);

    // With no header at all, the gateway builds it from the template.
    await viaProxy(proxyA, 'http://api.test/v1/implicit');
    expect(lab.seenAt('/v1/implicit').at(-1)?.headers.authorization).toBe(`Bearer ${SECRET}`);

    // Another host gets the placeholder, never the value.
    await viaProxy(proxyA, 'http://registry.test/leak', { authorization: `Bearer ${placeholder}` });
    expect(lab.seenAt('/leak').at(-1)?.headers.authorization).toBe(`Bearer ${placeholder}`);
    expect(JSON.stringify(lab.seen.filter((s) => s.headers.host !== 'api.test'))).not.toContain(SECRET);
    expect(JSON.stringify(events)).not.toContain(SECRET);
    expect(events.find((e) => e.path === '/v1/me')?.secrets).toEqual(['API_KEY', 'QUERY_KEY']);
  });

  it('intercepts HTTPS to a host with a bound secret or a method/path rule: secret written in, rules per request, Host checked', async () => {
    const tunnel = await connect(proxyA, 'api.test:443');
    expect(tunnel.status).toBe(200);
    const answer = await httpsOver(tunnel.socket, 'api.test', '/v1/secure', ca.certPem, { authorization: `Bearer ${placeholder}` });
    expect(answer.status).toBe(200);
    expect(lab.seenAt('/v1/secure').at(-1)).toMatchObject({ scheme: 'https', headers: { authorization: `Bearer ${SECRET}` } });
    expect(answer.body).not.toContain(SECRET);
    expect(answer.headers['x-echo-authorization']).toBe(`Bearer ${placeholder}`);

    const wrongPath = await httpsOver((await connect(proxyA, 'api.test:443')).socket, 'api.test', '/admin', ca.certPem);
    expect([wrongPath.status, JSON.parse(wrongPath.body).reason]).toEqual([403, 'no-matching-rule']);
    const wrongHost = await httpsOver((await connect(proxyA, 'api.test:443')).socket, 'api.test', '/v1/x', ca.certPem, { host: 'registry.test' });
    expect([wrongHost.status, JSON.parse(wrongHost.body).reason]).toEqual([421, 'host-mismatch']);
    expect(lab.seen.filter((s) => s.url === '/admin' || s.url === '/v1/x')).toEqual([]);

    // The sandbox's client sees the gateway's certificate for api.test; spliced hosts keep their own.
    const peer = await new Promise<string>((resolve, reject) => {
      void connect(proxyA, 'api.test:443').then(({ socket }) => {
        const secure = tls.connect({ socket, servername: 'api.test', ca: ca.certPem }, () => {
          resolve(String(secure.getPeerCertificate().issuer.CN));
          secure.destroy();
        });
        secure.on('error', reject);
      }, reject);
    });
    expect(peer).toBe('Warren egress CA');
    expect(JSON.stringify(events)).not.toContain(SECRET);
    expect(events.filter((e) => e.kind === 'https').map((e) => [e.path, e.decision])).toEqual([
      ['/v1/secure', 'allowed'],
      ['/admin', 'denied'],
      ['/v1/x', 'denied'],
    ]);
  });

  it('serves the transparent TLS path by SNI, and a DNS responder that answers only allowed names', async () => {
    const transparent = (await gateway.listenTransparentTls('b', { host: '127.0.0.1', port: 0 })) as net.AddressInfo;
    const open = () => net.connect({ host: '127.0.0.1', port: transparent.port });
    const answer = await httpsOver(open(), 'registry.test', '/transparent', lab.caPem);
    expect(JSON.parse(answer.body)).toMatchObject({ scheme: 'https', url: '/transparent' });
    await expectHandshakeRefused(open(), 'api.test', lab.caPem);
    await expectHandshakeRefused(open(), undefined, lab.caPem);
    // A client that ignores proxy variables and talks to a host with a bound secret is intercepted too.
    const transparentA = (await gateway.listenTransparentTls('a', { host: '127.0.0.1', port: 0 })) as net.AddressInfo;
    const viaSni = await httpsOver(net.connect({ host: '127.0.0.1', port: transparentA.port }), 'api.test', '/v1/transparent', ca.certPem);
    expect(viaSni.status).toBe(200);
    expect(lab.seenAt('/v1/transparent').at(-1)?.headers.authorization).toBe(`Bearer ${SECRET}`);
    const sniEvents = () => events.filter((e) => e.kind === 'sni' && e.sandboxId === 'b');
    await until('three transparent-path events', () => (sniEvents().length >= 3 ? true : undefined), 5000, 20);
    expect(
      sniEvents()
        .map((e) => [e.decision, e.host, e.rule])
        .sort(),
    ).toEqual([
      ['allowed', 'registry.test', 'rules[0]:registry.test'],
      ['denied', '', 'sni:missing'],
      ['denied', 'api.test', 'no-matching-rule'],
    ]);

    const responder = await gateway.listenDns('b', { host: '127.0.0.1', port: 0 }, '127.0.0.1');
    const resolver = new dns.Resolver({ timeout: 2000, tries: 1 });
    resolver.setServers([`127.0.0.1:${responder.port}`]);
    const before = lab.queries.length;
    expect(await resolver.resolve4('registry.test')).toEqual(['127.0.0.1']);
    await expect(resolver.resolve4('secret-data.exfil.test')).rejects.toMatchObject({ code: 'ENOTFOUND' });
    expect(lab.queries.slice(before)).toEqual([]);
  });

  it('keeps one sandbox flooding the gateway from starving another', async () => {
    const started = Date.now();
    const flood = await Promise.all(Array.from({ length: 40 }, () => connect(proxyA, 'registry.test:443')));
    expect(flood.filter((t) => t.status === 200)).toHaveLength(16);
    expect(flood.filter((t) => t.status === 429)).toHaveLength(24);
    expect(flood.find((t) => t.status === 429)?.body).toContain('too-many-connections');
    const other = await viaProxy(proxyB, 'http://registry.test/fair');
    expect(other.status).toBe(200);
    expect(Date.now() - started).toBeLessThan(5000);
    for (const t of flood) t.socket.destroy();
  });

  it('swaps a policy live: the next request is decided under it and open tunnels it no longer allows are closed', async () => {
    const tunnel = await connect(proxyB, 'registry.test:443');
    expect(tunnel.status).toBe(200);
    const closed = new Promise((resolve) => tunnel.socket.once('close', resolve));
    const version = gateway.setPolicy('b', { mode: 'allow', rules: [{ host: 'api.test', ports: [80] }] });
    expect(version).toBe(2);
    await closed;
    const answer = await viaProxy(proxyB, 'http://registry.test/after');
    expect([answer.status, JSON.parse(answer.body).rule]).toEqual([403, 'no-matching-rule']);
    expect((await viaProxy(proxyB, 'http://api.test/now')).status).toBe(200);
    gateway.setPolicy('b', { mode: 'none' });
    expect(JSON.parse((await viaProxy(proxyB, 'http://api.test/now')).body).rule).toBe('policy:none');
    expect(events.at(-1)).toMatchObject({ sandboxId: 'b', policyVersion: 3 });
  });

  it('closes a spliced tunnel when a live update narrows its host to method/path rules it cannot check', async () => {
    gateway.addSandbox('e', { mode: 'allow', rules: [{ host: 'registry.test' }] });
    const port = ((await gateway.listenProxy('e', { host: '127.0.0.1', port: 0 })) as net.AddressInfo).port;
    const tunnel = await connect(port, 'registry.test:443');
    const secure = await new Promise<tls.TLSSocket>((resolve, reject) => {
      const s = tls.connect({ socket: tunnel.socket, servername: 'registry.test', ca: lab.caPem }, () => resolve(s));
      s.on('error', reject);
    });
    const closed = new Promise((resolve) => secure.once('close', resolve));
    gateway.setPolicy('e', { mode: 'allow', rules: [{ host: 'registry.test', methods: ['GET'] }] });
    await closed;
    await gateway.removeSandbox('e');
  });

  it('answers malformed, oversized, slow and unresolvable requests instead of hanging', async () => {
    for (const authority of ['registry.test:0', 'registry.test:65536', 'registry.test', 'a@registry.test:443']) {
      const r = await connect(proxyA, authority);
      expect([authority, r.status, r.body]).toEqual([authority, 400, expect.any(String)]);
    }
    const huge = await viaProxy(proxyA, 'http://registry.test/huge', { 'x-padding': 'x'.repeat(40 * 1024) });
    expect(huge.status).toBe(431);
    expect(lab.seenAt('/huge')).toEqual([]);

    const started = Date.now();
    const unresolved = await viaProxy(proxyA, 'http://slow.test/');
    expect([unresolved.status, JSON.parse(unresolved.body).reason]).toEqual([502, 'resolve-failed']);
    expect(Date.now() - started).toBeLessThan(5000);

    // A slow request head (slowloris) is cut off after the header timeout.
    const slow = net.connect({ host: '127.0.0.1', port: proxyA });
    slow.write('GET http://registry.test/slow HTTP/1.1\r\nHost: registry.test\r\n');
    const slowStarted = Date.now();
    await new Promise((resolve) =>
      slow
        .once('close', resolve)
        .on('error', () => {})
        .resume(),
    );
    expect(Date.now() - slowStarted).toBeLessThan(6000);

    // A client that offers only h2 to an intercepted host is refused during the handshake, not left hanging.
    const h2 = await connect(proxyA, 'api.test:443');
    const refused = await new Promise<string>((resolve) => {
      const secure = tls.connect({ socket: h2.socket, servername: 'api.test', ca: ca.certPem, ALPNProtocols: ['h2'] }, () =>
        resolve(`negotiated ${String(secure.alpnProtocol)}`),
      );
      secure.on('error', (err) => resolve(err.message));
    });
    expect(refused).toMatch(/no application protocol|alert|negotiated false/i);
  });

  it('refuses an upstream whose certificate it cannot verify, and never re-signs it', async () => {
    const untrusting = new EgressGateway({
      operator,
      ca,
      resolver: new DnsResolver({ servers: [`127.0.0.1:${lab.dnsPort}`] }),
      floor: new AddressFloor({ labCidrs: parseLabCidrs([lab.labCidr]) }),
    });
    try {
      untrusting.addSandbox('d', { mode: 'allow', rules: [{ host: 'api.test', methods: ['GET'] }] });
      const port = ((await untrusting.listenProxy('d', { host: '127.0.0.1', port: 0 })) as net.AddressInfo).port;
      const answer = await httpsOver((await connect(port, 'api.test:443')).socket, 'api.test', '/unverified', ca.certPem);
      expect(answer.status).toBe(502);
      expect(JSON.parse(answer.body).message).toMatch(/certificate/i);
      expect(lab.seenAt('/unverified')).toEqual([]);
    } finally {
      await untrusting.close();
    }
  });

  it('refuses the lab network on a gateway whose operator opened no lab ranges', async () => {
    const strict = new EgressGateway({
      operator: { ...operator, labCidrs: [] },
      resolver: new DnsResolver({ servers: [`127.0.0.1:${lab.dnsPort}`] }),
      floor: new AddressFloor({ labCidrs: parseLabCidrs([]) }),
    });
    try {
      strict.addSandbox('c', { mode: 'open' });
      const port = ((await strict.listenProxy('c', { host: '127.0.0.1', port: 0 })) as net.AddressInfo).port;
      const answer = await viaProxy(port, 'http://registry.test/strict');
      expect([answer.status, JSON.parse(answer.body).rule]).toEqual([403, 'floor:private']);
      expect(lab.seenAt('/strict')).toEqual([]);
    } finally {
      await strict.close();
    }
  });
});
