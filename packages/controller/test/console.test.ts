import { existsSync } from 'node:fs';
import { get } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { WebSocket } from 'ws';
import { loadConfig } from '../src/config.js';
import { MetricsHistory } from '../src/console/history.js';
import { CONSOLE_DIST } from '../src/console/server.js';
import { Metrics } from '../src/metrics.js';
import { API_KEY, startFakeHttpServer, type FakeHttpServer } from './http-server.js';

/** The console's login, session cookie and CSRF checks, on the controller's real HTTP server over the fake provider. */
describe('console sessions', () => {
  let server: FakeHttpServer;
  let host: string;
  let session: { cookie: string; csrf: string };

  const login = async (apiKey: string, headers: Record<string, string> = {}) =>
    fetch(`${server.url}/ui/api/login`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ apiKey }) });
  const list = (headers: Record<string, string>) => fetch(`${server.url}/v1/sandboxes`, { headers });

  beforeAll(async () => {
    server = await startFakeHttpServer();
    host = new URL(server.url).host;
    const res = await login(API_KEY, { origin: server.url, 'sec-fetch-site': 'same-origin' });
    expect(res.status).toBe(200);
    const setCookie = res.headers.get('set-cookie')!;
    expect(setCookie).toMatch(/^warren_console=[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}; Path=\/; Max-Age=\d+; HttpOnly; SameSite=Strict$/);
    session = { cookie: setCookie.split(';')[0]!, csrf: ((await res.json()) as { csrfToken: string }).csrfToken };
  });
  afterAll(async () => server?.[Symbol.asyncDispose]());

  it('refuses a wrong key with no cookie, and a login from another site', async () => {
    const wrong = await login('wk_wrong');
    expect(wrong.status).toBe(401);
    expect(wrong.headers.get('set-cookie')).toBeNull();
    expect((await login(API_KEY, { 'sec-fetch-site': 'cross-site' })).status).toBe(403);
    expect((await login(API_KEY, { origin: 'http://evil.example' })).status).toBe(403);
  });

  it('makes the cookie the operator only with its CSRF token, from the same origin', async () => {
    const good = { cookie: session.cookie, 'x-warren-csrf': session.csrf };
    expect((await list(good)).status).toBe(200);
    expect((await list({ ...good, origin: server.url, 'sec-fetch-site': 'same-origin' })).status).toBe(200);
    const attempts: Record<string, string>[] = [
      { cookie: session.cookie },
      { cookie: session.cookie, 'x-warren-csrf': 'A'.repeat(43) },
      { ...good, origin: 'http://evil.example' },
      { ...good, origin: 'null' },
      { ...good, 'sec-fetch-site': 'cross-site' },
      { ...good, 'sec-fetch-site': 'same-site' },
    ];
    for (const bad of attempts) {
      const res = await list(bad);
      expect([res.status, ((await res.json()) as { error: { code: string } }).error.code]).toEqual([403, 'FORBIDDEN']);
    }
    // An Authorization header is always the credential: a wrong one is not rescued by the cookie.
    expect((await list({ ...good, authorization: 'Bearer wk_wrong' })).status).toBe(401);
    // A made-up session is no session.
    expect((await list({ cookie: 'warren_console=forged', 'x-warren-csrf': session.csrf })).status).toBe(401);
  });

  it('takes the cookie on a WebSocket upgrade only from its own origin with the token offered as a subprotocol', async () => {
    const upgrade = (headers: Record<string, string>, protocols: string[]) =>
      new Promise<number>((resolve) => {
        const ws = new WebSocket(`${server.url.replace('http', 'ws')}/v1/sandboxes/nosuchsandbox/connect`, protocols, { headers });
        ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
        ws.on('open', () => (ws.close(), resolve(101)));
        ws.on('error', () => resolve(-1));
      });
    const own = { cookie: session.cookie, origin: server.url };
    // Authenticated, so the answer is about the sandbox (404), not the caller.
    expect(await upgrade(own, ['warren.console', `warren-csrf.${session.csrf}`])).toBe(404);
    expect(await upgrade(own, ['warren.console'])).toBe(403);
    expect(await upgrade({ cookie: session.cookie }, ['warren.console', `warren-csrf.${session.csrf}`])).toBe(403);
    expect(await upgrade({ ...own, origin: 'http://evil.example' }, ['warren.console', `warren-csrf.${session.csrf}`])).toBe(403);
    expect(await upgrade({ origin: server.url }, ['warren.console'])).toBe(401);
  });

  it('serves the pages with a strict CSP and no framing, and never a session token, not even to a navigation with the cookie', async () => {
    const page = await fetch(`${server.url}/ui/`);
    expect(page.headers.get('content-security-policy')).toMatch(/script-src 'self';.*frame-ancestors 'none'/);
    expect(page.headers.get('x-frame-options')).toBe('DENY');
    expect(page.headers.get('cross-origin-opener-policy')).toBe('same-origin');
    expect(existsSync(`${CONSOLE_DIST}index.html`)).toBe(true);
    // node:http, since fetch sets the Sec-Fetch headers itself.
    const html = (headers: Record<string, string>) =>
      new Promise<string>((resolve, reject) => {
        get(`${server.url}/ui/`, { headers: { cookie: session.cookie, ...headers } }, (res) => {
          let text = '';
          res.on('data', (chunk: Buffer) => (text += chunk.toString()));
          res.on('end', () => resolve(text));
        }).on('error', reject);
      });
    // Only the login's answer carries a token: a cookie (the operator's, or one a port's page planted) never gets one.
    const navigated = await html({ 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document' });
    expect(navigated).not.toContain(session.csrf);
    expect(navigated).not.toContain('warren-csrf');
    expect(await html({ 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty' })).toBe(navigated);
    expect((await fetch(`${server.url}/ui/assets/../../v1/sandboxes`)).status).not.toBe(200);
    expect((await fetch(`${server.url}/ui`, { redirect: 'manual' })).headers.get('location')).toBe('/ui/');
    expect(host).toContain('127.0.0.1');
  });

  it('answers the controller summary to the session, and ends it on logout', async () => {
    const headers = { cookie: session.cookie, 'x-warren-csrf': session.csrf };
    const summary = await fetch(`${server.url}/ui/api/controller`, { headers });
    expect(summary.status).toBe(200);
    expect(await summary.json()).toMatchObject({ limits: { memoryMb: 1024 }, pool: { size: 0 }, history: { intervalMs: 15_000 } });
    expect((await fetch(`${server.url}/ui/api/controller`)).status).toBe(401);
    const out = await fetch(`${server.url}/ui/api/logout`, { method: 'POST', headers });
    expect(out.status).toBe(204);
    expect(out.headers.get('set-cookie')).toMatch(/^warren_console=; Path=\/; Max-Age=0; HttpOnly; SameSite=Strict/);
    expect((await list(headers)).status).toBe(401);
  });
});

describe('console settings and history', () => {
  it('checks the console path and reads the switches from the environment', () => {
    expect(loadConfig({}).console).toEqual({ enabled: true, path: '/ui', sessionTtlSeconds: 28_800, historyIntervalSeconds: 15 });
    expect(loadConfig({ WARREN_CONSOLE: 'false', WARREN_CONSOLE_PATH: '/admin/console' }).console).toMatchObject({ enabled: false, path: '/admin/console' });
    for (const path of ['/v1', '/v1/ui', 'ui', '/ui/', '/e2b', '/UI']) expect(() => loadConfig({ WARREN_CONSOLE_PATH: path })).toThrow(/console\.path/);
  });

  it('keeps a bounded history of the metrics, with rates between samples', async () => {
    const metrics = new Metrics(() => ({ running: 3, pooled: 2 }));
    const history = new MetricsHistory(metrics, { intervalMs: 1000, samples: 3 });
    await history.sample(1_000);
    metrics.calls.inc({ method: 'fs.read', outcome: 'ok' }, 20);
    const second = await history.sample(11_000);
    expect(second).toMatchObject({ sandboxes: 3, callsPerSecond: 2, errorsPerSecond: 0 });
    await history.sample(12_000);
    await history.sample(13_000);
    expect(history.list().samples.map((s) => s.at)).toEqual([11_000, 12_000, 13_000]);
  });
});
