import { mkdirSync, writeFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { FilesystemEventType, Sandbox, type FilesystemEvent } from 'e2b';
import { startLocalController, type LocalController } from '../support/local-controller.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits until `events` holds one that `match` accepts (or `ms` passes); returns how long it took. */
async function until(events: FilesystemEvent[], match: (e: FilesystemEvent) => boolean, ms = 5000): Promise<number> {
  const started = performance.now();
  while (!events.some(match) && performance.now() - started < ms) await sleep(5);
  expect(events).toContainEqual(expect.objectContaining(events.find(match) ?? { never: 'seen' }));
  return performance.now() - started;
}

/** A GET to the controller with the Host header set exactly (as a wildcard DNS name would deliver it). */
function getWithHost(url: string, host: string, pathAndQuery: string, headers: Record<string, string> = {}) {
  const { port } = new URL(url);
  return new Promise<{ status: number; body: string; headers: Record<string, unknown> }>((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port: Number(port), path: pathAndQuery, headers: { ...headers, host } }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
    });
    req.once('error', reject);
    req.end();
  });
}

describe('the e2b SDK against the gateway: watchDir on file events, and getHost', () => {
  let warren: LocalController;
  let sandbox: Sandbox;
  let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
  beforeAll(async () => {
    warren = await startLocalController();
    opts = { apiKey: warren.apiKey, apiUrl: `${warren.url}/e2b`, sandboxUrl: `${warren.url}/e2b` };
    sandbox = await Sandbox.create(opts);
  });
  afterAll(async () => {
    await sandbox?.kill();
    await warren[Symbol.asyncDispose]();
  });
  const tokenOf = (s: Sandbox) => (s as unknown as { envdAccessToken: string }).envdAccessToken;

  it('reports create, write, remove and a change undone at once, as they happen', async () => {
    await sandbox.files.makeDir('live');
    const events: FilesystemEvent[] = [];
    const handle = await sandbox.files.watchDir('live', (event) => void events.push(event), { recursive: true });
    try {
      const started = performance.now();
      await writeFile(path.join(warren.root, 'live/a.txt'), 'a');
      await until(events, (e) => e.type === FilesystemEventType.CREATE && e.name === 'a.txt');
      const createMs = performance.now() - started;
      // The SDK's own write of a new file: CREATE and WRITE, as envd reports; Warren's staging file is never shown.
      await sandbox.files.write('live/b.txt', 'b');
      await until(events, (e) => e.type === FilesystemEventType.WRITE && e.name === 'b.txt');
      expect(events.filter((e) => e.name.includes('.warren-'))).toEqual([]);
      await sandbox.commands.run('echo more >> live/a.txt');
      await until(events, (e) => e.type === FilesystemEventType.WRITE && e.name === 'a.txt');
      await sandbox.commands.run('mkdir live/sub && echo x > live/sub/deep.txt');
      await until(events, (e) => e.name === 'sub/deep.txt');
      // Made and removed at once: a listing every 250 ms would never see it; file events do.
      await sandbox.commands.run('echo t > live/blink.txt && rm live/blink.txt');
      await until(events, (e) => e.type === FilesystemEventType.REMOVE && e.name === 'blink.txt');
      await sandbox.files.remove('live/a.txt');
      await until(events, (e) => e.type === FilesystemEventType.REMOVE && e.name === 'a.txt');
      // Far below the old listing interval (a write seen within one coalescing window of the daemon).
      expect(createMs).toBeLessThan(1000);
    } finally {
      await handle.stop();
    }
  });

  it('ends the stream with an error naming lost changes when a burst overflows, and holds a bounded number of events', async () => {
    await sandbox.files.makeDir('flood');
    const events: FilesystemEvent[] = [];
    let exit: Error | undefined | null = null;
    const handle = await sandbox.files.watchDir('flood', (event) => void events.push(event), {
      recursive: true,
      onExit: (err) => void (exit = err),
    });
    try {
      // 150 folders of 60 files, written synchronously: the in-process daemon reads the whole burst at once.
      for (let p = 0; p < 150; p++) {
        const dir = path.join(warren.root, 'flood', `pkg-${p}`);
        mkdirSync(dir);
        for (let f = 0; f < 60; f++) writeFileSync(path.join(dir, `f${f}.js`), 'x');
      }
      for (let i = 0; i < 300 && exit === null; i++) await sleep(50);
      expect(exit).toBeInstanceOf(Error);
      expect(String(exit)).toMatch(/lost changes/);
      expect(events.length).toBeLessThanOrEqual(2 * 4096 + 2);
    } finally {
      await handle.stop();
    }
    // The gateway and the daemon still serve.
    expect(await sandbox.files.exists('flood/pkg-0/f0.js')).toBe(true);
  }, 60_000);

  it('a narrowed token (derived, reading only src) hears nothing outside src', async () => {
    await mkdir(path.join(warren.root, 'src'), { recursive: true });
    await mkdir(path.join(warren.root, 'secret'), { recursive: true });
    const derive = await fetch(`${warren.url}/v1/sandboxes/${sandbox.sandboxId}/derive`, {
      method: 'POST',
      headers: { authorization: `Bearer ${warren.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ allowRead: 'src' }),
    });
    expect(derive.status).toBe(201);
    const { token } = (await derive.json()) as { token: string };
    // The SDK's own instance, carrying the derived token as its envd access token.
    const Narrow = Sandbox as unknown as new (o: object) => Sandbox;
    const narrow = new Narrow({ ...opts, sandboxId: sandbox.sandboxId, envdAccessToken: token, envdVersion: '0.5.7' });
    await expect(narrow.files.watchDir(warren.root, () => undefined, { recursive: true })).rejects.toThrow(/not|denied|allowed/i);
    await expect(narrow.files.watchDir('secret', () => undefined)).rejects.toThrow();
    const events: FilesystemEvent[] = [];
    const handle = await narrow.files.watchDir('src', (event) => void events.push(event), { recursive: true });
    try {
      await writeFile(path.join(warren.root, 'secret/key.txt'), 'k');
      await writeFile(path.join(warren.root, 'outside.txt'), 'o');
      await writeFile(path.join(warren.root, 'src/marker.txt'), 'm');
      await until(events, (e) => e.name === 'marker.txt');
      expect(events.filter((e) => /key|outside/.test(e.name))).toEqual([]);
    } finally {
      await handle.stop();
    }
  });

  it('polling watchers (CreateWatcher, GetWatcherEvents, RemoveWatcher) as E2B’s Python SDK uses them, bound to their creator', async () => {
    await sandbox.files.makeDir('polled');
    const base = `${warren.url}/e2b/filesystem.Filesystem`;
    const call = (rpc: string, body: object, token = tokenOf(sandbox)) =>
      fetch(`${base}/${rpc}`, {
        method: 'POST',
        headers: { 'e2b-sandbox-id': sandbox.sandboxId, 'x-access-token': token, 'content-type': 'application/json', 'connect-protocol-version': '1' },
        body: JSON.stringify(body),
      });
    const created = await call('CreateWatcher', { path: 'polled', recursive: true, includeEntry: true });
    expect(created.status).toBe(200);
    const { watcherId } = (await created.json()) as { watcherId: string };
    await sandbox.files.write('polled/p.txt', 'p');
    let events: { name: string; type: string; entry?: { name: string; size?: string } }[] = [];
    for (let i = 0; i < 100 && !events.some((e) => e.name === 'p.txt'); i++) {
      await sleep(20);
      const got = (await (await call('GetWatcherEvents', { watcherId })).json()) as { events?: typeof events };
      events = events.concat(got.events ?? []);
    }
    expect(events).toContainEqual(expect.objectContaining({ name: 'p.txt', type: 'EVENT_TYPE_CREATE', entry: expect.objectContaining({ name: 'p.txt' }) }));
    // Another sandbox's token cannot reach it; an unknown id is not_found.
    const other = await Sandbox.create(opts);
    try {
      const stolen = await fetch(`${base}/GetWatcherEvents`, {
        method: 'POST',
        headers: { 'e2b-sandbox-id': other.sandboxId, 'x-access-token': tokenOf(other), 'content-type': 'application/json' },
        body: JSON.stringify({ watcherId }),
      });
      expect(stolen.status).toBe(404);
    } finally {
      await other.kill();
    }
    expect((await call('RemoveWatcher', { watcherId })).status).toBe(200);
    const gone = await call('GetWatcherEvents', { watcherId });
    expect(gone.status).toBe(404);
    expect(await gone.json()).toMatchObject({ code: 'not_found' });
  });

  describe('getHost', () => {
    let app: Server;
    let port: number;
    beforeAll(async () => {
      // An app "inside the sandbox": the daemons run in this process, so its loopback is the sandbox's.
      app = createServer((req, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end(`app saw ${req.url} host=${req.headers.host}`));
      await new Promise<void>((resolve) => app.listen(0, '127.0.0.1', resolve));
      port = (app.address() as AddressInfo).port;
    });
    afterAll(async () => {
      app.closeAllConnections();
      await new Promise((resolve) => app.close(resolve));
    });

    it('names <port>-<id>.<domain>, which the controller serves through the port proxy with a sandbox credential', async () => {
      const connected = await Sandbox.connect(sandbox.sandboxId, { ...opts, domain: 'warren.test' });
      const host = connected.getHost(port);
      expect(host).toBe(`${port}-${sandbox.sandboxId}.warren.test`);
      const traffic = await getWithHost(warren.url, host, '/hello?x=1', { 'e2b-traffic-access-token': tokenOf(sandbox) });
      expect(traffic).toMatchObject({ status: 200, body: `app saw /hello?x=1 host=localhost:${port}` });
      const bearer = await getWithHost(warren.url, host, '/', { authorization: `Bearer ${tokenOf(sandbox)}` });
      expect(bearer.status).toBe(200);
      // Warren's rules: no credential, or another sandbox's, is refused; envd's port on such a name reaches the gateway.
      expect((await getWithHost(warren.url, host, '/')).status).toBe(401);
      const other = await Sandbox.create(opts);
      try {
        expect((await getWithHost(warren.url, host, '/', { 'e2b-traffic-access-token': tokenOf(other) })).status).toBe(401);
      } finally {
        await other.kill();
      }
      const health = await getWithHost(warren.url, `49983-${sandbox.sandboxId}.warren.test`, '/health', { 'x-access-token': tokenOf(sandbox) });
      expect(health.status).toBe(204);
      // A name for no sandbox here is Warren's own API, unchanged.
      expect((await getWithHost(warren.url, `${port}-nosuchsandbox.warren.test`, '/healthz')).status).toBe(200);
    });

    it('a signed port URL works by host name too, its cookie scoped to that host', async () => {
      const signed = await fetch(`${warren.url}/v1/sandboxes/${sandbox.sandboxId}/port-urls`, {
        method: 'POST',
        headers: { authorization: `Bearer ${warren.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ port, ttlSeconds: 60 }),
      });
      expect(signed.status).toBeLessThan(300);
      const { path: signedPath } = (await signed.json()) as { path: string };
      const query = signedPath.slice(signedPath.indexOf('?'));
      const first = await getWithHost(warren.url, sandbox.getHost(port), `/${query}`);
      expect(first.status).toBe(200);
      expect(String(first.headers['set-cookie'])).toMatch(/Path=\/;/);
    });
  });
});
