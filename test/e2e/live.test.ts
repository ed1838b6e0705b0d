import http from 'node:http';
import { describe, expect, it } from '@jest/globals';
import { Sandbox, type WatchEvent } from '@warren/sdk';
import { WebSocket } from 'ws';
import { startTestController } from '../support/fixtures.js';

/** A small web app for inside the sandbox: a page, a streamed answer, and an echoing WebSocket-free JSON route. */
const APP = `
import http.server, json, sys, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == '/stream':
            self.send_response(200); self.send_header('content-type', 'text/event-stream'); self.end_headers()
            for i in range(3):
                self.wfile.write(f'data: {i}\\n\\n'.encode()); self.wfile.flush(); time.sleep(0.05)
            return
        body = json.dumps({'path': self.path, 'auth': self.headers.get('authorization')}).encode()
        self.send_response(200); self.send_header('content-type', 'application/json'); self.send_header('content-length', str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(('127.0.0.1', 8000), H).serve_forever()
`;

describe.each(['socket', 'exec'] as const)('a live sandbox over the %s daemon channel', (daemonChannel) => {
  it('serves a port, reports engine metrics, and watches a folder', async () => {
    await using warren = await startTestController({ config: { daemonChannel } });
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    await sandbox.files.write('app.py', APP);
    await sandbox.commands.start('python3 app.py');
    const auth = { authorization: `Bearer ${sandbox.token}` };
    let page: Response | undefined;
    for (let i = 0; i < 50; i++) {
      page = await fetch(`${sandbox.ports.baseUrl(8000)}hello?x=1`, { headers: auth });
      if (page.status === 200) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(page!.status).toBe(200);
    expect(await page!.json()).toEqual({ path: '/hello?x=1', auth: null });
    expect(await (await fetch(`${sandbox.ports.baseUrl(8000)}stream`, { headers: auth })).text()).toBe('data: 0\n\ndata: 1\n\ndata: 2\n\n');
    const signed = await fetch(await sandbox.ports.url(8000, { ttlSeconds: 30 }));
    expect(signed.status).toBe(200);
    expect((await fetch(`${sandbox.ports.baseUrl(8001)}`, { headers: auth })).status).toBe(502);
    // Nothing on the host's loopback is reachable through a sandbox port: the daemon dials inside the sandbox.
    const hostPort = Number(new URL(warren.url).port);
    expect((await fetch(`${sandbox.ports.baseUrl(hostPort)}healthz`, { headers: auth })).status).toBe(502);

    // A WebSocket upgrade to a server that does not speak WebSocket is answered by the app, not hung.
    const refused = await new Promise<string>((resolve) => {
      const ws = new WebSocket(`${sandbox.ports.baseUrl(8000).replace('http', 'ws')}ws`, { headers: auth });
      ws.once('unexpected-response', (_req, res) => resolve(String(res.statusCode)));
      ws.once('open', () => resolve('open'));
      ws.once('error', (err) => resolve(err.message));
    });
    expect(refused).not.toBe('open');

    await sandbox.commands.run('python3 -c "x = bytearray(64 * 1024 * 1024); import time; time.sleep(0.5)" &');
    const metrics = await sandbox.metrics();
    expect(metrics.sandboxId).toBe(sandbox.id);
    expect(metrics.memoryBytes).toBeGreaterThan(1024 * 1024);
    expect(metrics.pids).toBeGreaterThanOrEqual(2);
    expect(metrics.cpuSeconds).toBeGreaterThan(0);
    expect(metrics.network).toBeUndefined(); // network: none
    if (metrics.disk) expect(metrics.disk.usedBytes).toBeLessThanOrEqual(metrics.disk.limitBytes); // a workspace disk of its own (quota hosts)
    // The short history: every sample the controller took of this sandbox, ending with this one,
    // each after the first with its CPU share; and the per-sandbox Prometheus series from the newest.
    const withHistory = await sandbox.metrics({ history: true });
    expect(withHistory.history!.length).toBeGreaterThanOrEqual(2);
    expect(withHistory.history!.at(-1)!.time).toBe(withHistory.time);
    expect(withHistory.history!.every((m) => m.sandboxId === sandbox.id)).toBe(true);
    expect(withHistory.cpuPercent).toBeGreaterThanOrEqual(0);
    const prometheus = await (await fetch(`${warren.url}/metrics`, { headers: { authorization: `Bearer ${warren.apiKey}` } })).text();
    expect(prometheus).toMatch(new RegExp(`^warren_sandbox_memory_bytes\\{sandbox="${sandbox.id}",tenant="default"\\} \\d+`, 'm'));
    expect((await fetch(`${warren.url}/v1/sandboxes/${sandbox.id}/metrics?history=maybe`, { headers: auth })).status).toBe(400);

    await sandbox.files.mkdir('watched');
    await using watcher = await sandbox.files.watch('watched', { coalesceMs: 20 });
    await sandbox.commands.run('mkdir -p watched/sub && echo hi > watched/sub/a.txt && ln -s /etc watched/etc && touch /tmp/outside');
    const seen: WatchEvent[] = [];
    const iterator = watcher[Symbol.asyncIterator]();
    const deadline = Date.now() + 5000;
    while (!['watched/sub/a.txt', 'watched/etc'].every((p) => seen.some((e) => 'path' in e && e.path === p)) && Date.now() < deadline) {
      const next = await iterator.next();
      if (next.done) break;
      seen.push(next.value);
    }
    const paths = seen.flatMap((e) => ('path' in e ? [e.path] : []));
    expect(paths).toEqual(expect.arrayContaining(['watched/sub', 'watched/sub/a.txt', 'watched/etc']));
    expect(paths.filter((p) => p.includes('outside') || p.startsWith('watched/etc/'))).toEqual([]);
  }, 120_000);
});

describe('ports on their own origins, and public ports', () => {
  /** A GET with the Host header a wildcard DNS name would give (fetch cannot set Host). */
  const get = (url: string, host: string, headers: Record<string, string> = {}) =>
    new Promise<{ status: number; body: string; setCookie: string[] }>((resolve, reject) => {
      const target = new URL(url);
      const req = http.get({ host: target.hostname, port: target.port, path: `${target.pathname}${target.search}`, headers: { ...headers, host } }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, setCookie: res.headers['set-cookie'] ?? [] }));
      });
      req.on('error', reject);
    });

  it('signs URLs on <port>-<id>.<portDomain> with a cookie for that origin only, and opens a port to anyone only on its owner’s say-so', async () => {
    await using warren = await startTestController({ config: { portDomain: 'sbx.test', portDomainScheme: 'http' } });
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    await sandbox.files.write('app.py', APP);
    await sandbox.commands.start('python3 app.py');
    // As a browser sends it: host names are lower case.
    const origin = `8000-${sandbox.id.toLowerCase()}.sbx.test`;
    for (let i = 0; i < 50 && (await get(`${warren.url}/`, origin, { authorization: `Bearer ${sandbox.token}` })).status !== 200; i++)
      await new Promise((r) => setTimeout(r, 100));

    const signed = new URL(await sandbox.ports.url(8000, { ttlSeconds: 60 }));
    expect(signed.host).toBe(origin);
    expect(signed.protocol).toBe('http:');
    const first = await get(`${warren.url}${signed.pathname}${signed.search}`, origin);
    expect(first.status).toBe(200);
    expect(JSON.parse(first.body)).toEqual({ path: '/', auth: null }); // the signature never reaches the app
    // The cookie is for this host and every path of it (host-only: no Domain attribute), never for the controller's other names.
    expect(first.setCookie[0]).toMatch(/; Path=\/; /);
    expect(first.setCookie[0]).not.toMatch(/domain=/i);
    const cookie = first.setCookie[0]!.split(';')[0]!;
    expect((await get(`${warren.url}/other`, origin, { cookie })).status).toBe(200);
    // A signature for one port is worth nothing on another port's origin.
    expect((await get(`${warren.url}${signed.pathname}${signed.search}`, `8001-${sandbox.id.toLowerCase()}.sbx.test`)).status).toBe(401);

    // Public: no credential is needed for that port only, and only while it stays public.
    expect((await get(`${warren.url}/`, origin)).status).toBe(401);
    const narrow = await sandbox.derive({ allowExec: true });
    await expect(narrow.ports.setPublic(8000, true)).rejects.toMatchObject({ code: 'FORBIDDEN' });
    expect(await sandbox.ports.setPublic(8000, true)).toEqual([8000]);
    expect((await get(`${warren.url}/`, origin)).status).toBe(200);
    expect((await fetch(sandbox.ports.baseUrl(8000))).status).toBe(200);
    expect((await fetch(sandbox.ports.baseUrl(8001))).status).toBe(401);
    expect(await sandbox.ports.setPublic(8000, false)).toEqual([]);
    expect((await get(`${warren.url}/`, origin)).status).toBe(401);
    narrow.close();
  });
});
