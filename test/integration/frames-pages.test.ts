import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { encodeGrant, GRANT_HEADER, MAX_HEADER_BYTES, MAX_PAGE_BYTES } from '@warren/protocol';
import { startTestAgent, type TestAgent } from '../support/fixtures.js';

/** Makes `count` empty files named `<prefix><n>` in `folder`, with the host's own tools (fast). */
function touchMany(folder: string, count: number, prefix: string): void {
  execFileSync('sh', ['-c', `cd "$1" && seq 1 ${count} | sed "s/^/$2/" | xargs touch`, 'sh', folder, prefix]);
}

/**
 * Answers that would not fit in a frame are paged, or refused with their request id at once; a
 * request too large for a frame is refused before it is sent. Over the real daemon.
 */
describe('frames and pages: every answer is delivered or refused with its id', () => {
  let agent: TestAgent;

  beforeAll(async () => {
    agent = await startTestAgent();
  });
  afterAll(async () => agent?.[Symbol.asyncDispose]());

  it('lists 100,000 entries with long names through the SDK, in pages that each fit in a frame', async () => {
    const folder = path.join(agent.root, 'many');
    await mkdir(folder);
    touchMany(folder, 100_000, 'n'.repeat(200));
    const first = (await agent.connection.call('fs.list', { path: 'many', maxEntries: 100_000 }, { timeoutMs: 60_000 })).result;
    expect(first.entries.length).toBeLessThan(100_000);
    expect(first.truncated).toBe(true);
    expect(first.nextCursor).toBe(String(first.entries.length));
    expect(Buffer.byteLength(JSON.stringify(first))).toBeLessThanOrEqual(MAX_PAGE_BYTES + 64 * 1024);

    const all = await agent.files.list('many', { limit: 100_000, timeoutMs: 60_000 });
    expect(all.entries).toHaveLength(100_000);
    expect(all.truncated).toBe(false);
    expect(all.nextCursor).toBeUndefined();
    const names = new Set(all.entries.map((e) => e.path));
    expect(names.size).toBe(100_000);
    for (const n of [1, 4242, 100_000]) expect(names.has(`${'n'.repeat(200)}${n}`)).toBe(true);
  }, 120_000);

  it('pages of a recursive listing put together are the listing in one answer', async () => {
    const tree = path.join(agent.root, 'tree');
    for (const sub of ['a', 'a/b', 'a/b/c', 'd', 'd/e']) await mkdir(path.join(tree, sub), { recursive: true });
    for (const sub of ['', 'a', 'a/b', 'a/b/c', 'd/e']) touchMany(path.join(tree, sub), 5, 'f');
    const whole = await agent.files.list('tree', { recursive: true, limit: 1000 });
    const paged: string[] = [];
    let cursor: string | undefined;
    do {
      const page = (await agent.connection.call('fs.list', { path: 'tree', recursive: true, maxEntries: 7, ...(cursor ? { cursor } : {}) })).result;
      expect(page.entries.length).toBeLessThanOrEqual(7);
      paged.push(...page.entries.map((e) => e.path));
      cursor = page.nextCursor;
    } while (cursor !== undefined);
    expect(paged).toEqual(whole.entries.map((e) => e.path));
    expect(paged).toHaveLength(5 * 5 + 5);
    // The SDK's limit still stops a listing short, saying where to go on.
    const some = await agent.files.list('tree', { recursive: true, limit: 10 });
    expect([some.entries.length, some.truncated, some.nextCursor]).toEqual([10, true, '10']);
    const rest = await agent.files.list('tree', { recursive: true, limit: 1000, cursor: some.nextCursor });
    expect([...some.entries, ...rest.entries].map((e) => e.path)).toEqual(paged);
    await expect(agent.connection.call('fs.list', { path: 'tree', cursor: 'not-a-cursor' })).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
  });

  it('an answer too large for a frame is refused with its id at once, not after a timeout, and the connection lives on', async () => {
    // 5,000 matches whose paths are about 4 KB each: a glob answer of about 20 MB, over the 16 MiB header cap.
    const deep = path.join(agent.root, 'deep', ...Array.from({ length: 14 }, (_, i) => `${i}`.padEnd(255, 'd')));
    await mkdir(deep, { recursive: true });
    touchMany(deep, 5_000, 'f'.repeat(240));
    const started = Date.now();
    await expect(agent.files.glob('deep', '**/*', { maxResults: 5_000, timeoutMs: 30_000 })).rejects.toMatchObject({
      code: 'FRAME_TOO_LARGE',
      details: { limit: MAX_HEADER_BYTES },
    });
    expect(Date.now() - started).toBeLessThan(5_000);
    expect((await agent.connection.call('system.info', {})).result.pid).toBe(process.pid);
    // A listing of the same tree is paged instead.
    const listed = await agent.files.list('deep', { recursive: true, maxDepth: 64, limit: 10_000 });
    expect([listed.entries.length, listed.truncated]).toEqual([5_000 + 14, false]);
  }, 60_000);

  it('a request too large for a frame is refused before it is sent, at once', async () => {
    const env = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`BIG_${i}`, 'x'.repeat(1024 * 1024)]));
    const started = Date.now();
    await expect(agent.commands.run('true', { env })).rejects.toMatchObject({ code: 'FRAME_TOO_LARGE' });
    expect(Date.now() - started).toBeLessThan(1_000);
    expect((await agent.commands.run('echo ok')).stdout).toBe('ok\n');
  });

  it('a long audit log answers in pages that fit in a frame, and reading on gets every entry', async () => {
    const audit = await agent.connect();
    try {
      const before = (await audit.call('audit.list', { limit: 1 })).result.lastSeq;
      // Moves of missing files with long non-ASCII names: about 3 KB of JSON per entry, 30 MB in all.
      const wide = '€'.repeat(500);
      for (let batch = 0; batch < 50; batch++) {
        await Promise.all(Array.from({ length: 200 }, (_, i) => agent.files.move(`m${batch}-${i}/${wide}`, `n${batch}-${i}/${wide}`).catch(() => undefined)));
      }
      const started = Date.now();
      const page = (await audit.call('audit.list', { since: before, limit: 10_000 }, { timeoutMs: 20_000 })).result;
      expect(Date.now() - started).toBeLessThan(5_000);
      expect(page.entries.length).toBeGreaterThan(1_000);
      expect(page.entries.length).toBeLessThan(10_000);
      expect(page.nextCursor).toBe(page.entries.at(-1)!.seq);
      let seen = page.entries.length;
      let since = page.nextCursor;
      while (since !== undefined) {
        const next = (await audit.call('audit.list', { since, limit: 10_000 })).result;
        expect(next.entries[0]?.seq).toBe(since + 1);
        seen += next.entries.length;
        since = next.nextCursor;
      }
      expect(seen).toBe(10_000);
    } finally {
      audit.close();
    }
  }, 60_000);

  it('the daemon refuses the audit log to a derived grant, whatever the controller did', async () => {
    const grant = (allowAudit?: boolean) => ({
      [GRANT_HEADER]: encodeGrant({ policy: { root: agent.root, readOnly: true }, allowExec: false, ...(allowAudit === undefined ? {} : { allowAudit }) }),
    });
    const derived = await agent.connect(grant());
    const own = await agent.connect(grant(true));
    try {
      await expect(derived.call('audit.list', {})).rejects.toMatchObject({ code: 'FORBIDDEN' });
      await expect(derived.call('process.exec', { cmd: 'true' })).rejects.toMatchObject({ code: 'FORBIDDEN' });
      expect((await own.call('audit.list', { limit: 1 })).result.entries).toHaveLength(1);
    } finally {
      derived.close();
      own.close();
    }
  });
});
