import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import { WebSocket } from 'ws';
import { startTestController, type TestController, tenantCredentials } from '../support/fixtures.js';
import { HostSentinel } from '../support/redteam.js';

/**
 * A sandbox's page against the operator's console on the same origin (docs/console.md, "The same
 * origin is shared with port URLs"). The attacker holds a second API key of the controller and
 * runs code in a sandbox the operator opens through a port URL; the page it serves there plants
 * `warren_console` cookies holding the attacker's live session (as a script's `document.cookie`
 * would, on `/ui/` and `/v1/`, so the browser sends them before the operator's), or logs the
 * browser in with the attacker's key. The console must never run as the attacker's key.
 *
 * The browser is played over real HTTP: a cookie jar that sends every cookie whose path applies,
 * the longest path first, and the Fetch Metadata headers Chromium sends (the same attack runs in
 * Chromium in test/browser/console-port-attacks.test.ts).
 */
const APP = String.raw`
import http.server
PAGE = b'''<!doctype html><title>preview</title><script>
document.cookie = 'warren_console=' + location.hash.slice(1) + '; path=/ui/';
document.cookie = 'warren_console=' + location.hash.slice(1) + '; path=/v1/';
fetch('/ui/api/login', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ apiKey: new URLSearchParams(location.search).get('k') }) });
</script>'''
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header('content-type', 'text/html')
        self.send_header('set-cookie', 'warren_console=from-a-header; Path=/ui/')
        self.send_header('content-length', str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)
http.server.ThreadingHTTPServer(('127.0.0.1', 8000), Handler).serve_forever()
`;

/** One browser's cookies for the controller's origin. */
class CookieJar {
  private readonly cookies = new Map<string, { name: string; value: string; path: string }>();

  /** What `document.cookie = '<name>=<value>; path=<path>'` or a `Set-Cookie` line does. */
  set(line: string): void {
    const [pair, ...attributes] = line.split(';').map((part) => part.trim());
    const name = pair!.slice(0, pair!.indexOf('='));
    const value = pair!.slice(pair!.indexOf('=') + 1);
    const path = attributes.find((a) => /^path=/i.test(a))?.slice(5) ?? '/';
    const gone = attributes.some((a) => /^max-age=0$/i.test(a));
    const key = `${name};${path}`;
    if (gone) this.cookies.delete(key);
    else this.cookies.set(key, { name, value, path });
  }

  /** The `Cookie` header a browser sends to `path`: longest path first. */
  header(path: string): string {
    return [...this.cookies.values()]
      .filter((c) => path.startsWith(c.path))
      .sort((a, b) => b.path.length - a.path.length)
      .map((c) => `${c.name}=${c.value}`)
      .join('; ');
  }
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

describe('red team: a sandbox page plants console sessions on the console’s origin', () => {
  const operatorKey = `wk_operator_${randomBytes(12).toString('hex')}`;
  const attackerKey = `wk_attacker_${randomBytes(12).toString('hex')}`;
  let warren: TestController;
  let sandbox: Sandbox;
  let sentinel: HostSentinel;
  let origin: string;

  /** One request as Chromium sends it from a page of the controller's origin (or a navigation to it). */
  const send = (jar: CookieJar | undefined, method: string, path: string, headers: Record<string, string> = {}, body?: unknown): Promise<Answer> =>
    new Promise((resolve, reject) => {
      const url = new URL(path, warren.url);
      const cookie = jar?.header(url.pathname);
      const req = request(
        url,
        {
          method,
          headers: {
            ...(cookie ? { cookie } : {}),
            ...(body === undefined ? {} : { 'content-type': 'application/json' }),
            ...headers,
          },
        },
        (res) => {
          let text = '';
          res.on('data', (chunk: Buffer) => (text += chunk.toString()));
          res.on('end', () => {
            const setCookies = res.headers['set-cookie'] ?? [];
            for (const line of setCookies) jar?.set(line);
            resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text });
          });
        },
      );
      req.on('error', reject);
      req.end(body === undefined ? undefined : JSON.stringify(body));
    });
  /** A script's fetch on the controller's origin (the console's, or the sandbox page's: the browser cannot tell them apart). */
  const sameOrigin = { origin: '', 'sec-fetch-site': 'same-origin', 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty' };
  const navigation = { 'sec-fetch-site': 'none', 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document', 'sec-fetch-user': '?1' };
  const login = async (jar: CookieJar, apiKey: string) => {
    const res = await send(jar, 'POST', '/ui/api/login', sameOrigin, { apiKey });
    expect(res.status).toBe(200);
    return (JSON.parse(res.body) as { csrfToken: string }).csrfToken;
  };
  /** The volumes of whoever the console's session is: the attacker's key owns one, the operator's none. */
  const volumesAs = async (jar: CookieJar, csrf: string) => {
    const res = await send(jar, 'GET', '/v1/volumes', { ...sameOrigin, 'x-warren-csrf': csrf });
    return res.status === 200 ? (JSON.parse(res.body) as { volumes: { name: string }[] }).volumes.map((v) => v.name) : res.status;
  };
  /** The token the console page would take from what a navigation to it answers (the controller put it in a meta tag). */
  const tokenInPage = (html: string) => /name="warren-csrf" content="([^"]*)"/.exec(html)?.[1] ?? '';

