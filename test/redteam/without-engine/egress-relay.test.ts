import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { decodeFrame, EGRESS_STREAM_WINDOW, encodeFrame, GRANT_HEADER, encodeGrant, PROTOCOL_MINOR, PROTOCOL_VERSION } from '@warren/protocol';
import { WebSocketServer, type WebSocket } from 'ws';
import { startAgentServer, type AgentServer } from '../../../packages/agent/src/server.js';
import { EgressCa } from '../../../packages/controller/src/egress/ca.js';
import type { EgressEvent } from '../../../packages/controller/src/egress/events.js';
import { EgressGateway } from '../../../packages/controller/src/egress/gateway.js';
import { DnsResolver } from '../../../packages/controller/src/egress/resolver.js';
import { SandboxEgress } from '../../../packages/controller/src/egress/sandbox-egress.js';
import { EgressTunnel } from '../../../packages/controller/src/egress/tunnel.js';
import { EgressLab } from '../../support/egress-lab.js';
import { until } from '../../support/wait.js';

/** Waits until `check` holds. */
function waitFor(what: string, check: () => boolean | Promise<boolean>, timeoutMs: number): Promise<true> {
  return until(what, async () => ((await check()) ? true : undefined), timeoutMs);
}

// Every packet in this file goes to loopback or to the network namespace the lab makes. The
// daemons run in-process: their relays listen on the host's loopback on ports picked for them.
const SECRET = 'relay-s3cr3t-0123456789abcdef';
const run = EgressLab.available() ? describe : describe.skip;

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

function request(port: number, options: http.RequestOptions, body?: Buffer): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, agent: false, ...options });
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** An HTTPS GET through the relay's CONNECT, trusting `ca`. */
function httpsViaRelay(port: number, host: string, urlPath: string, ca: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const connect = http.request({ host: '127.0.0.1', port, method: 'CONNECT', path: `${host}:443`, headers: { host: `${host}:443` }, agent: false });
    connect.on('connect', (res: http.IncomingMessage, socket: net.Socket) => {
      if (res.statusCode !== 200) return reject(new Error(`CONNECT answered ${res.statusCode}`));
      const secure = tls.connect({ socket, servername: host, ca });
      secure.on('error', reject);
      const req = http.request({ createConnection: () => secure, path: urlPath, headers: { host, ...headers } });
      req.on('response', (answer) => {
        const chunks: Buffer[] = [];
        answer.on('data', (c: Buffer) => chunks.push(c));
        answer.on('end', () => resolve({ status: answer.statusCode ?? 0, headers: answer.headers, body: Buffer.concat(chunks) }));
      });
      req.on('error', reject);
      req.end();
    });
    connect.on('error', reject);
    connect.end();
  });
}

/** Resolves when the socket is closed by the other side (or rejects after `ms`). */
function closedWithin(socket: net.Socket, ms: number): Promise<number> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`still open after ${ms} ms`)), ms);
    socket.once('close', () => {
      clearTimeout(timer);
      resolve(Date.now() - started);
    });
    socket.resume();
  });
}

function connectTo(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port }, () => resolve(socket));
    socket.once('error', reject);
  });
}

