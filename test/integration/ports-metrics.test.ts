import { createServer, request as httpRequest, type Server } from 'node:http';
import { createServer as createTcpServer, type AddressInfo } from 'node:net';
import { describe, expect, it } from '@jest/globals';
import { openTunnels } from '@warren/agent';
import { Sandbox } from '@warren/sdk';
import { WebSocket, WebSocketServer } from 'ws';
import { startLocalController } from '../support/local-controller.js';

/** An app "inside the sandbox": the daemons run in this process, so its loopback is the sandbox's. */
async function startApp(): Promise<{ port: number; server: Server; seen: { url: string; headers: Record<string, unknown> }[] } & AsyncDisposable> {
  const seen: { url: string; headers: Record<string, unknown> }[] = [];
  const server = createServer((req, res) => {
    seen.push({ url: req.url ?? '', headers: { ...req.headers } });
    if (req.url === '/stream') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      let n = 0;
      const timer = setInterval(() => {
        res.write(`data: ${n++}\n\n`);
        if (n === 3) {
          clearInterval(timer);
          res.end();
        }
      }, 20);
      return;
    }
    if (req.url === '/never') return; // answers never
    // An app that tries to widen its service worker's scope to the whole origin (the console's pages).
    if (req.url === '/sw.js') return void res.writeHead(200, { 'content-type': 'text/javascript', 'service-worker-allowed': '/' }).end('// sw');
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => res.writeHead(200, { 'content-type': 'text/plain' }).end(`${req.method} ${req.url} ${body}`));
  });
  const wss = new WebSocketServer({ server });
  wss.on('connection', (ws) => ws.on('message', (m: Buffer) => ws.send(`echo:${m.toString()}`)));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    server,
    seen,
    [Symbol.asyncDispose]: async () => {
      for (const ws of wss.clients) ws.terminate();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** The status of a GET sent exactly as written (node:http does not resolve `..` as fetch does). */
function rawStatus(url: string, headers: Record<string, string>): Promise<number> {
  const { host } = new URL(url);
  const path = url.slice(url.indexOf(host) + host.length);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port: Number(host.split(':')[1]), path, headers }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.once('error', reject);
    req.end();
  });
}

