import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import type { BrowserContext } from 'playwright-core';
import { launchChromium } from '../support/browser.js';
import { startTestController, type TestController } from '../support/fixtures.js';
import { freePort } from '../support/reliability.js';

/**
 * A real web app inside a sandbox, opened in Debian's Chromium through a signed port URL (docs/ports.md):
 * the page, a script it loads by a relative path, a streamed answer read chunk by chunk, server-sent
 * events and a WebSocket echo, once on the controller's own origin and once on a per-port origin
 * (`<port>-<id>.localhost:<port>`: Chromium resolves every `*.localhost` name to loopback itself).
 */

/**
 * The app, on the standard library only (the sandbox image has no WebSocket package): a page, its
 * script, a response streamed in pieces, an event stream, and a hand-made RFC 6455 echo that
 * answers each text frame with "echo:" and the text.
 */
const APP = String.raw`
import base64, hashlib, socketserver, struct, threading, time
PAGE = b'<!doctype html><meta charset="utf-8"><title>warren app</title><h1>App in a sandbox</h1><ul><li id="stream">stream: waiting</li><li id="sse">sse: waiting</li><li id="ws">ws: waiting</li></ul><script src="app.js"></script>'
SCRIPT = b'''
const show = (id, text) => { document.getElementById(id).textContent = id + ': ' + text; };
(async () => {
  const res = await fetch('stream');
  const reader = res.body.getReader();
  let pieces = 0, text = '';
  for (;;) { const { done, value } = await reader.read(); if (done) break; pieces++; text += new TextDecoder().decode(value); }
  show('stream', text.trim() + ' in ' + (pieces > 1 ? 'pieces' : 'one piece'));
})().catch((e) => show('stream', 'failed ' + e));
const got = [];
const events = new EventSource('events');
events.onmessage = (e) => { got.push(e.data); if (got.length === 3) { events.close(); show('sse', got.join(',')); } };
const ws = new WebSocket(new URL('ws', location.href).href.replace(/^http/, 'ws'));
ws.onopen = () => ws.send('ping from ' + location.host);
ws.onmessage = (e) => { show('ws', e.data); ws.close(); };
ws.onerror = () => show('ws', 'failed');
'''
GUID = b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11'

class Handler(socketserver.StreamRequestHandler):
    def answer(self, status, kind, body):
        self.wfile.write(b'HTTP/1.1 ' + status + b'\r\ncontent-type: ' + kind + b'\r\ncontent-length: ' + str(len(body)).encode() + b'\r\nconnection: close\r\n\r\n' + body)

    def handle(self):
        line = self.rfile.readline(8192).decode('latin-1')
        headers = {}
        while True:
            h = self.rfile.readline(8192)
            if h in (b'\r\n', b'\n', b''):
                break
            name, _, value = h.decode('latin-1').partition(':')
            headers[name.strip().lower()] = value.strip()
        target = line.split(' ')[1] if line.count(' ') >= 2 else '/'
        route = target.split('?')[0]
        if route == '/':
            self.answer(b'200 OK', b'text/html; charset=utf-8', PAGE)
        elif route == '/app.js':
            self.answer(b'200 OK', b'text/javascript', SCRIPT)
        elif route == '/stream':
            self.wfile.write(b'HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n')
            for word in (b'one ', b'two ', b'three'):
                self.wfile.write(b'%x\r\n%s\r\n' % (len(word), word)); self.wfile.flush(); time.sleep(0.3)
            self.wfile.write(b'0\r\n\r\n')
        elif route == '/events':
            self.wfile.write(b'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n')
            for i in range(3):
                self.wfile.write(b'data: tick%d\n\n' % i); self.wfile.flush(); time.sleep(0.2)
            time.sleep(5)
        elif route == '/ws' and headers.get('upgrade', '').lower() == 'websocket':
            accept = base64.b64encode(hashlib.sha1(headers['sec-websocket-key'].encode() + GUID).digest())
            self.wfile.write(b'HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: ' + accept + b'\r\n\r\n'); self.wfile.flush()
            while True:
                head = self.rfile.read(2)
                if len(head) < 2:
                    return
                opcode, size = head[0] & 0x0F, head[1] & 0x7F
                if size == 126:
                    size = struct.unpack('>H', self.rfile.read(2))[0]
                elif size == 127:
                    size = struct.unpack('>Q', self.rfile.read(8))[0]
                mask = self.rfile.read(4) if head[1] & 0x80 else b'\0\0\0\0'
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(size)))
                if opcode == 8:
                    self.wfile.write(b'\x88\x00'); self.wfile.flush(); return
                if opcode == 1:
                    reply = b'echo:' + data
                    self.wfile.write(bytes([0x81, len(reply)]) + reply); self.wfile.flush()
        else:
            self.answer(b'404 Not Found', b'text/plain', b'no such page')

class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

Server(('127.0.0.1', 8000), Handler).serve_forever()
`;

