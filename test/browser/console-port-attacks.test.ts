import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import type { BrowserContext, Page } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import { startTestController, type TestController, tenantCredentials } from '../support/fixtures.js';

/**
 * Sandbox code against the operator's console through the browser (docs/console.md, "The same
 * origin is shared with port URLs"): an app behind a port URL on the controller's own origin,
 * opened by an operator logged in to the console, tries to read the console's CSRF token by
 * opening the console in a window it keeps (answering with `Cross-Origin-Opener-Policy:
 * same-origin` itself, so the console's COOP would keep both in one browsing context group), and to
 * make the console run as another API key: its script plants that key's live session as
 * `warren_console` cookies on `/ui/` and `/v1/` (sent before the operator's own) and logs the
 * browser in with that key itself. The attacker holds the second key (another tenant of the controller).
 */
const APP = String.raw`
import socketserver
PAGE = b'<!doctype html><meta charset="utf-8"><title>evil app</title><h1>Evil app</h1><button id="go">open</button><button id="plant">plant</button><p id="out">waiting</p><script src="evil.js"></script>'
SCRIPT = b'''
const out = document.getElementById('out');
document.getElementById('go').onclick = () => {
  const w = window.open('/ui/', 'console');
  let tries = 0;
  const look = () => {
    tries++;
    try {
      const meta = w.document.querySelector('meta[name="warren-csrf"]');
      if (meta && meta.content) { out.textContent = 'stolen:' + meta.content; return; }
    } catch (e) { out.textContent = 'blocked:' + e.name; return; }
    if (w.closed) { out.textContent = 'blocked:severed'; return; }
    if (tries > 100) { out.textContent = 'blocked:nothing'; return; }
    setTimeout(look, 50);
  };
  look();
};
document.getElementById('plant').onclick = async () => {
  const session = location.hash.slice(1);
  document.cookie = 'warren_console=' + session + '; path=/ui/';
  document.cookie = 'warren_console=' + session + '; path=/v1/';
  const login = await fetch('/ui/api/login', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ apiKey: new URLSearchParams(location.search).get('k') }) });
  out.textContent = 'planted:' + login.status;
};
'''
class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        line = self.rfile.readline(8192).decode('latin-1')
        while self.rfile.readline(8192) not in (b'\r\n', b'\n', b''):
            pass
        route = line.split(' ')[1].split('?')[0] if line.count(' ') >= 2 else '/'
        body, kind = (SCRIPT, b'text/javascript') if route == '/evil.js' else (PAGE, b'text/html')
        self.wfile.write(b'HTTP/1.1 200 OK\r\ncontent-type: ' + kind + b'\r\ncross-origin-opener-policy: same-origin\r\ncontent-length: ' + str(len(body)).encode() + b'\r\nconnection: close\r\n\r\n' + body)
class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
Server(('127.0.0.1', 8000), Handler).serve_forever()
`;

describe('red team in Chromium: a port app against the console on the same origin', () => {
  let warren: TestController;
  let context: BrowserContext;
  let userDataDir: string;
  let consolePage: Page;
  let sandbox: Sandbox;
  const operatorKey = `wk_operator_${randomBytes(12).toString('hex')}`;
  const attackerKey = `wk_attacker_${randomBytes(12).toString('hex')}`;
  const logIn = async () => {
    await consolePage.getByLabel('API key').fill(operatorKey);
    await consolePage.getByRole('button', { name: 'Log in' }).click();
    await consolePage.getByRole('heading', { name: 'Sandboxes' }).waitFor();
  };

  beforeAll(async () => {
    warren = await startTestController({
      credentials: await tenantCredentials(operatorKey, [attackerKey]),
      config: { console: { enabled: true, path: '/ui', sessionTtlSeconds: 3600, historyIntervalSeconds: 60 } },
    });
    userDataDir = await mkdtemp(path.join(os.tmpdir(), 'warren-chromium-attacks-'));
    context = await launchChromium(userDataDir);
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: operatorKey });
    await sandbox.files.write('evil.py', APP);
    await sandbox.commands.start('python3 evil.py');
    for (let i = 0; i < 100; i++) {
      const res = await fetch(`${warren.url}/v1/sandboxes/${sandbox.id}/ports/8000/`, { headers: { authorization: `Bearer ${sandbox.token}` } }).catch(
        () => undefined,
      );
      if (res?.status === 200) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    // The operator logs in to the console.
    consolePage = context.pages()[0] ?? (await context.newPage());
    await consolePage.goto(`${warren.url}/ui/`);
    await logIn();
  }, 120_000);

  afterAll(async () => {
    await context?.close();
    await warren?.[Symbol.asyncDispose]();
    if (userDataDir) await rm(userDataDir, { recursive: true, force: true });
  });

  it('the app cannot read the console’s CSRF token from a console window it opens, nor make the console run as another key with cookies or a login of its own', async () => {
    // The attacker's own session (it holds the second key): the cookie value it will plant.
    const attacker = await fetch(`${warren.url}/ui/api/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin: new URL(warren.url).origin, 'sec-fetch-site': 'same-origin' },
      body: JSON.stringify({ apiKey: attackerKey }),
    });
    const attackerSession = /^warren_console=([^;]*)/.exec(attacker.headers.get('set-cookie')!)![1]!;
    const app = await context.newPage();
    try {
      await app.goto(`${await sandbox.ports.url(8000, { ttlSeconds: 60 })}&k=${attackerKey}#${attackerSession}`);
      await app.getByRole('heading', { name: 'Evil app' }).waitFor();
      await app.click('#go');
      await app.waitForFunction("document.getElementById('out').textContent !== 'waiting'", undefined, { timeout: 20_000 });
      const outcome = (await app.locator('#out').textContent()) ?? '';
      expect(outcome).toMatch(/^blocked:/);
      await app.click('#plant');
      await app.waitForFunction("document.getElementById('out').textContent.startsWith('planted:')");
      expect(await app.locator('#out').textContent()).toBe('planted:200');
      // The app's script did set its cookies: the browser now sends the attacker's session before the operator's own.
      const planted = (await context.cookies()).filter((c) => c.name === 'warren_console' && c.value === attackerSession);
      expect(planted.map((c) => c.path).sort()).toEqual(['/ui/', '/v1/']);
    } finally {
      for (const page of context.pages()) if (page !== consolePage) await page.close();
    }
    // The operator's console tab goes on as the operator: its next polls of the list succeed, planted cookies sent first.
    const poll = await consolePage.waitForResponse((res) => new URL(res.url()).pathname === '/v1/sandboxes', { timeout: 15_000 });
    expect(poll.status()).toBe(200);
    // A reload never adopts a session from the cookies (it ran as the attacker's key before): it asks for the key.
    await consolePage.reload();
    await consolePage.getByLabel('API key').waitFor({ timeout: 15_000 });
    expect(await consolePage.content()).not.toContain('warren-csrf');
    await logIn();
  }, 120_000);

  it('a sandbox token or a derived token cannot log in to the console, even from its own origin', async () => {
    const { token } = await sandbox.deriveToken({ allowRead: ['/workspace'], allowExec: true });
    for (const credential of [sandbox.token, token]) {
      const res = await fetch(`${warren.url}/ui/api/login`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', origin: new URL(warren.url).origin, 'sec-fetch-site': 'same-origin' },
        body: JSON.stringify({ apiKey: credential }),
      });
      expect(res.status).toBe(401);
      expect(res.headers.get('set-cookie')).toBeNull();
    }
  });
});
