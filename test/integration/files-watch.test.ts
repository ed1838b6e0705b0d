import { closeSync, mkdirSync, openSync, readFileSync, writeFileSync, writeSync } from 'node:fs';
import { mkdir, mkdtemp, rename, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { inotifyCounts, watchCounts } from '@warren/agent';
import { encodeGrant, MAX_PENDING_WATCH_EVENTS, MAX_WATCHES, narrowPolicy } from '@warren/protocol';
import { Files, NotADirectoryError, PathNotInSandboxError, ResourceExhaustedError, type Watcher, type WatchEvent } from '@warren/sdk';
import { startTestAgent } from '../support/fixtures.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Collects a watcher's events until `done` says enough or the time runs out. */
async function collect(watcher: Watcher, done: (events: WatchEvent[]) => boolean, timeoutMs = 5000): Promise<WatchEvent[]> {
  const events: WatchEvent[] = [];
  const iterator = watcher[Symbol.asyncIterator]();
  const deadline = Date.now() + timeoutMs;
  while (!done(events) && Date.now() < deadline) {
    const next = await Promise.race([iterator.next(), sleep(deadline - Date.now()).then(() => undefined)]);
    if (!next || next.done) break;
    events.push(next.value);
  }
  return events;
}

/** Waits for the daemon to have ended every watch (a close reaches it a moment after the client hears of it), then checks nothing is left. */
async function settled(): Promise<void> {
  for (let i = 0; i < 100 && watchCounts().watches > 0; i++) await sleep(20);
  expect(watchCounts()).toEqual({ watches: 0, folders: 0 });
  expect(inotifyCounts().handles).toBe(0);
}

const paths = (events: WatchEvent[]) => events.flatMap((e) => ('path' in e ? [`${e.type} ${e.path}`] : [`overflow ${e.reason}`]));

describe('fs.watch over a real socket to an in-process agent', () => {
  it('reports create, coalesced writes, remove and folders made after the watch was armed', async () => {
    await using agent = await startTestAgent();
    await mkdir(path.join(agent.root, 'src'));
    await using watcher = await agent.files.watch('src', { coalesceMs: 100 });
    expect(watcher).toMatchObject({ path: 'src', watchedFolders: 1 });
    await writeFile(path.join(agent.root, 'src/a.txt'), 'one');
    for (let i = 0; i < 20; i++) await writeFile(path.join(agent.root, 'src/a.txt'), `write ${i}`);
    await mkdir(path.join(agent.root, 'src/new'));
    await writeFile(path.join(agent.root, 'src/new/b.txt'), 'b');
    let events = await collect(watcher, (seen) => paths(seen).includes('create src/new/b.txt'));
    expect(paths(events)).toEqual(expect.arrayContaining(['create src/a.txt', 'create src/new', 'create src/new/b.txt']));
    // Twenty writes to one file inside the window are one event, not twenty.
    expect(events.filter((e) => 'path' in e && e.path === 'src/a.txt').length).toBeLessThanOrEqual(2);
    await rm(path.join(agent.root, 'src/new'), { recursive: true });
    events = await collect(watcher, (seen) => paths(seen).includes('remove src/new'));
    expect(paths(events)).toContain('remove src/new');
    watcher.close();
    expect(await watcher.done()).toBe('closed');
    await settled();
  });

  it('ends with "removed" when the watched folder itself goes, and refuses a file or a path outside', async () => {
    await using agent = await startTestAgent();
    await mkdir(path.join(agent.root, 'gone'));
    await writeFile(path.join(agent.root, 'f.txt'), 'x');
    const watcher = await agent.files.watch('gone');
    await rm(path.join(agent.root, 'gone'), { recursive: true });
    expect(await watcher.done()).toBe('removed');
    await expect(agent.files.watch('f.txt')).rejects.toBeInstanceOf(NotADirectoryError);
    await expect(agent.files.watch('/etc')).rejects.toBeInstanceOf(PathNotInSandboxError);
    await settled();
  });

  it('an npm-install-sized burst: reports an overflow instead of growing, and leaks no kernel watch', async () => {
    await using agent = await startTestAgent();
    await mkdir(path.join(agent.root, 'node_modules'));
    const watcher = await agent.files.watch('.', { coalesceMs: 1500 });
    // 150 packages of 60 files each: 9,000 creates plus 150 folders in one coalescing window.
    // Written synchronously, as fast as the disk takes them: the daemon (in this process) reads them all at once.
    for (let p = 0; p < 150; p++) {
      const dir = path.join(agent.root, 'node_modules', `pkg-${p}`);
      mkdirSync(dir);
      for (let f = 0; f < 60; f++) writeFileSync(path.join(dir, `f${f}.js`), 'x');
    }
    const events = await collect(watcher, (seen) => seen.some((e) => e.type === 'overflow'), 15_000);
    const overflow = events.find((e) => e.type === 'overflow');
    expect(overflow).toMatchObject({ type: 'overflow', reason: 'queue' });
    expect((overflow as { dropped: number }).dropped).toBeGreaterThan(0);
    expect(events.length).toBeLessThanOrEqual(MAX_PENDING_WATCH_EVENTS + 1);
    watcher.close();
    await watcher.done();
    await settled();
  }, 60_000);

  it('a narrowed handle never hears of paths outside its allow-list, through a link or a moved folder', async () => {
    await using agent = await startTestAgent();
    const outside = await mkdtemp(path.join(os.tmpdir(), 'warren-outside-'));
    try {
      await mkdir(path.join(agent.root, 'src/sub'), { recursive: true });
      await mkdir(path.join(agent.root, 'secret'));
      await symlink(path.join(agent.root, 'secret'), path.join(agent.root, 'src/to-secret'));
      await symlink(outside, path.join(agent.root, 'src/to-host'));
      const child = narrowPolicy({ root: agent.root, readOnly: false }, { allowRead: 'src' });
      const connection = await agent.connect({ 'x-warren-policy': encodeGrant({ policy: child, allowExec: false }) });
      const files = new Files(() => connection);
      await expect(files.watch('secret')).rejects.toBeInstanceOf(PathNotInSandboxError);
      await using watcher = await files.watch('src', { coalesceMs: 20 });
      // Writes behind links, into a folder moved out of the allowed tree, and a folder swapped for a link.
      await writeFile(path.join(agent.root, 'secret/key.txt'), 'k');
      await writeFile(path.join(outside, 'host.txt'), 'h');
      await rename(path.join(agent.root, 'src/sub'), path.join(agent.root, 'secret/sub'));
      await writeFile(path.join(agent.root, 'secret/sub/moved-out.txt'), 'm');
      await mkdir(path.join(agent.root, 'src/swap'));
      await sleep(100);
      await rm(path.join(agent.root, 'src/swap'), { recursive: true });
      await symlink(outside, path.join(agent.root, 'src/swap'));
      await writeFile(path.join(outside, 'after-swap.txt'), 's');
      await writeFile(path.join(agent.root, 'src/marker.txt'), 'done');
      const events = await collect(watcher, (seen) => paths(seen).includes('create src/marker.txt'));
      const seen = paths(events);
      expect(seen).toContain('create src/marker.txt');
      expect(seen.filter((p) => /key|host\.txt|moved-out|after-swap/.test(p))).toEqual([]);
      expect(seen).toContain('remove src/sub');
      connection.close();
    } finally {
      await rm(outside, { recursive: true, force: true });
    }
  });

  it("a burst past the kernel's own queue is reported as an overflow (reason kernel), never lost in silence", async () => {
    await using agent = await startTestAgent();
    await mkdir(path.join(agent.root, 'hot'));
    const events: WatchEvent[] = [];
    await using watcher = await agent.files.watch('hot', { coalesceMs: 20, onEvent: (e) => events.push(e) });
    expect(watcher.watchedFolders).toBe(1);
    // The daemon runs in this process: while this loop holds the thread nothing reads the kernel's
    // queue, and writes to 100 files in turn (no two events alike in a row, so the kernel merges
    // none) pass what it queues. Then 20 new files, whose events the kernel can only drop.
    const queued = Number(readFileSync('/proc/sys/fs/inotify/max_queued_events', 'utf8'));
    const fds = Array.from({ length: 100 }, (_, i) => openSync(path.join(agent.root, `hot/w${i}`), 'w'));
    for (let i = 0; i < queued + 4000; i++) writeSync(fds[i % 100]!, 'x');
    for (let i = 0; i < 20; i++) writeFileSync(path.join(agent.root, `hot/late-${i}`), 'l');
    for (const fd of fds) closeSync(fd);
    for (let i = 0; i < 100 && !events.some((e) => e.type === 'overflow'); i++) await sleep(50);
    // Fewer than 4,096 paths changed: the watch's own queue never filled, only the kernel's did.
    expect(events).toContainEqual({ type: 'overflow', reason: 'kernel', dropped: expect.any(Number) });
    // The watch goes on.
    await writeFile(path.join(agent.root, 'hot/after.txt'), 'a');
    for (let i = 0; i < 100 && !paths(events).includes('create hot/after.txt'); i++) await sleep(50);
    expect(paths(events)).toContain('create hot/after.txt');
  });

  it(`gives derived handles half of the ${MAX_WATCHES} watches together, so the owner always has its own`, async () => {
    await using agent = await startTestAgent();
    await mkdir(path.join(agent.root, 'pub'));
    const child = narrowPolicy({ root: agent.root, readOnly: false }, { allowRead: 'pub' });
    // Two derived handles (a grant without the audit log), on connections of their own.
    const grants = [encodeGrant({ policy: child, allowExec: false }), encodeGrant({ policy: { ...child, readOnly: true }, allowExec: false })];
    const connections = await Promise.all(grants.map((grant) => agent.connect({ 'x-warren-policy': grant })));
    const narrow = connections.map((connection) => new Files(() => connection));
    const held: Watcher[] = [];
    for (let i = 0; i < MAX_WATCHES / 2; i++) held.push(await narrow[i % 2]!.watch('pub', { recursive: false }));
    for (const files of narrow)
      await expect(files.watch('pub')).rejects.toMatchObject({ code: 'RESOURCE_EXHAUSTED', message: expect.stringMatching(/Derived handles may run 32/) });
    // The owner's half is untouched.
    for (let i = 0; i < MAX_WATCHES / 2; i++) held.push(await agent.files.watch('.', { recursive: false }));
    await expect(agent.files.watch('.')).rejects.toBeInstanceOf(ResourceExhaustedError);
    for (const connection of connections) connection.close();
    agent.connection.close();
    await Promise.all(held.map((w) => w.done().catch(() => undefined)));
    await settled();
  });

  it(`refuses watch number ${MAX_WATCHES + 1} with a typed error, and cancelling frees them all`, async () => {
    await using agent = await startTestAgent();
    const watchers = await Promise.all(Array.from({ length: MAX_WATCHES }, () => agent.files.watch('.', { recursive: false })));
    await expect(agent.files.watch('.')).rejects.toBeInstanceOf(ResourceExhaustedError);
    agent.connection.close(); // a closed connection ends every watch on it
    await Promise.all(watchers.map((w) => w.done().catch(() => undefined)));
    await settled();
  });
});
