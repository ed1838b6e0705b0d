import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import { WebSocket } from 'ws';
import { startTestController, type TestController } from '../support/fixtures.js';
import { DaemonIdentity, HostSentinel } from '../support/redteam.js';

/**
 * A narrowed handle against its own end (docs/security.md, "Derived handles and what they mint"):
 * a derived token with a lifetime of seconds mints what it may (a port URL of a week, a derived
 * token of a month) and opens what it may (a streamed answer through a port, a WebSocket to the
 * daemon), then waits for its own token to be refused. Nothing it minted or opened may go on.
 */
const APP = String.raw`
import socket, threading, time
def answer(conn):
    try:
        data = b''
        while b'\r\n\r\n' not in data:
            chunk = conn.recv(65536)
            if not chunk: return
            data += chunk
        path = data.split(b' ')[1]
        if path == b'/stream':
            conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n')
            while True:
                conn.sendall(b'5\r\ntick\n\r\n')
                time.sleep(0.2)
        body = b'plain ' + path
        conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: ' + str(len(body)).encode() + b'\r\n\r\n' + body)
    except OSError:
        pass
    finally:
        conn.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', 8000)); s.listen(64)
while True:
    c, _ = s.accept(); threading.Thread(target=answer, args=(c,), daemon=True).start()
`;

const WEEK_SECONDS = 7 * 24 * 3600;

