import { appendFileSync, mkdtempSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from '@jest/globals';
import { AuditTrail, type AuditRecord } from '../src/audit/trail.js';
import type { Clock } from '../src/clock.js';

const DAY_MS = 86_400_000;

function call(method: string, time: number, extra: Partial<AuditRecord> = {}): AuditRecord {
  return { time: new Date(time).toISOString(), method, paths: [], outcome: 'ok', bytesIn: 0, bytesOut: 0, durationMs: 1, ...extra };
}

function fixedClock(now: { value: number }): Clock {
  return { now: () => now.value, sleep: async () => undefined };
}

describe('AuditTrail', () => {
  const dirs: string[] = [];
  const tempDir = () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'warren-audit-'));
    dirs.push(dir);
    return path.join(dir, 'audit');
  };
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it('appends JSON lines per sandbox, owner-only (folder 0700, files 0600), and pages them as audit.list does', async () => {
    const dir = tempDir();
    const trail = await AuditTrail.open({ dir });
    for (let i = 0; i < 5; i++) trail.append('sb1', call('fs.read', Date.now(), { paths: [`f${i}`], callerKind: 'operator', keyId: 'k1', tenant: 'acme' }));
    trail.append('sb2', call('process.exec', Date.now(), { command: 'ls -la' }));
    const first = await trail.list('sb1', { limit: 2 });
    expect(first.entries.map((e) => e.seq)).toEqual([0, 1]);
    expect(first).toMatchObject({ dropped: false, lastSeq: 4, nextCursor: 1 });
    expect(first.entries[0]).toMatchObject({ paths: ['f0'], callerKind: 'operator', keyId: 'k1', tenant: 'acme' });
    const rest = await trail.list('sb1', { since: first.nextCursor, limit: 10 });
    expect(rest.entries.map((e) => e.seq)).toEqual([2, 3, 4]);
    expect(rest.nextCursor).toBeUndefined();
    expect((await trail.list('sb2', { limit: 10 })).entries[0]).toMatchObject({ seq: 0, command: 'ls -la' });
    expect(await trail.list('nobody', { limit: 10 })).toEqual({ entries: [], dropped: false, lastSeq: -1 });
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(path.join(dir, 'sb1.jsonl')).mode & 0o777).toBe(0o600);
    expect(readFileSync(path.join(dir, 'sb1.jsonl'), 'utf8').trim().split('\n')).toHaveLength(5);
    await trail.close();
  });

  it('writes within flushMs without being asked, so a controller killed later keeps what it had appended', async () => {
    const dir = tempDir();
    const trail = await AuditTrail.open({ dir, flushMs: 20 });
    trail.append('sb1', call('fs.write', Date.now()));
    await new Promise((resolve) => setTimeout(resolve, 200));
    // No flush, no close: what a SIGKILL leaves is what is in the file.
    expect(readFileSync(path.join(dir, 'sb1.jsonl'), 'utf8')).toContain('"method":"fs.write"');
    const reopened = await AuditTrail.open({ dir });
    expect((await reopened.list('sb1', { limit: 10 })).entries).toHaveLength(1);
  });

  it('after a crash tore the last line: the torn line is skipped, seq continues after the last whole entry, and the next append is not glued to it', async () => {
    const dir = tempDir();
    const before = await AuditTrail.open({ dir });
    before.append('sb1', call('fs.read', Date.now()));
    before.append('sb1', call('fs.read', Date.now()));
    await before.flush();
    appendFileSync(path.join(dir, 'sb1.jsonl'), '{"seq":2,"time":"2030-01-01T00:00:00.000Z","meth');
    const after = await AuditTrail.open({ dir });
    after.append('sb1', call('fs.stat', Date.now()));
    const page = await after.list('sb1', { limit: 10 });
    expect(page.entries.map((e) => [e.seq, e.method])).toEqual([
      [0, 'fs.read'],
      [1, 'fs.read'],
      [2, 'fs.stat'],
    ]);
    expect(page.lastSeq).toBe(2);
    const lines = readFileSync(path.join(dir, 'sb1.jsonl'), 'utf8').split('\n');
    expect(lines.at(-2)).toContain('"method":"fs.stat"');
  });

  it('keeps about maxBytesPerSandbox: the oldest half goes first and says so (dropped), seq never restarts', async () => {
    const dir = tempDir();
    const trail = await AuditTrail.open({ dir, maxBytesPerSandbox: 4096 });
    for (let i = 0; i < 100; i++) {
      trail.append('sb1', call('process.exec', Date.now(), { command: `echo ${'x'.repeat(100)} ${i}` }));
      if (i % 10 === 9) await trail.flush();
    }
    await trail.flush();
    const size = (file: string) => statSync(path.join(dir, file)).size;
    expect(size('sb1.jsonl') + size('sb1.1.jsonl')).toBeLessThanOrEqual(4096 + 2048);
    const page = await trail.list('sb1', { limit: 1000 });
    expect(page.lastSeq).toBe(99);
    expect(page.entries.at(-1)!.seq).toBe(99);
    expect(page.entries[0]!.seq).toBeGreaterThan(0);
    expect(page.dropped).toBe(true);
    // Consecutive: nothing between the oldest kept entry and the newest is missing.
    expect(page.entries.map((e) => e.seq)).toEqual(page.entries.map((_, i) => page.entries[0]!.seq + i));
    expect((await trail.list('sb1', { since: 98, limit: 10 })).dropped).toBe(false);
  });

  it('a page after any since is exact, in a large file and across its two segments (reading starts near since, not at the top), and one burst keeps the bound', async () => {
    const dir = tempDir();
    const trail = await AuditTrail.open({ dir, maxBytesPerSandbox: 2 * 1024 * 1024 });
    for (let i = 0; i < 6000; i++) trail.append('sb1', call('fs.read', Date.now(), { paths: [`file-${i}-${'p'.repeat(i % 300)}`] }));
    await trail.flush();
    // One burst, written at once, still stays within the bound.
    const sizes = ['sb1.1.jsonl', 'sb1.jsonl'].map((file) => statSync(path.join(dir, file)).size);
    expect(sizes[0]).toBeGreaterThan(0);
    expect(sizes[0]! + sizes[1]!).toBeLessThanOrEqual(2 * 1024 * 1024);
    const all = (await trail.list('sb1', { limit: 10_000 })).entries.map((e) => e.seq);
    const oldest = all[0]!;
    for (const since of [undefined, 0, oldest - 1, oldest, oldest + 1, 2500, 4000, 5998, 5999, 7000]) {
      const page = await trail.list('sb1', { since, limit: 3 });
      const expected = all.filter((seq) => seq > (since ?? -1)).slice(0, 3);
      expect([since, page.entries.map((e) => e.seq)]).toEqual([since, expected]);
    }
  });

  it('retention: a file last written before retentionDays goes whole, one that starts before then loses only its old entries, also for a sandbox that is gone', async () => {
    const dir = tempDir();
    // The files' own times are real ones, so the clock is the real time of the start of the test.
    const now = { value: Date.now() };
    const trail = await AuditTrail.open({ dir, retentionDays: 30, clock: fixedClock(now) });
    trail.append('gone', call('fs.read', now.value - 40 * DAY_MS));
    trail.append('live', call('fs.read', now.value - 40 * DAY_MS));
    trail.append('live', call('fs.write', now.value - DAY_MS));
    await trail.flush();
    const old = new Date(now.value - 40 * DAY_MS);
    utimesSync(path.join(dir, 'gone.jsonl'), old, old);
    expect(await trail.prune()).toEqual({ deleted: 1, rewritten: 1 });
    expect(await trail.list('gone', { limit: 10 })).toMatchObject({ entries: [] });
    const live = await trail.list('live', { limit: 10 });
    expect(live.entries.map((e) => [e.seq, e.method])).toEqual([[1, 'fs.write']]);
    expect(live.dropped).toBe(true);
    trail.append('live', call('fs.stat', now.value));
    expect((await trail.list('live', { since: 1, limit: 10 })).entries.map((e) => e.seq)).toEqual([2]);
  });

  it('exports every sandbox as lines with their sandbox id, filtered by sandbox, tenant and time', async () => {
    const dir = tempDir();
    const trail = await AuditTrail.open({ dir });
    const t = Date.UTC(2030, 0, 1);
    trail.append('a1', call('fs.read', t, { tenant: 'acme' }));
    trail.append('a1', call('fs.write', t + 1000, { tenant: 'acme' }));
    trail.append('b1', call('fs.read', t + 2000, { tenant: 'beta' }));
    const all = async (filter: Parameters<AuditTrail['export']>[0]) => {
      const out: string[] = [];
      for await (const line of trail.export(filter)) out.push(`${line.sandboxId}:${line.seq}`);
      return out;
    };
    expect(await all({})).toEqual(['a1:0', 'a1:1', 'b1:0']);
    expect(await all({ tenant: 'beta' })).toEqual(['b1:0']);
    expect(await all({ sandbox: 'a1', since: t + 500 })).toEqual(['a1:1']);
    expect(await all({ until: t + 1000 })).toEqual(['a1:0']);
    expect(await all({ sandbox: '../etc/passwd' })).toEqual([]);
  });

  it('never writes outside its folder: an id that is not a sandbox id is ignored', async () => {
    const dir = tempDir();
    const trail = await AuditTrail.open({ dir });
    trail.append('../escape', call('fs.read', Date.now()));
    await trail.flush();
    expect(() => statSync(path.join(dir, '..', 'escape.jsonl'))).toThrow();
    writeFileSync(path.join(dir, 'notes.txt'), 'foreign');
    const lines: unknown[] = [];
    for await (const line of trail.export()) lines.push(line);
    expect(lines).toEqual([]);
  });
});
