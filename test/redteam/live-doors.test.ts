import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox, type WatchEvent } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';
import { DaemonIdentity, HostSentinel, sandboxCode } from '../support/redteam.js';

/**
 * Sandbox code against the doors that carry what it makes back out: the port proxy (an app's
 * answers reach the controller and a browser), folder watches and streamed downloads (names and
 * bytes sandbox code swaps while a narrowed handle reads). Each attack checks the documented
 * answer, that the daemon is the same process, and that a host sentinel is unchanged.
 */
describe('red team: sandbox code against the ports, watch and download doors', () => {
  let warren: TestController;
  let sandbox: Sandbox;
  let sentinel: HostSentinel;
  let daemon: DaemonIdentity;
  const auth = () => ({ authorization: `Bearer ${sandbox.token}` });

  beforeAll(async () => {
    warren = await startTestController();
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    sentinel = await HostSentinel.make();
    daemon = await DaemonIdentity.of(sandbox);
  }, 60_000);

  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    await sentinel?.remove();
  });

  const unharmed = async () => {
    await daemon.expectSame(sandbox);
    await sentinel.expectUnchanged();
  };

  it('an app that answers with endless headers, both framings, or Warren’s own cookies gets a typed 502 or loses the cookies; the controller stays small', async () => {
    // A raw server: the answer for each path is chosen by sandbox code, bytes and all.
    await sandbox.files.write(
      'hostile_app.py',
      `import socket, threading
ANSWERS = {
  b'/endless': None,
  b'/both': b'HTTP/1.1 200 OK\\r\\nContent-Length: 5\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n0\\r\\n\\r\\nHTTP/1.1 200 OK\\r\\nContent-Length: 0\\r\\n\\r\\n',
  b'/cookies': b'HTTP/1.1 200 OK\\r\\nSet-Cookie: warren_port=forged; Path=/\\r\\nSet-Cookie: WARREN_SESSION=fixed; Path=/ui\\r\\nSet-Cookie: __Host-warren_console=x; Path=/\\r\\nSet-Cookie: =warren_console=nameless; Path=/ui/\\r\\nSet-Cookie:  = Warren_console=spaced\\r\\nSet-Cookie: app=kept; Path=/\\r\\nCross-Origin-Opener-Policy: same-origin\\r\\nService-Worker-Allowed: /\\r\\nContent-Length: 2\\r\\n\\r\\nok',
}
def serve(conn):
    request = conn.recv(65536)
    path = request.split(b' ')[1] if b' ' in request else b'/'
    answer = ANSWERS.get(path, b'HTTP/1.1 404 Not Found\\r\\nContent-Length: 0\\r\\n\\r\\n')
    try:
        if answer is None:
            conn.sendall(b'HTTP/1.1 200 OK\\r\\n')
            while True: conn.sendall(b'X-Fill: ' + b'a' * 8000 + b'\\r\\n')
        conn.sendall(answer)
    except OSError: pass
    conn.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', 8000)); s.listen(64)
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
`,
    );
    await sandbox.commands.start('python3 hostile_app.py');
    const base = sandbox.ports.baseUrl(8000);
    for (let i = 0; i < 50 && (await fetch(`${base}nothing`, { headers: auth() })).status !== 404; i++) await new Promise((r) => setTimeout(r, 100));

    const rssBefore = process.memoryUsage().rss;
    const endless = await fetch(`${base}endless`, { headers: auth() });
    expect(endless.status).toBe(502);
    expect(((await endless.json()) as { error: { code: string } }).error.code).toBe('UPSTREAM_UNAVAILABLE');
    const both = await fetch(`${base}both`, { headers: auth() });
    expect(both.status).toBe(502);
    await both.text();
    expect(process.memoryUsage().rss - rssBefore).toBeLessThan(64 * 1024 * 1024);

    const cookies = await fetch(`${base}cookies`, { headers: auth() });
    expect(cookies.status).toBe(200);
    expect(cookies.headers.getSetCookie()).toEqual(['app=kept; Path=/']);
    // Nor may it keep a console window it opens scriptable (test/browser/console-port-attacks.test.ts), or widen a service worker.
    expect(cookies.headers.get('cross-origin-opener-policy')).toBeNull();
    expect(cookies.headers.get('service-worker-allowed')).toBeNull();
    await unharmed();
  });

  it('a watch through a narrowed handle never names what is outside its folder, however fast sandbox code swaps folders for links', async () => {
    await sandboxCode(sandbox, 'mkdir -p /workspace/pub/d /workspace/secret && echo hidden > /workspace/secret/secret-name.txt && echo ok=1');
    const { token } = await sandbox.deriveToken({ allowRead: ['/workspace/pub'], readonly: true });
    const narrow = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token });
    const seen: WatchEvent[] = [];
    try {
      const watcher = await narrow.files.watch('/workspace/pub', { recursive: true, coalesceMs: 0, onEvent: (e) => seen.push(e) });
      // For two seconds: the watched subfolder becomes a link to the secret folder and back, and
      // the secret folder's files change, as fast as the shell can.
      await sandboxCode(
        sandbox,
        `end=$(($(date +%s) + 2)); i=0
         while [ $(date +%s) -lt $end ]; do
           rm -rf /workspace/pub/d; ln -s /workspace/secret /workspace/pub/d; touch /workspace/secret/secret-$i.txt
           rm -f /workspace/pub/d; mkdir /workspace/pub/d; touch /workspace/pub/d/visible-$i.txt; i=$((i+1))
         done; echo rounds=$i`,
      );
      await new Promise((r) => setTimeout(r, 300));
      watcher.close();
    } finally {
      narrow.close();
    }
    const paths = seen.flatMap((e) => ('path' in e ? [e.path, e.from ?? ''] : []));
    expect(paths.some((p) => p.includes('visible-'))).toBe(true);
    expect(paths.filter((p) => p.includes('secret'))).toEqual([]);
    // Paths come in the policy's display form, relative to the workspace: all inside pub/.
    expect(paths.filter((p) => p !== '' && p !== 'pub' && !p.startsWith('pub/'))).toEqual([]);
    await unharmed();
  });

  it('a streamed download through a narrowed handle never carries bytes from outside its folder while sandbox code swaps files for links', async () => {
    await sandboxCode(sandbox, 'mkdir -p /workspace/share && echo TOPSECRET-BYTES > /workspace/private.txt && echo ok=1');
    const { token } = await sandbox.deriveToken({ allowRead: ['/workspace/share'], readonly: true });
    const narrow = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token });
    const local = await mkdtemp(path.join(os.tmpdir(), 'warren-redteam-dl-'));
    let swapper: { kill(): Promise<unknown> } | undefined;
    try {
      swapper = await sandbox.commands.start(
        `while :; do for i in 1 2 3 4 5 6 7 8; do ln -sfn ../private.txt /workspace/share/f$i; rm -f /workspace/share/f$i; echo public > /workspace/share/f$i; done; done`,
      );
      let leaked = false;
      for (let round = 0; round < 15; round++) {
        const target = path.join(local, String(round));
        await narrow.files.downloadTo('/workspace/share', target).catch(() => undefined); // a file gone mid-walk may fail the round, never leak
        const walk = async (dir: string): Promise<void> => {
          for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
            const full = path.join(dir, entry.name);
            if (entry.isDirectory()) await walk(full);
            else if (entry.isFile() && (await readFile(full, 'utf8')).includes('TOPSECRET')) leaked = true;
          }
        };
        await walk(target);
      }
      expect(leaked).toBe(false);
    } finally {
      narrow.close();
      await swapper?.kill();
      await rm(local, { recursive: true, force: true });
    }
    await unharmed();
  });
});