describe.each(['socket', 'exec'] as const)('red team: what a derived handle mints or opens ends with the handle (daemon channel: %s)', (daemonChannel) => {
  let warren: TestController;
  let sandbox: Sandbox;
  let sentinel: HostSentinel;
  let daemon: DaemonIdentity;

  const mintPortUrl = (token: string, body: Record<string, unknown>) =>
    fetch(`${warren.url}/v1/sandboxes/${sandbox.id}/port-urls`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const info = (token: string) => fetch(`${warren.url}/v1/sandboxes/${sandbox.id}`, { headers: { authorization: `Bearer ${token}` } });

  beforeAll(async () => {
    warren = await startTestController({ config: { daemonChannel } });
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    sentinel = await HostSentinel.make();
    await sandbox.files.write('app.py', APP);
    await sandbox.commands.start('python3 app.py');
    const ready = async () => (await fetch(`${sandbox.ports.baseUrl(8000)}ready`, { headers: { authorization: `Bearer ${sandbox.token}` } })).status;
    for (let i = 0; i < 100 && (await ready().catch(() => 0)) !== 200; i++) await new Promise((r) => setTimeout(r, 100));
    daemon = await DaemonIdentity.of(sandbox);
  }, 60_000);

  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    await sentinel?.remove();
  });

  it('a handle that lives 6 s asks for a port URL of a week: the URL, its cookie, a stream it opened and the handle’s WebSocket all end when the handle does', async () => {
    const handle = await sandbox.deriveToken({ allowRead: ['/workspace'], allowExec: true, ttlSeconds: 6 });
    const handleEnds = Date.parse(handle.expiresAt!);

    // The mint: a week asked for, never more than the handle's own life given.
    const minted = await mintPortUrl(handle.token, { port: 8000, ttlSeconds: WEEK_SECONDS });
    expect(minted.status).toBe(201);
    const link = (await minted.json()) as { path: string; expiresAt: string };
    expect(Date.parse(link.expiresAt)).toBeLessThanOrEqual(handleEnds);
    // So is a token derived from it (a month asked for).
    const child = (await (
      await fetch(`${warren.url}/v1/sandboxes/${sandbox.id}/derive`, {
        method: 'POST',
        headers: { authorization: `Bearer ${handle.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ allowRead: ['/workspace'], allowExec: true, ttlSeconds: 30 * 24 * 3600 }),
      })
    ).json()) as { token: string; expiresAt: string };
    expect(Date.parse(child.expiresAt)).toBeLessThanOrEqual(handleEnds);

    // While the handle lives, the URL works, and its cookie carries the page's other requests.
    const first = await fetch(`${warren.url}${link.path}`);
    expect([first.status, await first.text()]).toEqual([200, 'plain /']);
    const cookie = first.headers.get('set-cookie')!.split(';')[0]!;
    expect(cookie).toMatch(/^warren_port=/);
    const byCookie = await fetch(`${sandbox.ports.baseUrl(8000)}page`, { headers: { cookie } });
    expect([byCookie.status, await byCookie.text()]).toEqual([200, 'plain /page']);

    // What it opens meanwhile: an endless answer through the link, and a WebSocket to the daemon with the handle's token.
    const stream = await fetch(`${sandbox.ports.baseUrl(8000)}stream`, { headers: { cookie } });
    expect(stream.status).toBe(200);
    const streamEnded = (async () => {
      const reader = stream.body!.getReader();
      try {
        for (;;) if ((await reader.read()).done) return 'ended';
      } catch {
        return 'cut';
      }
    })();
    const ws = new WebSocket(`${warren.url.replace('http', 'ws')}/v1/sandboxes/${sandbox.id}/connect`, {
      headers: { authorization: `Bearer ${handle.token}` },
    });
    ws.on('error', () => undefined);
    const wsClosed = new Promise<number>((resolve) => ws.once('close', (code: number) => resolve(code)));
    await new Promise<void>(
      (resolve, reject) => (ws.once('open', () => resolve()), ws.once('close', () => reject(new Error('the handle’s WebSocket did not open')))),
    );

    // Wait for the handle's own token to be refused (its end, as the controller sees it).
    for (let i = 0; i < 200 && (await info(handle.token)).status !== 401; i++) await new Promise((r) => setTimeout(r, 100));
    expect((await info(handle.token)).status).toBe(401);

    // The URL and its cookie are refused with it (a week, before).
    const late = await fetch(`${warren.url}${link.path}`);
    expect([late.status, ((await late.json()) as { error: { code: string } }).error.code]).toEqual([401, 'UNAUTHORIZED']);
    expect((await fetch(`${sandbox.ports.baseUrl(8000)}page`, { headers: { cookie } })).status).toBe(401);
    expect((await info(child.token)).status).toBe(401);

    // What it opened ends too: the stream is cut, the WebSocket closes with 1008 (they went on for good, before).
    const within = async <T>(p: Promise<T>, what: string): Promise<T> => {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} still open 15 s after the handle ended`)), 15_000)));
      try {
        return await Promise.race([p, late]);
      } finally {
        clearTimeout(timer);
      }
    };
    expect(await within(streamEnded, 'the stream')).toBe('cut');
    expect(await within(wsClosed, 'the WebSocket')).toBe(1008);
    ws.terminate();

    await daemon.expectSame(sandbox);
    await sentinel.expectUnchanged();
  }, 60_000);

  it('a handle without exec mints no port URL; the API key’s and the sandbox token’s URLs keep the lifetime asked for', async () => {
    const files = await sandbox.deriveToken({ allowRead: ['/workspace'], ttlSeconds: 600 });
    const refused = await mintPortUrl(files.token, { port: 8000, ttlSeconds: 60 });
    expect([refused.status, ((await refused.json()) as { error: { code: string } }).error.code]).toEqual([403, 'FORBIDDEN']);
    for (const token of [warren.apiKey, sandbox.token]) {
      const res = await mintPortUrl(token, { port: 8000, ttlSeconds: WEEK_SECONDS });
      const { expiresAt } = (await res.json()) as { expiresAt: string };
      expect(Date.parse(expiresAt)).toBeGreaterThan(Date.now() + (WEEK_SECONDS - 600) * 1000);
    }
    // A handle with exec but no end gets what it asked for, too.
    const open = await sandbox.deriveToken({ allowRead: ['/workspace'], allowExec: true });
    const res = await mintPortUrl(open.token, { port: 8000, ttlSeconds: 120 });
    const { path, expiresAt } = (await res.json()) as { path: string; expiresAt: string };
    expect(Math.abs(Date.parse(expiresAt) - (Date.now() + 120_000))).toBeLessThan(60_000);
    expect((await fetch(`${warren.url}${path}`)).status).toBe(200);
  });
});