run('the egress relay: a sandbox reaches the gateway only through its daemon channel', () => {
  let lab: EgressLab;
  let ca: EgressCa;
  let egress: SandboxEgress;
  const events: EgressEvent[] = [];
  const agents: { server: AgentServer; dir: string; secret: string; env: Record<string, string> }[] = [];

  async function startSandbox(id: string, policy: Parameters<SandboxEgress['register']>[1], secrets: Parameters<SandboxEgress['register']>[2] = []) {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'warren-relay-'));
    const secret = randomBytes(32).toString('hex');
    const env = await egress.register(id, policy, secrets);
    const server = await startAgentServer({
      socketPath: path.join(dir, 'agent.sock'),
      secret,
      policy: { root: dir, readOnly: false },
      home: dir,
      egress: { trustDir: path.join(dir, 'trust') },
    });
    await egress.connect(id, { socketPath: server.socketPath }, secret);
    const agent = { server, dir, secret, env };
    agents.push(agent);
    return { ...agent, port: egress.relayPort(id)! };
  }

  beforeAll(async () => {
    lab = await EgressLab.start(['registry.test', 'api.test', 'other.test', 'meta.test']);
    for (const name of ['registry.test', 'api.test', 'other.test']) lab.records.set(name, [lab.upstreamAddress]);
    lab.records.set('meta.test', ['169.254.169.254']);
    ca = (await EgressCa.create()).ca;
    const operator = {
      deny: [],
      labCidrs: [lab.labCidr],
      resolvers: [`127.0.0.1:${lab.dnsPort}`],
      maxConnectionsPerSandbox: 8,
      secrets: {},
    };
    const gateway = new EgressGateway({
      operator,
      ca,
      upstreamCa: [lab.caPem],
      headerTimeoutMs: 1500,
      onEvent: (e) => events.push(e),
      resolver: new DnsResolver({ servers: operator.resolvers, timeoutMs: 500, tries: 1 }),
    });
    egress = await SandboxEgress.create({ gateway, caPem: ca.certPem, maxConnections: 8, relayPort: 0 });
  });

  afterAll(async () => {
    await egress?.close();
    for (const agent of agents) {
      await agent.server.close();
      await rm(agent.dir, { recursive: true, force: true });
    }
    await lab?.stop();
  });

  it('carries plain HTTP and a spliced HTTPS tunnel to an allowed host, and the upstream sees the request', async () => {
    const a = await startSandbox('relay-a', { mode: 'allow', rules: [{ host: 'registry.test', ports: [80, 443] }] });
    expect(a.env.HTTP_PROXY).toBe('http://127.0.0.1:0'); // the configured port; the test's relays pick theirs
    const plain = await request(a.port, { path: 'http://registry.test/pkg/left-pad', headers: { host: 'registry.test' } });
    expect(plain.status).toBe(200);
    expect(JSON.parse(plain.body.toString())).toMatchObject({ scheme: 'http', url: '/pkg/left-pad' });
    const secure = await httpsViaRelay(a.port, 'registry.test', '/tls', lab.caPem);
    expect(secure.status).toBe(200);
    expect(JSON.parse(secure.body.toString())).toMatchObject({ scheme: 'https', url: '/tls' });
  });

  it('moves megabytes both ways intact, window by window', async () => {
    const a = agents[0]!;
    const port = egress.relayPort('relay-a')!;
    const size = 6 * EGRESS_STREAM_WINDOW + 12345;
    const down = await request(port, { path: `http://registry.test/big/${size}`, headers: { host: 'registry.test' } });
    expect([down.status, down.body.length, down.body.every((b) => b === 7)]).toEqual([200, size, true]);
    // Text that looks like the tunnel's own frames must arrive as bytes, untouched.
    const forged = encodeFrame({ type: 'evt', id: 1, event: 'open', data: { stream: 1 } }).toString('base64');
    const upload = Buffer.from(`${forged}${randomBytes(3 * EGRESS_STREAM_WINDOW).toString('base64')}`);
    const up = await request(port, { method: 'POST', path: 'http://registry.test/upload', headers: { host: 'registry.test' } }, upload);
    expect(up.status).toBe(200);
    expect((JSON.parse(up.body.toString()) as { body: string }).body).toBe(upload.toString());
    expect(a.env.NODE_USE_ENV_PROXY).toBe('1');
  });

  it('refuses a denied host, an IP literal and a name that resolves to the metadata address, with a 403 naming why', async () => {
    const port = egress.relayPort('relay-a')!;
    const denied = await request(port, { path: 'http://other.test/', headers: { host: 'other.test' } });
    expect([denied.status, JSON.parse(denied.body.toString()).rule]).toEqual([403, 'no-matching-rule']);
    const literal = await request(port, { path: `http://${lab.upstreamAddress}/`, headers: { host: lab.upstreamAddress } });
    expect(literal.status).toBe(403);
    await egress.update('relay-a', {
      mode: 'allow',
      rules: [
        { host: 'registry.test', ports: [80, 443] },
        { host: 'meta.test', ports: [80] },
      ],
    });
    const meta = await request(port, { path: 'http://meta.test/latest/meta-data/', headers: { host: 'meta.test' } });
    expect([meta.status, JSON.parse(meta.body.toString()).reason]).toEqual([403, 'address-floor']);
    // The controller's own loopback endpoints are below the floor too, whatever the policy.
    const loop = await request(port, { path: 'http://127.0.0.1:7420/v1/sandboxes', headers: { host: '127.0.0.1:7420' } });
    expect(loop.status).toBe(403);
    expect(lab.seenAt('/latest/')).toEqual([]);
  });

  it('brokers a secret: the upstream sees the value, the sandbox only a placeholder, and its trust store holds the CA', async () => {
    const b = await startSandbox('relay-b', { mode: 'allow', rules: [{ host: 'api.test', ports: [443] }] }, [
      { name: 'API_KEY', value: SECRET, hosts: ['api.test'], target: { header: 'Authorization', template: 'Bearer {secret}' } },
    ]);
    expect(b.env.API_KEY).toMatch(/^WARREN_SECRET_[0-9a-f]{32}$/);
    expect(JSON.stringify(b.env)).not.toContain(SECRET);
    expect(b.env.SSL_CERT_FILE).toBe('/run/warren-egress/bundle.pem');
    const trust = path.join(b.dir, 'trust');
    expect(await readFile(path.join(trust, 'ca.pem'), 'utf8')).toBe(ca.certPem.endsWith('\n') ? ca.certPem : `${ca.certPem}\n`);
    expect(await readFile(path.join(trust, 'bundle.pem'), 'utf8')).toContain(ca.certPem.trim());
    const answer = await httpsViaRelay(b.port, 'api.test', '/v1/chat', ca.certPem, { authorization: `Bearer ${b.env.API_KEY}` });
    expect(answer.status).toBe(200);
    expect(lab.seenAt('/v1/chat').at(-1)?.headers.authorization).toBe(`Bearer ${SECRET}`);
    // The upstream echoes the header back: the sandbox gets the placeholder, never the value.
    expect(answer.body.toString()).not.toContain(SECRET);
    expect(answer.body.toString()).toContain(b.env.API_KEY);
    expect(JSON.stringify(events)).not.toContain(SECRET);
  });

  it('takes a live update at once: an open tunnel the new policy refuses is closed, and the next request is denied', async () => {
    const c = await startSandbox('relay-c', { mode: 'allow', rules: [{ host: 'registry.test', ports: [80, 443] }] });
    const tunnel = await new Promise<net.Socket>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port: c.port, method: 'CONNECT', path: 'registry.test:443', agent: false });
      req.on('connect', (_res, socket: net.Socket) => resolve(socket));
      req.on('error', reject);
      req.end();
    });
    const closed = closedWithin(tunnel, 3000);
    const { version } = await egress.update('relay-c', { mode: 'none' });
    expect(version).toBe(2);
    await closed;
    const after = await request(c.port, { path: 'http://registry.test/', headers: { host: 'registry.test' } });
    expect([after.status, JSON.parse(after.body.toString()).rule]).toEqual([403, 'policy:none']);
  });

  it('survives a flood from one sandbox (its extra connections closed) while another is served', async () => {
    const flood = await startSandbox('relay-flood', { mode: 'allow', rules: [{ host: 'registry.test', ports: [80] }] });
    const sockets = await Promise.all(Array.from({ length: 40 }, () => connectTo(flood.port).catch(() => undefined)));
    await waitFor(
      'the relay to close the extra connections',
      () => sockets.filter((s) => s !== undefined && !s.destroyed && s.readyState === 'open').length <= 8,
      5000,
    );
    const other = await request(egress.relayPort('relay-a')!, { path: 'http://registry.test/still', headers: { host: 'registry.test' } });
    expect(other.status).toBe(200);
    for (const s of sockets) s?.destroy();
    // Slots come back: the flooding sandbox is served again once its sockets are gone.
    await waitFor(
      'the flooding sandbox to be served again',
      async () =>
        (await request(flood.port, { path: 'http://registry.test/again', headers: { host: 'registry.test' } }).catch(() => undefined))?.status === 200,
      5000,
    );
  });

  it('closes a slowloris connection at the header timeout, and answers huge headers with 431', async () => {
    const port = egress.relayPort('relay-a')!;
    const slow = await connectTo(port);
    slow.write('GET http://registry.test/ HTTP/1.1\r\nHost: registry.test\r\n');
    const ms = await closedWithin(slow, 6000);
    expect(ms).toBeLessThan(6000);
    const huge = await request(port, { path: 'http://registry.test/', headers: { host: 'registry.test', 'x-pad': 'a'.repeat(64 * 1024) } }).catch(
      (err: Error) => ({ status: -1, headers: {}, body: Buffer.from(err.message) }),
    );
    expect([431, -1]).toContain(huge.status);
  });

  it('gives a relayed client (a connection with a grant) no egress methods: only the controller may serve the relay', async () => {
    const a = agents[0]!;
    const ws = await new Promise<WebSocket>((resolve, reject) => {
      void import('ws').then(({ WebSocket: Ws }) => {
        const grant = encodeGrant({ policy: { root: a.dir, readOnly: false }, allowExec: true, allowAudit: true });
        const socket = new Ws(`ws+unix://${a.server.socketPath}:/`, { headers: { authorization: `Bearer ${a.secret}`, [GRANT_HEADER]: grant } });
        socket.once('open', () => resolve(socket));
        socket.once('error', reject);
      });
    });
    const answers: unknown[] = [];
    ws.on('message', (data: Buffer) => answers.push(decodeFrame(data).header));
    ws.send(encodeFrame({ type: 'hello', protocolVersion: PROTOCOL_VERSION, protocolMinor: PROTOCOL_MINOR }));
    ws.send(encodeFrame({ type: 'req', id: 7, method: 'egress.serve', params: { port: 0 } }));
    ws.send(encodeFrame({ type: 'req', id: 8, method: 'egress.send', params: { stream: 1, close: true } }));
    await waitFor('three answers', () => answers.length >= 3, 3000);
    expect(answers.slice(1)).toEqual([
      expect.objectContaining({ type: 'err', id: 7, error: expect.objectContaining({ code: 'FORBIDDEN' }) }),
      expect.objectContaining({ type: 'err', id: 8, error: expect.objectContaining({ code: 'FORBIDDEN' }) }),
    ]);
    ws.close();
  });
});