describe('a web app in a sandbox, in Chromium', () => {
  let context: BrowserContext;
  let userDataDir: string;

  beforeAll(async () => {
    userDataDir = await mkdtemp(path.join(os.tmpdir(), 'warren-chromium-ports-'));
    context = await launchChromium(userDataDir);
  });

  afterAll(async () => {
    await context?.close();
    if (userDataDir) await rm(userDataDir, { recursive: true, force: true });
  });

  /** Starts the app in a sandbox of `warren` and waits until it answers through the port route. */
  async function appSandbox(warren: TestController): Promise<Sandbox> {
    const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    await sandbox.files.write('app.py', APP);
    await sandbox.commands.start('python3 app.py');
    const auth = { authorization: `Bearer ${sandbox.token}` };
    for (let i = 0; i < 100; i++) {
      const res = await fetch(`${warren.url}/v1/sandboxes/${sandbox.id}/ports/8000/`, { headers: auth }).catch(() => undefined);
      if (res?.status === 200) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    return sandbox;
  }

  /** Opens the signed URL and waits for the page to report its three live channels. */
  async function openApp(url: string): Promise<{ stream: string; sse: string; ws: string; location: string; cookies: string }> {
    const page = await context.newPage();
    const failures: string[] = [];
    page.on('pageerror', (err) => failures.push(err.message));
    try {
      const res = await page.goto(url);
      expect(res?.status()).toBe(200);
      await page.getByRole('heading', { name: 'App in a sandbox' }).waitFor();
      const text = async (id: string) => (await page.locator(`#${id}`).textContent()) ?? '';
      await page.waitForFunction("['stream', 'sse', 'ws'].every((id) => !document.getElementById(id).textContent.includes('waiting'))", undefined, {
        timeout: 20_000,
      });
      expect(failures).toEqual([]);
      return {
        stream: await text('stream'),
        sse: await text('sse'),
        ws: await text('ws'),
        location: page.url(),
        cookies: String(await page.evaluate('document.cookie')),
      };
    } finally {
      await page.close();
    }
  }

  it('on the controller origin: the page, its script, a streamed body, server-sent events and a WebSocket', async () => {
    await using warren = await startTestController();
    await using sandbox = await appSandbox(warren);
    const url = await sandbox.ports.url(8000, { ttlSeconds: 60 });
    expect(new URL(url).origin).toBe(new URL(warren.url).origin);
    const seen = await openApp(url);
    expect(seen.stream).toBe('stream: one two three in pieces');
    expect(seen.sse).toBe('sse: tick0,tick1,tick2');
    expect(seen.ws).toBe(`ws: echo:ping from ${new URL(warren.url).host}`);
    // The port cookie is HttpOnly: the app's own script never holds Warren's credential.
    expect(seen.cookies).toBe('');
    // Without the signature the browser has no way in for another sandbox's port.
    const page = await context.newPage();
    try {
      const other = await page.goto(`${warren.url}/v1/sandboxes/${sandbox.id}/ports/8001/`);
      expect(other?.status()).toBe(401);
    } finally {
      await page.close();
    }
  }, 120_000);

  it('on an origin of its own (<port>-<id>.<portDomain>), with the same channels', async () => {
    const port = await freePort();
    await using warren = await startTestController({ config: { port, portDomain: `localhost:${port}`, portDomainScheme: 'http' } });
    await using sandbox = await appSandbox(warren);
    const url = new URL(await sandbox.ports.url(8000, { ttlSeconds: 60 }));
    expect(url.host).toBe(`8000-${sandbox.id.toLowerCase()}.localhost:${port}`);
    const seen = await openApp(url.href);
    expect(new URL(seen.location).host).toBe(url.host);
    expect(seen.stream).toBe('stream: one two three in pieces');
    expect(seen.sse).toBe('sse: tick0,tick1,tick2');
    expect(seen.ws).toBe(`ws: echo:ping from ${url.host}`);
    expect(seen.cookies).toBe('');
  }, 120_000);
});
