import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { encodeFrame } from '@warren/protocol';
import { Sandbox } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';
import { RawClient } from '../support/reliability.js';

describe('one authorization model for every door, and answers that always reach their caller', () => {
  let warren: TestController;
  let sandbox: Sandbox;

  beforeAll(async () => {
    warren = await startTestController();
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    await sandbox.commands.run(['sh', '-c', 'mkdir -p /workspace/src /workspace/private && echo x > /workspace/src/a.txt']);
    await sandbox.commands.run('echo top secret command line');
  }, 60_000);
  afterAll(async () => {
    await sandbox?.kill().catch(() => undefined);
    await warren?.[Symbol.asyncDispose]();
  });

  it('a derived handle cannot read the audit log over the WebSocket, as over REST; the sandbox token can, in pages', async () => {
    const { token } = await sandbox.deriveToken({ allowRead: ['/workspace/src'], readonly: true });
    const derived = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token });
    await expect(derived.auditLog()).rejects.toMatchObject({ code: 'FORBIDDEN', message: expect.stringContaining('derived') });
    const rest = await fetch(`${warren.url}/v1/sandboxes/${sandbox.id}/audit`, { headers: { authorization: `Bearer ${token}` } });
    expect(rest.status).toBe(403);
    derived.close();

    for (let i = 0; i < 30; i++) await sandbox.files.stat('src/a.txt');
    const first = await sandbox.auditLog({ limit: 10 });
    expect(first.entries).toHaveLength(10);
    expect(first.nextCursor).toBe(first.entries.at(-1)!.seq);
    const second = await sandbox.auditLog({ since: first.nextCursor, limit: 10 });
    expect(second.entries[0]!.seq).toBe(first.entries.at(-1)!.seq + 1);
    let count = 0;
    for await (const entry of sandbox.auditEntries()) expect(entry.seq).toBe(count++);
    expect(count).toBeGreaterThan(30);
    await expect(sandbox.auditLog({ limit: 100_000 })).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
  });

  it('a listing of 100,000 entries with long names answers in pages; an answer too large for a frame is refused with its id at once', async () => {
    // A disk with inodes for 200,000 files (the default 1 GiB one has 131,072).
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, diskMb: 4096 });
    await sandbox.commands.run(['sh', '-c', `mkdir -p /workspace/long && cd /workspace/long && seq 1 100000 | sed 's/^/${'n'.repeat(200)}/' | xargs touch`], {
      timeoutMs: 120_000,
    });
    const { entries, truncated } = await sandbox.files.list('long', { limit: 100_000, timeoutMs: 60_000 });
    expect([entries.length, new Set(entries.map((e) => e.path)).size, truncated]).toEqual([100_000, 100_000, false]);
    // A glob answer of about 20 MB (5,000 paths of about 4 KB) is over the header cap, and globs are not paged.
    const deep = `/workspace/deep/${Array.from({ length: 14 }, (_, i) => `${i}`.padEnd(255, 'd')).join('/')}`;
    await sandbox.commands.run(['sh', '-c', `mkdir -p "$1" && cd "$1" && seq 1 5000 | sed 's/^/${'f'.repeat(240)}/' | xargs touch`, 'sh', deep], {
      timeoutMs: 60_000,
    });
    const started = Date.now();
    await expect(sandbox.files.glob('deep', '**/*', { maxResults: 5_000, timeoutMs: 60_000 })).rejects.toMatchObject({ code: 'FRAME_TOO_LARGE' });
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('a request with a header over the cap is refused with its id, and the connection lives on', async () => {
    const raw = await RawClient.open(warren.url, sandbox.id, warren.apiKey);
    const header = Buffer.from(
      JSON.stringify({ type: 'req', id: 77, method: 'process.exec', params: { cmd: 'true', env: { BIG: 'x'.repeat(17 * 1024 * 1024) } } }),
    );
    const prefix = Buffer.alloc(4);
    prefix.writeUInt32BE(header.length);
    raw.send(Buffer.concat([prefix, header]));
    const answer = await raw.next((f) => f.header.type === 'err');
    expect(answer.header).toMatchObject({ type: 'err', id: 77, error: { code: 'FRAME_TOO_LARGE' } });
    raw.send(encodeFrame({ type: 'req', id: 78, method: 'system.info', params: {} }));
    expect((await raw.next((f) => f.header.type === 'res')).header).toMatchObject({ id: 78 });
    raw.ws.close();
  });

  it('unknown REST paths, prototype names included, answer 404; a wrong HTTP method 405', async () => {
    const auth = { authorization: `Bearer ${warren.apiKey}` };
    for (const name of ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf', 'isPrototypeOf', 'nope']) {
      for (const method of ['GET', 'POST', 'DELETE']) {
        const res = await fetch(`${warren.url}/v1/sandboxes/${sandbox.id}/${name}`, { method, headers: auth });
        expect([name, method, res.status]).toEqual([name, method, 404]);
      }
    }
    const wrong = await fetch(`${warren.url}/v1/sandboxes/${sandbox.id}/keepalive`, { method: 'GET', headers: auth });
    expect(wrong.status).toBe(405);
    expect(((await wrong.json()) as { error: { code: string } }).error.code).toBe('METHOD_NOT_ALLOWED');
  });
});