  beforeAll(async () => {
    warren = await startTestController({
      credentials: await tenantCredentials(operatorKey, [attackerKey]),
      config: { console: { enabled: true, path: '/ui', sessionTtlSeconds: 3600, historyIntervalSeconds: 60 } },
    });
    origin = new URL(warren.url).origin;
    sameOrigin.origin = origin;
    sentinel = await HostSentinel.make();
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: operatorKey });
    await sandbox.files.write('preview.py', APP);
    await sandbox.commands.start('python3 preview.py');
    for (let i = 0; i < 100; i++) {
      const res = await fetch(sandbox.ports.baseUrl(8000), { headers: { authorization: `Bearer ${sandbox.token}` } }).catch(() => undefined);
      if (res?.status === 200) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    // The attacker's key owns a volume: whoever lists it is running as that key.
    const made = await fetch(`${warren.url}/v1/volumes`, {
      method: 'POST',
      headers: { authorization: `Bearer ${attackerKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'attacker-owned', sizeMb: 16 }),
    });
    expect(made.status).toBe(201);
  }, 120_000);

  afterAll(async () => {
    await fetch(`${warren.url}/v1/volumes/attacker-owned`, { method: 'DELETE', headers: { authorization: `Bearer ${attackerKey}` } }).catch(() => undefined);
    await warren?.[Symbol.asyncDispose]();
    await sentinel?.remove();
  });

  it('planted cookies holding the attacker’s live session (on /ui/ and /v1/) never make the console run as the attacker’s key', async () => {
    // The attacker logs in with its own key in its own browser: it knows its session's cookie and token.
    const attackerJar = new CookieJar();
    const attackerToken = await login(attackerJar, attackerKey);
    const attackerSession = /warren_console=([^;]*)/.exec(attackerJar.header('/'))![1]!;
    expect(await volumesAs(attackerJar, attackerToken)).toEqual(['attacker-owned']);

    // The operator logs in; the console page keeps its token in memory.
    const browser = new CookieJar();
    const operatorToken = await login(browser, operatorKey);
    expect(await volumesAs(browser, operatorToken)).toEqual([]);

    // The operator opens the sandbox's preview: served on the console's origin, its script plants the attacker's session.
    const link = new URL(await sandbox.ports.url(8000, { ttlSeconds: 60 }));
    const preview = await send(browser, 'GET', `${link.pathname}${link.search}`, navigation);
    expect(preview.status).toBe(200);
    expect(preview.body).toContain("document.cookie = 'warren_console='");
    // (A Set-Cookie header for the name never reaches the browser; a script needs no header.)
    expect(browser.header('/ui/')).not.toContain('from-a-header');
    browser.set(`warren_console=${attackerSession}; path=/ui/`);
    browser.set(`warren_console=${attackerSession}; path=/v1/`);
    expect(browser.header('/v1/volumes').split('; ')).toEqual([`warren_console=${attackerSession}`, expect.stringMatching(/^warren_console=/)]);

    // The operator reloads the console: the page it gets hands no session to whoever holds the cookies.
    const reloaded = await send(browser, 'GET', '/ui/', navigation);
    expect(reloaded.status).toBe(200);
    expect(reloaded.body).not.toContain(attackerToken);
    expect(reloaded.body).not.toContain(operatorToken);
    // What the console page can do with what it was given: nothing (it was the attacker's key before).
    expect(await volumesAs(browser, tokenInPage(reloaded.body))).toBe(403);
    // The console tab that never reloaded still runs as the operator, planted cookies sent first.
    expect(await volumesAs(browser, operatorToken)).toEqual([]);
    await sentinel.expectUnchanged();
  });

  it('a login the sandbox page makes with the attacker’s key (same origin, the operator’s cookie sent along) neither replaces the operator’s session nor becomes the console’s', async () => {
    const browser = new CookieJar();
    const operatorToken = await login(browser, operatorKey);
    // The preview's script: fetch('/ui/api/login', { apiKey: <the attacker's> }), same origin as far as the browser can tell.
    const planted = await send(browser, 'POST', '/ui/api/login', sameOrigin, { apiKey: attackerKey });
    expect(planted.status).toBe(200);
    const attackerToken = (JSON.parse(planted.body) as { csrfToken: string }).csrfToken;
    // The operator's console (its token in memory) runs as the operator still.
    expect(await volumesAs(browser, operatorToken)).toEqual([]);
    // A reload hands out no session: the attacker's is never the console's.
    const reloaded = await send(browser, 'GET', '/ui/', navigation);
    expect(reloaded.body).not.toContain(attackerToken);
    expect(await volumesAs(browser, tokenInPage(reloaded.body))).toBe(403);
    // A WebSocket of the console tab with the operator's token is the operator's too.
    const connect = (csrf: string) =>
      new Promise<number>((resolve) => {
        const path = `/v1/sandboxes/${sandbox.id}/connect`;
        const ws = new WebSocket(`${warren.url.replace('http', 'ws')}${path}`, ['warren.console', `warren-csrf.${csrf}`], {
          headers: { cookie: browser.header(path), origin },
        });
        ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
        ws.on('open', () => (ws.close(), resolve(101)));
        ws.on('error', () => resolve(-1));
      });
    expect(await connect(operatorToken)).toBe(101);
    expect(await connect(tokenInPage(reloaded.body))).toBe(403);
    await sentinel.expectUnchanged();
  });

  it('no token of a sandbox (its own, or one derived from it) logs in to the console', async () => {
    const { token } = await sandbox.deriveToken({ allowRead: ['/workspace'], allowExec: true });
    for (const credential of [sandbox.token, token]) {
      const res = await send(new CookieJar(), 'POST', '/ui/api/login', sameOrigin, { apiKey: credential });
      expect(res.status).toBe(401);
      expect(res.headers['set-cookie']).toBeUndefined();
    }
  });
});
