import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import type { BrowserContext, Dialog, Page } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import { startTestController, type TestController } from '../support/fixtures.js';

/**
 * The web console in a real browser (Debian's Chromium through playwright-core) against a real
 * controller on the real Docker engine: login, the pages, the terminal, files, audit, actions,
 * and the attacks the console must stand (cross-site requests, hostile names and contents).
 * Screenshots of each page go to docs/images/ (docs/console.md shows them).
 */

const SHOTS = new URL('../../docs/images/', import.meta.url).pathname;
/** What sandbox code writes to attack the page: each would set window.__pwned if it ever ran. */
const HOSTILE_NAME = '<img src=x onerror="window.__pwned=1">.py';
const HOSTILE_CONTENT = '<script>window.__pwned=2</script><img src=x onerror=window.__pwned=3>\n';
const HOSTILE_LABEL = '<img src=x onerror=window.__pwned=4>';

describe('web console in Chromium', () => {
  let warren: TestController;
  let context: BrowserContext;
  let page: Page;
  let userDataDir: string;
  let evil: Server | undefined;
  const errors: string[] = [];
  /** Console errors that a step expects (the browser logs a refused request's status); removed from `errors` by the step. */
  const expected = (pattern: RegExp) => {
    for (let i = errors.length - 1; i >= 0; i--) if (pattern.test(errors[i]!)) errors.splice(i, 1);
  };

  beforeAll(async () => {
    warren = await startTestController({ config: { console: { enabled: true, path: '/ui', sessionTtlSeconds: 3600, historyIntervalSeconds: 1 } } });
    userDataDir = await mkdtemp(path.join(os.tmpdir(), 'warren-chromium-'));
    await mkdir(SHOTS, { recursive: true });
    context = await launchChromium(userDataDir, { viewport: { width: 1280, height: 800 } });
    // Records any CSP violation and any script the page did not ship (run before the page's own scripts; CDP is not bound by CSP).
    await context.addInitScript(
      "window.__violations = []; document.addEventListener('securitypolicyviolation', (e) => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));",
    );
    page = context.pages()[0] ?? (await context.newPage());
    page.on('console', (msg) => msg.type() === 'error' && errors.push(msg.text()));
    page.on('pageerror', (err) => errors.push(`pageerror: ${err.message}`));
    page.on('response', (res) => res.status() >= 400 && errors.push(`HTTP ${res.status()} ${res.request().method()} ${res.url()}`));
  });

  afterAll(async () => {
    await context?.close();
    evil?.close();
    await warren?.[Symbol.asyncDispose]();
    if (userDataDir) await rm(userDataDir, { recursive: true, force: true });
  });

  const ui = () => `${warren.url}/ui/`;
  const sessionCookie = async () => (await context.cookies(warren.url)).find((c) => c.name === 'warren_console');
  const pwned = () => page.evaluate('window.__pwned');
  const logIn = async () => {
    await page.getByLabel('API key').fill(warren.apiKey);
    await page.getByRole('button', { name: 'Log in' }).click();
    await page.getByRole('heading', { name: 'Sandboxes' }).waitFor();
  };

  it('refuses a wrong API key, and sends the security headers', async () => {
    const res = await page.goto(ui());
    const headers = res!.headers();
    expect(headers['content-security-policy']).toContain("script-src 'self'");
    expect(headers['content-security-policy']).toContain("frame-ancestors 'none'");
    expect(headers['content-security-policy']).not.toMatch(/unsafe-eval|script-src[^;]*unsafe-inline/);
    expect(headers['x-frame-options']).toBe('DENY');
    await page.getByLabel('API key').fill('wk_wrong_key_000000000000');
    await page.getByRole('button', { name: 'Log in' }).click();
    await expect(page.getByRole('alert').textContent()).resolves.toContain('UNAUTHORIZED');
    expect(await sessionCookie()).toBeUndefined();
    expected(/status of 401|HTTP 401 POST .*\/ui\/api\/login$/);
    await page.screenshot({ path: path.join(SHOTS, 'console-login.png') });
  });

  it('logs in with the key into an HttpOnly, SameSite=Strict session, with no credential in the URL or storage', async () => {
    await logIn();
    const cookie = await sessionCookie();
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Strict' });
    expect(page.url()).not.toContain(warren.apiKey);
    expect(await page.evaluate('JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.cookie')).toBe('{}{}');
    await page.getByText('No sandboxes yet').waitFor();
    // The session belongs to the page that logged in: a reload asks for the key again, and the
    // page it gets holds no token (a cookie alone, which a port's page could plant, is no session).
    await page.reload();
    await page.getByLabel('API key').waitFor();
    expect(await page.content()).not.toContain('warren-csrf');
    await logIn();
  });

  let sandboxId = '';
  it('creates a sandbox, runs a command in its terminal and reads the output from the screen', async () => {
    await page.getByRole('button', { name: 'New sandbox' }).click();
    await page.getByRole('form', { name: 'New sandbox' }).getByLabel('Labels').fill('team=console,purpose=browser-test');
    await page.getByRole('button', { name: 'Create' }).click();
    await page.waitForURL(/#\/sandboxes\/[A-Za-z0-9]+$/, { timeout: 60_000 });
    sandboxId = /#\/sandboxes\/([A-Za-z0-9]+)$/.exec(page.url())![1]!;
    const rows = page.locator('.xterm-rows');
    await expect(rows.waitFor()).resolves.toBeUndefined();
    await page.locator('.term-host').click();
    await page.keyboard.type('printf \'print("hi")\\n\' > hello.py; echo $((6*7))-done\n');
    await page.locator('.xterm-rows', { hasText: '42-done' }).waitFor();
    // Keyboard only: Esc twice leaves the terminal, and Tab then moves through the page.
    await page.keyboard.press('Escape');
    await page.keyboard.press('Escape');
    expect(await page.evaluate('document.activeElement.id')).toBe('tab-Terminal');
    await page.keyboard.press('Tab');
    expect(await page.evaluate('document.activeElement.id')).toBe('tab-Files');
    await page.screenshot({ path: path.join(SHOTS, 'console-terminal.png') });
  });

  it('opens a file, edits and saves it with the conditional write, and sees the write in the audit log', async () => {
    await page.getByRole('tab', { name: 'Files' }).click();
    await page.locator('[data-entry="hello.py"]').click();
    await page.locator('pre.code').getByText('print').waitFor();
    await page.screenshot({ path: path.join(SHOTS, 'console-files.png') });
    await page.getByRole('button', { name: 'Edit' }).click();
    await page.getByLabel('Contents of hello.py').fill('print("edited in the console")\n');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByText('Saved.').waitFor();
    const sandbox = await Sandbox.connect(sandboxId, { baseUrl: warren.url, apiKey: warren.apiKey });
    try {
      expect(await sandbox.files.read('hello.py')).toBe('print("edited in the console")\n');
      // A save over a file the agent changed meanwhile is refused (CONFLICT), not lost.
      await page.getByRole('button', { name: 'Edit' }).click();
      await sandbox.files.write('hello.py', 'changed by the agent\n');
      await page.getByLabel('Contents of hello.py').fill('stale\n');
      await page.getByRole('button', { name: 'Save' }).click();
      await page.getByRole('alert').getByText('CONFLICT').waitFor();
      expect(await sandbox.files.read('hello.py')).toBe('changed by the agent\n');
      await page.getByRole('button', { name: 'Cancel' }).click();

      // Upload a file into the folder shown, then download it again.
      await page.getByRole('button', { name: '← Files' }).click();
      await page.getByLabel('Upload').setInputFiles({ name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('uploaded from the browser\n') });
      await page.locator('[data-entry="notes.txt"]').waitFor();
      expect(await sandbox.files.read('notes.txt')).toBe('uploaded from the browser\n');
      const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download notes.txt' }).click()]);
      expect(download.suggestedFilename()).toBe('notes.txt');
      expect((await readFile(await download.path())).toString()).toBe('uploaded from the browser\n');

      await page.getByRole('tab', { name: 'Audit' }).click();
      await page.getByLabel('Filter').fill('fs.write');
      await page.locator('.audit-table tbody tr', { hasText: 'hello.py' }).first().waitFor();
      await page.screenshot({ path: path.join(SHOTS, 'console-audit.png') });

      // Processes: one the SDK started, its output shown, then killed from the page.
      await sandbox.commands.start("sh -c 'echo from-background; sleep 600'", { tag: 'sleeper' });
      await page.getByRole('tab', { name: 'Processes' }).click();
      await page.getByRole('button', { name: 'Output' }).first().click();
      await page.locator('pre.code', { hasText: 'from-background' }).waitFor();
      await page.screenshot({ path: path.join(SHOTS, 'console-processes.png') });
      await page.getByRole('tabpanel').getByRole('button', { name: 'Kill' }).click();
      await page.getByRole('tabpanel').locator('button.danger').waitFor({ state: 'detached' });
    } finally {
      sandbox.close();
    }
  });

  it('pauses and resumes the sandbox, derives a token, keeps it alive and extends it', async () => {
    await page.getByRole('button', { name: 'Pause' }).click();
    await page.locator('.toolbar .state-paused').waitFor();
    await page.getByText('resume it to use its terminal').waitFor();
    await page.getByRole('button', { name: 'Resume' }).click();
    await page.locator('.toolbar .state-running').waitFor();
    // The page connects again after the resume: the terminal comes back.
    await page.getByRole('tab', { name: 'Terminal' }).click();
    await page.locator('.xterm-rows').waitFor();
    await Promise.all([
      page.waitForResponse((r) => r.url().endsWith('/keepalive') && r.status() === 200),
      page.getByRole('button', { name: 'Keep alive' }).click(),
    ]);
    const before = (await warren.controller.sandboxes.get(sandboxId)).expiresAt;
    await Promise.all([
      page.waitForResponse((r) => r.url().endsWith('/timeout') && r.status() === 200),
      page.getByRole('button', { name: 'Extend 1 h' }).click(),
    ]);
    const after = (await warren.controller.sandboxes.get(sandboxId)).expiresAt;
    expect(Date.parse(after) - Date.parse(before)).toBeGreaterThan(50 * 60 * 1000);
    await page.getByText('Derive a token').click();
    await page.getByRole('button', { name: 'Derive (1 h)' }).click();
    const token = await page.getByLabel('Derived token').inputValue();
    expect(token.length).toBeGreaterThan(20);
    const res = await fetch(`${warren.url}/v1/sandboxes/${sandboxId}`, { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(200);
  });

  it('hibernates and wakes the sandbox, snapshots it, and starts a sandbox from the snapshot', async () => {
    const sandbox = await Sandbox.connect(sandboxId, { baseUrl: warren.url, apiKey: warren.apiKey });
    try {
      await sandbox.files.write('kept.txt', 'from before the snapshot\n');
    } finally {
      sandbox.close();
    }
    await page.getByRole('button', { name: 'Hibernate' }).click();
    await page.locator('.toolbar .state-hibernated').waitFor();
    await page.getByText('Wake it to use its terminal').waitFor();
    expect((await warren.controller.sandboxes.get(sandboxId)).state).toBe('hibernated');
    await page.getByRole('button', { name: 'Wake' }).click();
    await page.locator('.toolbar .state-running').waitFor();
    await page.getByRole('tab', { name: 'Terminal' }).click();
    await page.locator('.xterm-rows').waitFor();

    await page.getByRole('button', { name: 'Snapshot', exact: true }).click();
    const notice = page.getByRole('status').filter({ hasText: 'taken' });
    const snapshotId = (await notice.locator('code').textContent())!;
    expect(snapshotId).toMatch(/^[A-Za-z0-9_-]+$/);
    await page.getByRole('navigation').getByRole('link', { name: 'Snapshots' }).click();
    const row = page.locator(`tr[data-snapshot="${snapshotId}"]`);
    await row.waitFor();
    await expect(row.textContent()).resolves.toContain(sandboxId.slice(0, 12));
    await page.screenshot({ path: path.join(SHOTS, 'console-snapshots.png') });
    await row.getByRole('button', { name: 'New sandbox' }).click();
    await page.waitForURL((url) => /#\/sandboxes\/[A-Za-z0-9]+$/.test(url.hash) && !url.hash.endsWith(sandboxId));
    const copyId = /#\/sandboxes\/([A-Za-z0-9]+)$/.exec(page.url())![1]!;
    // The page connects to the new sandbox, and leaves it before the kill: a kill racing the
    // page's WebSocket handshake, or its next poll, makes Chromium log a refused request.
    await page.locator('.xterm-rows').waitFor();
    await page.goto(`${ui()}#/snapshots`);
    const copy = await Sandbox.connect(copyId, { baseUrl: warren.url, apiKey: warren.apiKey });
    try {
      await expect(copy.files.read('kept.txt')).resolves.toBe('from before the snapshot\n');
    } finally {
      await copy.kill();
    }
    page.once('dialog', (dialog) => void dialog.accept());
    await row.getByRole('button', { name: 'Delete' }).click();
    await row.waitFor({ state: 'detached' });
    await expect(warren.controller.sandboxes.get(copyId)).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND' });
    await page.goto(`${ui()}#/sandboxes/${sandboxId}`);
    await page.locator('.toolbar .state-running').waitFor();
  });

  it('refuses cross-site requests that carry the session cookie', async () => {
    const cookie = (await sessionCookie())!;
    const cookieHeader = `warren_console=${cookie.value}`;
    const create = (headers: Record<string, string>) =>
      fetch(`${warren.url}/v1/sandboxes`, { method: 'POST', headers: { cookie: cookieHeader, 'content-type': 'application/json', ...headers }, body: '{}' });
    // The cookie alone (a forged form post), with a foreign Origin, or marked cross-site by the browser: 403 before anything is created.
    const attempts: Record<string, string>[] = [{}, { origin: 'http://evil.example' }, { 'sec-fetch-site': 'cross-site' }, { 'x-warren-csrf': 'AAAA' }];
    for (const headers of attempts) {
      const res = await create(headers);
      expect([res.status, headers]).toEqual([403, headers]);
    }
    const count = warren.controller.sandboxes.list().length;
    // A real cross-site page in the same browser: its fetch and its WebSocket get nowhere.
    evil = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' }).end(`<!doctype html><title>evil</title><script>
        const target = ${JSON.stringify(warren.url)};
        const results = [];
        fetch(target + '/v1/sandboxes', { method: 'POST', credentials: 'include', mode: 'no-cors', headers: { 'content-type': 'text/plain' }, body: '{}' })
          .then(() => results.push('fetch sent'), () => results.push('fetch failed'))
          .then(() => new Promise((done) => {
            const ws = new WebSocket(target.replace('http', 'ws') + '/v1/sandboxes/${sandboxId}/connect', ['warren.console']);
            ws.onopen = () => { results.push('ws open'); done(); };
            ws.onerror = () => { results.push('ws refused'); done(); };
          }))
          .then(() => { document.title = 'done:' + results.join(','); });
      </script>`);
    });
    await new Promise<void>((resolve) => evil!.listen(0, 'localhost', resolve));
    const evilPage = await context.newPage();
    await evilPage.goto(`http://localhost:${(evil.address() as AddressInfo).port}/`);
    // The evil page has no CSP of its own, so a string predicate may run there.
    await evilPage.waitForFunction("document.title.startsWith('done:')");
    expect(await evilPage.title()).toBe('done:fetch sent,ws refused');
    await evilPage.close();
    expect(warren.controller.sandboxes.list().length).toBe(count);
  });

  it('shows hostile names, contents, labels, commands and escape sequences as text; no script runs', async () => {
    const hostile = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, labels: { attack: HOSTILE_LABEL } });
    try {
      await hostile.files.write(HOSTILE_NAME, HOSTILE_CONTENT);
      await hostile.files.write('page.html', HOSTILE_CONTENT);
      await hostile.commands.run(`echo '<img src=x onerror=window.__pwned=5>'`);
      await page.goto(`${ui()}#/`);
      await page.getByText(HOSTILE_LABEL).first().waitFor();
      await page.goto(`${ui()}#/sandboxes/${hostile.id}`);
      // Terminal: OSC title, an OSC 8 link to javascript:, and markup, all from sandbox output.
      await page.locator('.xterm-rows').waitFor();
      await page.locator('.term-host').click();
      await page.keyboard.type(
        "printf '\\033]0;<img src=x onerror=window.__pwned=6>\\007\\033]8;;javascript:window.__pwned=7\\033\\\\click-me\\033]8;;\\033\\\\ <b>bold</b>\\n'\n",
      );
      await page.locator('.xterm-rows', { hasText: 'click-me <b>bold</b>' }).waitFor();
      // Clicking the OSC 8 link must open nothing and run nothing.
      const noDialog = (dialog: Dialog) => {
        errors.push(`a dialog opened: ${dialog.message()}`);
        void dialog.dismiss();
      };
      page.on('dialog', noDialog);
      try {
        // xterm.js takes the mouse on its screen layer: click where the link's cells are.
        const box = (await page.locator('.xterm-rows').getByText('click-me', { exact: true }).boundingBox())!;
        await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
        await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
        await page.waitForTimeout(300);
      } finally {
        page.off('dialog', noDialog);
      }
      await page.getByRole('tab', { name: 'Files' }).click();
      await page.getByText(HOSTILE_NAME).click();
      await page.locator('pre.code').getByText('<script>window.__pwned=2</script>', { exact: false }).waitFor();
      await page.getByRole('button', { name: '← Files' }).click();
      await page.locator('[data-entry="page.html"]').click();
      await page.locator('pre.code').getByText('onerror', { exact: false }).waitFor();
      await page.getByRole('tab', { name: 'Audit' }).click();
      await page.locator('.audit-table').getByText('<img src=x onerror=window.__pwned=5>', { exact: false }).first().waitFor();
      expect(await pwned()).toBeUndefined();
      expect(await page.evaluate('document.querySelectorAll("img, script:not([src])").length')).toBe(0);
      expect(await page.evaluate('window.__violations')).toEqual([]);
    } finally {
      await hostile.kill();
    }
  });

  it('shows the controller page with its charts, and a phone-sized list', async () => {
    await page.goto(`${ui()}#/controller`);
    await page.getByRole('heading', { name: 'Controller' }).waitFor();
    await page.locator('.chart svg').first().waitFor({ timeout: 30_000 });
    await page
      .getByText('ready', { exact: true })
      .waitFor()
      .catch(async (err: unknown) => {
        throw new Error(`${(err as Error).message}\nThe health card says: ${await page.locator('.card').first().textContent()}`);
      });
    await page.screenshot({ path: path.join(SHOTS, 'console-controller.png'), fullPage: true });
    await page.goto(`${ui()}#/`);
    await page.locator(`[data-sandbox="${sandboxId}"]`).waitFor();
    await page.screenshot({ path: path.join(SHOTS, 'console-list.png') });
    await page.setViewportSize({ width: 390, height: 844 });
    await page.reload();
    await logIn();
    await page.locator(`[data-sandbox="${sandboxId}"]`).waitFor();
    await page.screenshot({ path: path.join(SHOTS, 'console-phone.png') });
    await page.setViewportSize({ width: 1280, height: 800 });
  });

  it('renders a list of 100 sandboxes (measured, not asserted)', async () => {
    // The list's answer is made up here (100 real containers would be a load test); the rendering is the page's own.
    const now = Date.now();
    const sandboxes = Array.from({ length: 100 }, (_, i) => ({
      id: `bench${String(i).padStart(4, '0')}aaaaaaaaaaaa`,
      state: i % 7 === 0 ? 'paused' : 'running',
      image: 'warren/sandbox:latest',
      createdAt: new Date(now - i * 60_000).toISOString(),
      expiresAt: new Date(now + 3_600_000).toISOString(),
      labels: { team: `t${i % 5}`, run: String(i) },
      settings: {},
    }));
    await page.route('**/v1/sandboxes', (route) => route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify({ sandboxes }) }));
    await page.route('**/v1/sandboxes/bench*/metrics', (route) =>
      route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify({ cpuPercent: 1.5, memoryBytes: 50_000_000 }) }),
    );
    await page.goto(`${ui()}#/`);
    await page.locator('body[data-list-rows="100"]').waitFor({ state: 'attached' });
    const ms = await page.evaluate('document.body.dataset.listRenderMs');
    console.log(`console: the list of 100 sandboxes rendered in ${String(ms)} ms (answer to painted table)`);
    await page.unrouteAll();
  });

  it('kills the sandbox from its page and logs out; no console errors on the way', async () => {
    await page.goto(`${ui()}#/sandboxes/${sandboxId}`);
    // The page's connection is up before the kill: a kill racing the page's WebSocket handshake makes
    // Chromium log the refused handshake (503), which says nothing about the page.
    await page.locator('.xterm-rows').waitFor();
    page.once('dialog', (dialog) => void dialog.accept());
    await page.getByRole('button', { name: 'Kill' }).first().click();
    await page.waitForURL(/#\/$/);
    await expect(warren.controller.sandboxes.get(sandboxId)).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND' });
    await page.getByRole('button', { name: 'Log out' }).click();
    await page.getByLabel('API key').waitFor();
    expect(await sessionCookie()).toBeUndefined();
    expect(await pwned()).toBeUndefined();
    expect(errors).toEqual([]);
    expect(await page.evaluate('window.__violations')).toEqual([]);
  });
});
