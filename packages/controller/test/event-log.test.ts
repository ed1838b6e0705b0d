import { mkdtemp, readFile, rm, stat, writeFile, appendFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { EVENTS_FILE, EventLog } from '../src/events/event-log.js';
import { LifecycleHook } from '../src/events/lifecycle.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'warren-events-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const clock = { now: () => Date.parse('2026-12-07T12:00:00Z'), sleep: async () => undefined };

describe('EventLog', () => {
  it('gives each event the next id, and a cursor reads only what came after it', async () => {
    const log = await EventLog.open({ retain: 100, clock });
    log.append({ type: 'created', tenant: 'a', sandboxId: 's1' });
    log.append({ type: 'ready', tenant: 'a', sandboxId: 's1' });
    log.append({ type: 'killed', tenant: 'a', sandboxId: 's1' });
    expect(log.read({}, 10).events.map((e) => [e.id, e.type])).toEqual([
      [1, 'created'],
      [2, 'ready'],
      [3, 'killed'],
    ]);
    const first = log.read({ after: 0 }, 2);
    expect(first.next).toBe(2);
    expect(log.read({ after: first.next }, 2)).toEqual({
      events: [expect.objectContaining({ id: 3, type: 'killed', time: '2026-12-07T12:00:00.000Z' })],
      next: 3,
    });
    // Nothing new: the cursor stays where it was.
    expect(log.read({ after: 3 }, 2)).toEqual({ events: [], next: 3 });
  });

  it("filters by tenant and type, and a tenant's cursor never names another tenant's later events", async () => {
    const log = await EventLog.open({ retain: 100, clock });
    log.append({ type: 'created', tenant: 'a', sandboxId: 's1' });
    log.append({ type: 'created', tenant: 'b', sandboxId: 's2' });
    log.append({ type: 'killed', tenant: 'a', sandboxId: 's1' });
    log.append({ type: 'killed', tenant: 'b', sandboxId: 's2' });
    expect(log.read({ tenant: 'a' }, 10).events.map((e) => e.sandboxId)).toEqual(['s1', 's1']);
    expect(log.read({ tenant: 'a' }, 10).next).toBe(3);
    expect(log.read({ tenant: 'b', types: new Set(['killed']) }, 10).events.map((e) => e.id)).toEqual([4]);
    expect(log.read({ tenant: 'c' }, 10)).toEqual({ events: [], next: 0 });
  });

  it('keeps the newest `retain` events; a cursor older than the oldest kept reads from the oldest', async () => {
    const log = await EventLog.open({ retain: 3, clock });
    for (let i = 0; i < 5; i++) log.append({ type: 'created', tenant: 'a', sandboxId: `s${i}` });
    expect(log.read({ after: 1 }, 10).events.map((e) => e.id)).toEqual([3, 4, 5]);
    expect(log.lastId).toBe(5);
  });

  it('survives a restart: the events and the next id come back from the file, a torn last line is skipped', async () => {
    const first = await EventLog.open({ dir, retain: 100, clock });
    first.append({ type: 'created', tenant: 'a', sandboxId: 's1' });
    first.append({ type: 'paused', tenant: 'a', sandboxId: 's1', details: { why: 'test' } });
    await first.flush();
    expect((await stat(path.join(dir, EVENTS_FILE))).mode & 0o777).toBe(0o600);
    // A crash in the middle of a write leaves half a line.
    await appendFile(path.join(dir, EVENTS_FILE), '{"id":3,"ti');
    const second = await EventLog.open({ dir, retain: 100, clock });
    expect(second.read({}, 10).events.map((e) => [e.id, e.type, e.details])).toEqual([
      [1, 'created', undefined],
      [2, 'paused', { why: 'test' }],
    ]);
    expect(second.append({ type: 'resumed', tenant: 'a', sandboxId: 's1' }).id).toBe(3);
  });

  it('rewrites its file to the kept events once it holds twice as many, so the file stays bounded', async () => {
    const log = await EventLog.open({ dir, retain: 4, clock });
    for (let i = 0; i < 9; i++) log.append({ type: 'created', tenant: 'a', sandboxId: `s${i}` });
    await log.flush();
    const lines = (await readFile(path.join(dir, EVENTS_FILE), 'utf8')).trim().split('\n');
    expect(lines.length).toBeLessThanOrEqual(8);
    const reopened = await EventLog.open({ dir, retain: 4, clock });
    expect(reopened.read({}, 10).events.map((e) => e.id)).toEqual([6, 7, 8, 9]);
    expect(reopened.append({ type: 'killed', tenant: 'a', sandboxId: 's9' }).id).toBe(10);
  });

  it('ignores lines that are not events (a file edited by hand)', async () => {
    await writeFile(path.join(dir, EVENTS_FILE), 'not json\n{"id":1,"time":"t","type":"nope","tenant":"a","sandboxId":"s"}\n');
    const log = await EventLog.open({ dir, retain: 10, clock });
    expect(log.read({}, 10).events).toEqual([]);
  });

  it('wakes a long poll when a matching event arrives, not for another tenant, and gives up at its timeout', async () => {
    const log = await EventLog.open({ retain: 10, clock });
    const waiting = log.waitFor({ after: 0, tenant: 'a' }, 5000);
    log.append({ type: 'created', tenant: 'b', sandboxId: 's2' });
    log.append({ type: 'created', tenant: 'a', sandboxId: 's1' });
    await expect(waiting).resolves.toBe(true);
    await expect(log.waitFor({ after: 2, tenant: 'a' }, 20)).resolves.toBe(false);
    const gone = new AbortController();
    const aborted = log.waitFor({ after: 2 }, 5000, gone.signal);
    gone.abort();
    await expect(aborted).resolves.toBe(false);
  });
});

describe('LifecycleHook', () => {
  it("reports a record's id and tenant, and a listener that throws does not stop the others", () => {
    const hook = new LifecycleHook();
    const heard: unknown[] = [];
    hook.subscribe(() => {
      throw new Error('broken listener');
    });
    hook.subscribe((report) => heard.push(report));
    hook.report({ id: 's1', tenant: 'acme' }, 'snapshotted', { snapshotId: 'snap1' });
    expect(heard).toEqual([{ type: 'snapshotted', tenant: 'acme', sandboxId: 's1', details: { snapshotId: 'snap1' } }]);
  });
});