describe('ports served through the controller, over in-process daemons', () => {
  it('serves HTTP with a body, a streamed response and a WebSocket, strips credentials, and refuses without one', async () => {
    await using warren = await startLocalController();
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: warren.root } });
    await using app = await startApp();
    const base = sandbox.ports.baseUrl(app.port);
    const auth = { authorization: `Bearer ${sandbox.token}` };

    // The console's session cookie (the operator's) is sent to this origin's port URLs too: it never reaches the app.
    const posted = await fetch(`${base}echo?x=1`, { method: 'POST', headers: { ...auth, cookie: 'app=1; warren_console=operator-session' }, body: 'hello' });
    expect(posted.status).toBe(200);
    expect(await posted.text()).toBe('POST /echo?x=1 hello');
    expect(app.seen.at(-1)!.headers).toMatchObject({ host: `localhost:${app.port}`, cookie: 'app=1' });
    const worker = await fetch(`${base}sw.js`, { headers: auth });
    expect(worker.status).toBe(200);
    expect(worker.headers.get('service-worker-allowed')).toBeNull();
    expect(app.seen.at(-1)!.headers.authorization).toBeUndefined();

    const streamed = await fetch(`${base}stream`, { headers: auth });
    expect(await streamed.text()).toBe('data: 0\n\ndata: 1\n\ndata: 2\n\n');

    const ws = new WebSocket(`${base.replace('http', 'ws')}chat`, { headers: auth });
    const reply = await new Promise<string>((resolve, reject) => {
      ws.once('open', () => ws.send('ping'));
      ws.once('message', (m: Buffer) => resolve(m.toString()));
      ws.once('error', reject);
    });
    expect(reply).toBe('echo:ping');
    ws.close();

    expect((await fetch(`${base}echo`)).status).toBe(401);
    expect((await fetch(`${base}echo`, { headers: { authorization: 'Bearer wst_forged' } })).status).toBe(401);
  });

  it('a signed URL works for that port only, sets a cookie for the page, and a tampered or expired one is refused', async () => {
    await using warren = await startLocalController();
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: warren.root } });
    await using app = await startApp();
    const url = await sandbox.ports.url(app.port, { ttlSeconds: 60 });
    const first = await fetch(url);
    expect(first.status).toBe(200);
    expect(await first.text()).toBe('GET / ');
    expect(app.seen.at(-1)!.url).toBe('/'); // the signature never reaches the app
    const cookie = first.headers.get('set-cookie')!.split(';')[0]!;
    expect((await fetch(sandbox.ports.baseUrl(app.port) + 'app.js', { headers: { cookie } })).status).toBe(200);
    const other = url.replace(`/ports/${app.port}/`, `/ports/${app.port + 1}/`);
    expect((await fetch(other)).status).toBe(401);
    expect((await fetch(url.replace(/warren_sig=./, 'warren_sig=A'))).status).toBe(401);
    expect((await fetch(url.replace(/warren_exp=\d+/, `warren_exp=${Date.now() - 1000}`))).status).toBe(401);
  });

  it('answers typed errors for a bad port, a climbing path, nothing listening, and a derived handle without exec', async () => {
    await using warren = await startLocalController();
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: warren.root } });
    const auth = { authorization: `Bearer ${sandbox.token}` };
    const at = (rest: string) => `${warren.url}/v1/sandboxes/${sandbox.id}/ports/${rest}`;
    expect((await fetch(at('70000/'), { headers: auth })).status).toBe(400);
    expect((await fetch(at('0/'), { headers: auth })).status).toBe(400);
    // Sent raw (fetch would resolve the dots itself): the controller refuses dot segments, encoded or not.
    for (const climb of ['80/a/%2e%2e/b', '80/../../x', '80/a%2fb']) expect(await rawStatus(`${at(climb)}`, auth)).toBe(400);
    const closed = await new Promise<number>((resolve) => {
      const probe = createTcpServer().listen(0, '127.0.0.1', () => {
        const { port } = probe.address() as AddressInfo;
        probe.close(() => resolve(port));
      });
    });
    const refused = await fetch(at(`${closed}/`), { headers: auth });
    expect(refused.status).toBe(502);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('PORT_UNREACHABLE');
    const { token } = await sandbox.deriveToken({ allowRead: ['.'], readonly: true });
    expect((await fetch(at('80/'), { headers: { authorization: `Bearer ${token}` } })).status).toBe(403);
  });

  it('caps the tunnels one sandbox holds, and an app that never answers holds only its own slot', async () => {
    await using warren = await startLocalController({ maxPortConnectionsPerSandbox: 2, portResponseTimeoutMs: 1500 });
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: warren.root } });
    await using app = await startApp();
    const auth = { authorization: `Bearer ${sandbox.token}` };
    const hung = [fetch(`${sandbox.ports.baseUrl(app.port)}never`, { headers: auth }), fetch(`${sandbox.ports.baseUrl(app.port)}never`, { headers: auth })];
    await new Promise((r) => setTimeout(r, 300));
    const third = await fetch(`${sandbox.ports.baseUrl(app.port)}x`, { headers: auth });
    expect(third.status).toBe(429);
    // The hung requests end with a typed timeout, and their slots come back.
    for (const answer of await Promise.all(hung)) expect(answer.status).toBe(502);
    await new Promise((r) => setTimeout(r, 100));
    expect((await fetch(`${sandbox.ports.baseUrl(app.port)}x`, { headers: auth })).status).toBe(200);
  });

  it('keeps a daemon connection between requests of one caller, never across callers, and never after an unfinished answer', async () => {
    await using warren = await startLocalController();
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: warren.root } });
    await using app = await startApp();
    const tunnels = async () => {
      const text = await (await fetch(`${warren.url}/metrics`, { headers: { authorization: `Bearer ${warren.apiKey}` } })).text();
      const count = (kind: string) => Number(new RegExp(`warren_port_tunnels_total\\{connection="${kind}"\\} (\\d+)`).exec(text)?.[1] ?? 0);
      return { new: count('new'), reused: count('reused') };
    };
    const get = async (path: string, token: string) => {
      const res = await fetch(`${sandbox.ports.baseUrl(app.port)}${path}`, { headers: { authorization: `Bearer ${token}` } });
      return `${res.status} ${await res.text()}`;
    };
    /** The daemon says the app hung up a moment after the answer ends; the connection then goes back. */
    const settle = () => new Promise((r) => setTimeout(r, 100));

    for (const n of [1, 2, 3, 4]) {
      expect(await get(`page${n}`, sandbox.token)).toBe(`200 GET /page${n} `);
      await settle();
    }
    expect(await tunnels()).toEqual({ new: 1, reused: 3 });

    // Another caller (a derived token with its own grant) never gets the first caller's connection.
    const narrow = await sandbox.deriveToken({ allowRead: ['.'], allowExec: true });
    expect(await get('other', narrow.token)).toBe('200 GET /other ');
    await settle();
    expect(await tunnels()).toEqual({ new: 2, reused: 3 });

    // A request whose client gives up before the answer ends (it took the kept connection) cancels its
    // tunnel and closes that connection: the next request opens a new one.
    const abort = new AbortController();
    const hung = fetch(`${sandbox.ports.baseUrl(app.port)}never`, { headers: { authorization: `Bearer ${sandbox.token}` }, signal: abort.signal });
    await new Promise((r) => setTimeout(r, 200));
    abort.abort();
    await expect(hung).rejects.toThrow();
    await new Promise((r) => setTimeout(r, 400));
    expect(await get('after', sandbox.token)).toBe('200 GET /after ');
    expect(await tunnels()).toEqual({ new: 3, reused: 4 });
    // A WebSocket rides a kept connection like any request, and its end does not break the next request.
    await settle();
    const ws = new WebSocket(`${sandbox.ports.baseUrl(app.port).replace('http', 'ws')}ws`, { headers: { authorization: `Bearer ${sandbox.token}` } });
    const echoed = await new Promise<string>((resolve, reject) => {
      ws.once('open', () => ws.send('hi'));
      ws.once('message', (m: Buffer) => resolve(m.toString()));
      ws.once('error', reject);
    });
    expect(echoed).toBe('echo:hi');
    ws.close();
    await new Promise((r) => ws.once('close', r));
    await settle();
    expect(await get('last', sandbox.token)).toBe('200 GET /last ');
  });

  it('a server that floods a raw connection is read only as fast as the client reads', async () => {
    await using warren = await startLocalController();
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: warren.root } });
    let written = 0;
    const chunk = Buffer.alloc(64 * 1024, 'x');
    const flood = createTcpServer((socket) => {
      const pump = () => {
        while (written < 512 * 1024 * 1024 && socket.write(chunk)) written += chunk.length;
        written += chunk.length;
      };
      socket.on('drain', pump);
      socket.on('error', () => undefined);
      pump();
    });
    await new Promise<void>((resolve) => flood.listen(0, '127.0.0.1', resolve));
    try {
      const socket = await sandbox.ports.connect((flood.address() as AddressInfo).port);
      socket.pause();
      await new Promise((r) => setTimeout(r, 1000));
      // Without backpressure the server would have written hundreds of MiB by now.
      expect(written).toBeLessThan(64 * 1024 * 1024);
      socket.destroy();
      for (let i = 0; i < 50 && openTunnels() > 0; i++) await new Promise((r) => setTimeout(r, 20));
      expect(openTunnels()).toBe(0);
    } finally {
      flood.close();
    }
  });

  it('a raw connection speaks both ways, and metrics come from the provider', async () => {
    await using warren = await startLocalController();
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: warren.root } });
    const echo = createTcpServer((s) => s.pipe(s));
    await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve));
    try {
      const socket = await sandbox.ports.connect((echo.address() as AddressInfo).port);
      socket.write('PING\r\n');
      const got = await new Promise<string>((resolve) => socket.once('data', (b: Buffer) => resolve(b.toString())));
      expect(got).toBe('PING\r\n');
      socket.destroy();
    } finally {
      echo.close();
    }
    const first = await sandbox.metrics();
    expect(first).toMatchObject({ sandboxId: sandbox.id, pids: 1 });
    expect(first.cpuSeconds).toBeGreaterThan(0);
    const second = await sandbox.metrics();
    expect(second.cpuPercent).toBeGreaterThanOrEqual(0);
    // The E2B gateway's getMetrics answers the samples so far (these two and its own) in E2B's shape, narrowed by start/end.
    const e2b = await fetch(`${warren.url}/e2b/sandboxes/${sandbox.id}/metrics`, { headers: { 'x-api-key': warren.apiKey } });
    expect(e2b.status).toBe(200);
    const samples = (await e2b.json()) as { timestampUnix: number }[];
    expect(samples.length).toBeGreaterThanOrEqual(3); // and any the background sampler took
    expect(samples[0]).toEqual(
      expect.objectContaining({ cpuCount: expect.any(Number), memUsed: expect.any(Number), cpuUsedPct: expect.any(Number), diskUsed: 0 }),
    );
    const future = Math.floor(Date.now() / 1000) + 3600;
    const none = await fetch(`${warren.url}/e2b/sandboxes/${sandbox.id}/metrics?start=${future}`, { headers: { 'x-api-key': warren.apiKey } });
    expect(await none.json()).toEqual([]);
  });
});
