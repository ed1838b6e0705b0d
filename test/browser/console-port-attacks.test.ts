import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import type { BrowserContext, Page } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import { startTestController, type TestController } from '../support/fixtures.js';

/**
 * Sandbox code against the operator's console through the browser (docs/console.md, "The same
 * origin is shared with port URLs"): an app behind a port URL on the controller's own origin,
 * opened by an operator logged in to the console, tries to read the console's CSRF token by
 * opening the console in a window it keeps (answering with `Cross-Origin-Opener-Policy:
 * same-origin` itself, so the console's COOP would keep both in one browsing context group), and to
 * lock the operator out by setting a `warren_console` cookie of its own on a longer path.
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
document.getElementById('plant').onclick = () => { document.cookie = 'warren_console=planted-by-the-app; path=/ui/'; out.textContent = 'planted'; };
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

  beforeAll(async () => {
    warren = await startTestController({ config: { console: { enabled: true, path: '/ui', sessionTtlSeconds: 3600, historyIntervalSeconds: 60 } } });
    userDataDir = await mkdtemp(path.join(os.tmpdir(), 'warren-chromium-attacks-'));
    context = await launchChromium(userDataDir);
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
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
    await consolePage.getByLabel('API key').fill(warren.apiKey);
    await consolePage.getByRole('button', { name: 'Log in' }).click();
    await consolePage.getByRole('heading', { name: 'Sandboxes' }).waitFor();
  }, 120_000);

  afterAll(async () => {
    await context?.close();
    await warren?.[Symbol.asyncDispose]();
    if (userDataDir) await rm(userDataDir, { recursive: true, force: true });
  });

  it('the app cannot read the console’s CSRF token from a console window it opens, and its own console cookie does not log the operator out', async () => {
    const app = await context.newPage();
    try {
      await app.goto(await sandbox.ports.url(8000, { ttlSeconds: 60 }));
      await app.getByRole('heading', { name: 'Evil app' }).waitFor();
      await app.click('#go');
      await app.waitForFunction("document.getElementById('out').textContent !== 'waiting'", undefined, { timeout: 20_000 });
      const outcome = (await app.locator('#out').textContent()) ?? '';
      expect(outcome).toMatch(/^blocked:/);
      await app.click('#plant');
      // The app's script did set its cookie: the browser now sends it before the operator's own.
      expect((await context.cookies(`${warren.url}/ui/`)).filter((c) => c.name === 'warren_console').length).toBe(2);
    } finally {
      for (const page of context.pages()) if (page !== consolePage) await page.close();
    }
    // The operator's console still works after a reload, with the planted cookie sent first.
    await consolePage.reload();
    await consolePage.getByRole('heading', { name: 'Sandboxes' }).waitFor({ timeout: 15_000 });
    const status = await consolePage.evaluate(
      "fetch('/v1/sandboxes', { headers: { 'x-warren-csrf': document.querySelector('meta[name=\"warren-csrf\"]').content } }).then((r) => r.status)",
    );
    expect(status).toBe(200);
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
