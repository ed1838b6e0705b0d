import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from 'e2b';
import { startLocalController, type LocalController } from '../../support/local-controller.js';

/** Raw requests at the gateway's envd and control-plane doors: E2B-shaped errors, nothing reached a credential could not reach. */
describe('hostile input at the e2b gateway', () => {
  let warren: LocalController;
  let a: Sandbox;
  let b: Sandbox;
  let base: string;
  beforeAll(async () => {
    warren = await startLocalController();
    base = `${warren.url}/e2b`;
    const opts = { apiKey: warren.apiKey, apiUrl: base, sandboxUrl: base };
    a = await Sandbox.create(opts);
    b = await Sandbox.create(opts);
    await a.files.write('secret-a.txt', 'only a');
  });
  afterAll(async () => {
    await a?.kill();
    await b?.kill();
    await warren[Symbol.asyncDispose]();
  });

  /** The access token the create answer gave sandbox `s` (the SDK keeps it on the instance). */
  const tokenOf = (s: Sandbox) => (s as unknown as { envdAccessToken: string }).envdAccessToken;
  const envdHeaders = (s: Sandbox, token = tokenOf(s)) => ({ 'e2b-sandbox-id': s.sandboxId, 'x-access-token': token });
  const unary = (s: Sandbox, rpc: string, body: string, headers: Record<string, string> = envdHeaders(s)) =>
    fetch(`${base}/${rpc}`, { method: 'POST', headers: { ...headers, 'content-type': 'application/json', 'connect-protocol-version': '1' }, body });

  it("refuses another sandbox's access token on envd RPC, /files and the control plane", async () => {
    const stolen = envdHeaders(a, tokenOf(b));
    const stat = await unary(a, 'filesystem.Filesystem/Stat', JSON.stringify({ path: 'secret-a.txt' }), stolen);
    expect(stat.status).toBe(401);
    expect(await stat.json()).toMatchObject({ code: 'unauthenticated' });
    const file = await fetch(`${base}/files?path=secret-a.txt`, { headers: stolen });
    expect(file.status).toBe(401);
    expect(await file.json()).toMatchObject({ code: 401, message: expect.stringMatching(/access token/) });
    const kill = await fetch(`${base}/sandboxes/${a.sandboxId}`, { method: 'DELETE', headers: { 'x-api-key': tokenOf(a) } });
    expect(kill.status).toBe(401);
    expect(await a.isRunning()).toBe(true);
    const none = await unary(a, 'process.Process/List', '{}', { 'e2b-sandbox-id': a.sandboxId });
    expect(none.status).toBe(401);
  });

  it('gives a derived token as access token exactly its grant: reads, no commands, no writes', async () => {
    const derive = await fetch(`${warren.url}/v1/sandboxes/${a.sandboxId}/derive`, {
      method: 'POST',
      headers: { authorization: `Bearer ${warren.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ inherit: true, readonly: true }),
    });
    expect(derive.status).toBe(201);
    const { token } = (await derive.json()) as { token: string };
    const headers = envdHeaders(a, token);
    expect(await (await fetch(`${base}/files?path=secret-a.txt`, { headers })).text()).toBe('only a');
    const run = await fetch(`${base}/process.Process/List`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json', 'connect-protocol-version': '1' },
      body: '{}',
    });
    expect(run.status).toBe(403);
    expect(await run.json()).toMatchObject({ code: 'permission_denied', message: expect.stringMatching(/may not run commands/) });
    const form = new FormData();
    form.append('file', new Blob(['x']), 'written-by-reader.txt');
    const write = await fetch(`${base}/files`, { method: 'POST', headers, body: form });
    expect(write.status).toBe(403);
    expect(await b.files.exists(`${warren.root}/written-by-reader.txt`)).toBe(false);
  });

  it('answers unknown RPCs, unknown routes and unknown sandboxes in E2B shapes', async () => {
    const unknown = await unary(a, 'process.Process/Explode', '{}');
    expect(unknown.status).toBe(501);
    expect(await unknown.json()).toMatchObject({ code: 'unimplemented' });
    const service = await unary(a, 'evil.Service/Run', '{}');
    expect(service.status).toBe(501);
    const route = await fetch(`${base}/templates/t1/builds/b1/logs`, { headers: { 'x-api-key': warren.apiKey } });
    expect(route.status).toBe(501);
    expect(await route.json()).toMatchObject({ code: 501, message: expect.stringMatching(/not supported/) });
    const ghost = await fetch(`${base}/sandboxes/doesnotexist123`, { headers: { 'x-api-key': warren.apiKey } });
    expect(ghost.status).toBe(404);
    expect(await ghost.json()).toMatchObject({ code: 404 });
    // An unknown sandbox is gone to a caller who may know (the API key); to anyone else /health is 401, as for every id.
    const health = await fetch(`${base}/health`, { headers: { 'e2b-sandbox-id': 'doesnotexist123', 'x-access-token': warren.apiKey } });
    expect(health.status).toBe(502);
    expect((await fetch(`${base}/health`, { headers: { 'e2b-sandbox-id': 'doesnotexist123' } })).status).toBe(401);
  });

  it('answers malformed JSON, bad fields and oversized unary bodies with invalid_argument or resource_exhausted', async () => {
    const notJson = await unary(a, 'filesystem.Filesystem/Stat', '{"path":');
    expect(notJson.status).toBe(400);
    expect(await notJson.json()).toMatchObject({ code: 'invalid_argument' });
    const wrongType = await unary(a, 'filesystem.Filesystem/Stat', JSON.stringify({ path: 42 }));
    expect(wrongType.status).toBe(400);
    const huge = await unary(a, 'filesystem.Filesystem/Stat', JSON.stringify({ path: 'x'.repeat(5 * 1024 * 1024) }));
    expect([400, 413, 429]).toContain(huge.status);
    const nul = await unary(a, 'filesystem.Filesystem/Stat', JSON.stringify({ path: 'a\u0000b' }));
    expect(nul.status).toBe(400);
  });

  it('answers malformed, truncated and huge-length Connect envelopes with a Connect error, and stays up', async () => {
    const stream = (body: Uint8Array) =>
      fetch(`${base}/process.Process/Start`, {
        method: 'POST',
        headers: { ...envdHeaders(a), 'content-type': 'application/connect+json', 'connect-protocol-version': '1' },
        body,
      });
    const envelope = (flags: number, length: number, payload: Uint8Array) => {
      const out = new Uint8Array(5 + payload.length);
      const view = new DataView(out.buffer);
      view.setUint8(0, flags);
      view.setUint32(1, length >>> 0);
      out.set(payload, 5);
      return out;
    };
    const payload = new TextEncoder().encode(JSON.stringify({ process: { cmd: '/bin/echo', args: ['hi'] } }));
    for (const body of [
      envelope(0, 0xffffffff, payload), // a "negative" / 4 GiB length
      envelope(0, 64 * 1024 * 1024, payload), // far past the read limit
      envelope(0, payload.length + 10, payload), // truncated
      envelope(0, 3, new TextEncoder().encode('{{{')), // not JSON
      new Uint8Array([0, 0]), // shorter than a header
    ]) {
      const res = await stream(body);
      const bytes = new Uint8Array(await res.arrayBuffer());
      // Either an HTTP error with a Connect JSON body, or a 200 stream whose end-of-stream envelope carries the error.
      const text = new TextDecoder().decode(res.status === 200 ? bytes.subarray(5) : bytes);
      expect(text).toMatch(/"code":"(invalid_argument|resource_exhausted|internal|unknown)"/);
      expect(text).not.toMatch(/"start"/);
    }
    expect((await a.commands.run('echo still up')).stdout).toBe('still up\n');
  });

  it('keeps path tricks and bad uploads inside the policy with E2B errors', async () => {
    const headers = envdHeaders(a);
    for (const path of ['../../../../etc/passwd', '/etc/passwd', '%2e%2e/%2e%2e/etc/passwd', `${warren.root}/../../etc/passwd`]) {
      const res = await fetch(`${base}/files?path=${encodeURIComponent(path)}`, { headers });
      expect([403, 404]).toContain(res.status);
      expect(await res.json()).toMatchObject({ code: res.status });
    }
    const noFile = new FormData();
    noFile.append('other', 'x');
    const empty = await fetch(`${base}/files`, { method: 'POST', headers, body: noFile });
    expect(empty.status).toBe(400);
    const escape = new FormData();
    escape.append('file', new Blob(['x']), '../../../../tmp/escaped.txt');
    const escaped = await fetch(`${base}/files`, { method: 'POST', headers, body: escape });
    expect(escaped.status).toBe(403);
    const big = await fetch(`${base}/files?path=big.bin`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/octet-stream', 'content-length': String(65 * 1024 * 1024) },
      body: new Uint8Array(16),
      duplex: 'half',
    }).catch(() => undefined);
    if (big) expect(big.status).toBe(413);
    const signed = await fetch(`${base}/files?path=secret-a.txt&signature=v1_abc`, { headers: { 'e2b-sandbox-id': a.sandboxId } });
    expect(signed.status).toBe(401);
  });

  it('reads at most a few uploads at once and refuses more with 429, so upload memory stays bounded', async () => {
    const headers = { ...envdHeaders(a), 'content-type': 'application/octet-stream' };
    const held: ReadableStreamDefaultController<Uint8Array>[] = [];
    const slow = () =>
      fetch(`${base}/files?path=slow.bin`, {
        method: 'POST',
        headers,
        body: new ReadableStream<Uint8Array>({ start: (c) => void (held.push(c), c.enqueue(new Uint8Array(1024))) }),
        duplex: 'half',
      });
    const pending = [slow(), slow(), slow(), slow()];
    await new Promise((r) => setTimeout(r, 300));
    const refused = await fetch(`${base}/files?path=one-more.bin`, { method: 'POST', headers, body: new Uint8Array(8) });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('1');
    for (const c of held) c.close();
    expect((await Promise.all(pending)).map((r) => r.status)).toEqual([200, 200, 200, 200]);
    expect((await fetch(`${base}/files?path=one-more.bin`, { method: 'POST', headers, body: new Uint8Array(8) })).status).toBe(200);
  });
});