describe('the egress tunnel against a hostile daemon', () => {
  it('closes a connection the daemon overfills, ignores forged streams, refuses extra opens, and ends on a malformed frame', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'warren-forged-'));
    const socketPath = path.join(dir, 'agent.sock');
    const wss = new WebSocketServer({ noServer: true });
    const server = http.createServer();
    server.on('upgrade', (req, socket, head) => wss.handleUpgrade(req, socket, head, (ws) => wss.emit('connection', ws)));
    await new Promise<void>((resolve) => server.listen(socketPath, resolve));
    const gatewaySide: { data: number; closed: boolean }[] = [];
    const gatewayServer = net.createServer((socket) => {
      const seen = { data: 0, closed: false };
      gatewaySide.push(seen);
      socket.on('data', (c: Buffer) => (seen.data += c.length));
      socket.on('close', () => (seen.closed = true));
    });
    const gatewayPath = path.join(dir, 'gw.sock');
    await new Promise<void>((resolve) => gatewayServer.listen(gatewayPath, resolve));
    const sent: unknown[] = [];
    let daemon: WebSocket | undefined;
    wss.on('connection', (ws: WebSocket) => {
      daemon = ws;
      ws.on('message', (data: Buffer) => {
        const { header } = decodeFrame(data);
        sent.push(header);
        if (header.type === 'hello')
          ws.send(encodeFrame({ type: 'welcome', protocolVersion: PROTOCOL_VERSION, protocolMinor: PROTOCOL_MINOR, server: 'forged', serverVersion: '0' }));
        if (header.type === 'req' && header.method === 'egress.serve') ws.send(encodeFrame({ type: 'evt', id: 1, event: 'listening', data: { port: 3128 } }));
      });
    });
    try {
      const tunnel = await EgressTunnel.open({
        endpoint: { socketPath },
        secret: 'x'.repeat(32),
        connectGateway: () => net.connect(gatewayPath),
        maxConnections: 2,
      });
      const evt = (event: string, data: unknown, payload?: Buffer) => daemon!.send(encodeFrame({ type: 'evt', id: 1, event, data } as never, payload));
      // Data for a stream that was never opened reaches no gateway connection.
      evt('data', { stream: 99 }, Buffer.alloc(10));
      evt('open', { stream: 1 });
      evt('open', { stream: 1 }); // a reused id
      evt('open', { stream: 2 });
      evt('open', { stream: 3 }); // past maxConnections
      await waitFor('two gateway connections', () => gatewaySide.length === 2, 3000);
      expect(tunnel.connections).toBe(2);
      const closes = () => sent.filter((h) => (h as { method?: string; params?: { close?: boolean } }).params?.close === true);
      await waitFor('two closes', () => closes().length >= 2, 3000);
      expect(closes().map((h) => (h as { params: { stream: number } }).params.stream)).toEqual([1, 3]);
      // Past the window: the daemon is not keeping its side, so that connection ends.
      evt('data', { stream: 2 }, Buffer.alloc(EGRESS_STREAM_WINDOW + 1));
      await waitFor('the overfilled connection to close', () => gatewaySide[1]!.closed, 3000);
      expect(gatewaySide[1]!.data).toBe(0);
      // A frame that is not one ends the tunnel (and its connections), not the controller.
      daemon!.send(Buffer.from([0, 0, 0, 200, 1, 2, 3]));
      expect(await tunnel.closed).toMatch(/bad frame/);
      expect(tunnel.connections).toBe(0);
    } finally {
      for (const ws of wss.clients) ws.terminate();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await new Promise<void>((resolve) => gatewayServer.close(() => resolve()));
      await rm(dir, { recursive: true, force: true });
    }
  });
});
