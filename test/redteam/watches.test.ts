import { readdir, readFile, readlink } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { MAX_PENDING_WATCH_EVENTS, MAX_WATCHES } from '@warren/protocol';
import { ResourceExhaustedError, Sandbox, type Watcher, type WatchEvent } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';
import { DaemonIdentity, sandboxCode } from '../support/redteam.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The sandbox's default share of the host's inotify watches (the daemon's `DEFAULT_SANDBOX_WATCHED_FOLDERS`). */
const SANDBOX_FOLDERS = 8192;

/** Makes `count` empty folders below `under` (100 per parent), as sandbox code. */
const makeFolders = (under: string, count: number) =>
  `python3 -c "import os
for i in range(${count}): os.makedirs('${under}/%d/%d' % (i // 100, i), exist_ok=True)" && echo made=1`;

/**
 * The daemon's inotify use as the host sees it: its process is found by its pid inside the
 * container (system.info) among the host's processes in the container's pid namespace, and its
 * descriptors read from the host's /proc. Counts inotify instances and the kernel watches in them.
 */
async function daemonInotify(containerId: string, daemonPid: number): Promise<{ instances: number; watches: number }> {
  const init = (await new Docker().getContainer(containerId).inspect()).State.Pid;
  const namespace = await readlink(`/proc/${init}/ns/pid`);
  let host: string | undefined;
  for (const pid of (await readdir('/proc')).filter((name) => /^\d+$/.test(name))) {
    try {
      if ((await readlink(`/proc/${pid}/ns/pid`)) !== namespace) continue;
      const nspid = /^NSpid:\s+(.*)$/m
        .exec(await readFile(`/proc/${pid}/status`, 'utf8'))?.[1]
        ?.trim()
        .split(/\s+/);
      if (nspid?.at(-1) === String(daemonPid)) host = pid;
    } catch {
      // a process that ended meanwhile
    }
  }
  if (host === undefined) throw new Error(`no host process for the daemon's pid ${daemonPid}`);
  let instances = 0;
  let watches = 0;
  for (const fd of await readdir(`/proc/${host}/fd`)) {
    try {
      if ((await readlink(`/proc/${host}/fd/${fd}`)) !== 'anon_inode:inotify') continue;
      instances++;
      watches += (await readFile(`/proc/${host}/fdinfo/${fd}`, 'utf8')).split('\n').filter((line) => line.startsWith('inotify wd:')).length;
    } catch {
      // a descriptor closed meanwhile
    }
  }
  return { instances, watches };
}

/**
 * Sandbox code and narrowed handles against folder watches (docs/security.md, "Watches"): a
 * process churning files in a watched folder must not hold the daemon, and what a watch cannot
 * keep up with is said (an `overflow`), never lost in silence; a read-only derived handle without
 * exec cannot take the watches its owner needs, in the daemon nor at the E2B gateway; and one
 * sandbox's watches hold at most its share of the inotify watches the host's root user shares
 * with every other root process (Docker included). On both daemon channels.
 */
describe.each(['socket', 'exec'] as const)('red team: folder watches (daemon channel: %s)', (daemonChannel) => {
  let warren: TestController;

  beforeAll(async () => {
    warren = await startTestController({ config: { daemonChannel } });
  }, 60_000);

  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
  });

  const create = () => Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });

  // Under gVisor /proc shows no inotify instance, so the watch thread reads it with its own loop and sends batches.
  it.each(['runc', 'runsc'] as const)(
    'sandbox code churning names in a watched folder of 10,000 files does not stall the daemon, and every dropped change is announced (%s)',
    async (runtime) => {
      if (!warren.controller.sandboxes.runtimes.includes(runtime)) {
        console.warn(`skipped: the ${runtime} runtime is not registered with this Docker engine`);
        return;
      }
      // The remap engine lists runsc (it reads the same daemon.json), but gVisor does not start under its user namespace here.
      if (runtime === 'runsc' && process.env.WARREN_TEST_ENGINE === 'userns-remap') {
        console.warn('skipped: gVisor does not start sandboxes on the user-namespace-remapped engine');
        return;
      }
      const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, runtime });
      try {
        const daemon = await DaemonIdentity.of(sandbox);
        await sandboxCode(
          sandbox,
          `mkdir -p /workspace/churn && cd /workspace/churn && python3 -c "[open('f%d' % i, 'w').close() for i in range(10000)]" && echo made=1`,
        );
        const fast: WatchEvent[] = [];
        const slow: WatchEvent[] = [];
        const watchers: Watcher[] = [
          await sandbox.files.watch('/workspace/churn', { coalesceMs: 50, onEvent: (e) => fast.push(e) }),
          // A window of 5 s: more names than a batch holds (4,096) change in it, so this one must drop and say so.
          await sandbox.files.watch('/workspace/churn', { coalesceMs: 5000, onEvent: (e) => slow.push(e) }),
        ];
        // Another client of the same sandbox, on a connection of its own.
        const other = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, apiKey: warren.apiKey });
        try {
          await other.daemonInfo();
          // Three processes make and remove files of new names as fast as they can, for 6 s each.
          const churn = Promise.all(
            [0, 1, 2].map((k) =>
              sandboxCode(
                sandbox,
                `cd /workspace/churn && python3 -c "
import os, time
end = time.time() + 6; i = 0
while time.time() < end:
    n = 'c${k}_%d' % i; open(n, 'w').close(); os.unlink(n); i += 1
print('made=%d' % i)"`,
              ),
            ),
          );
          const latencies: number[] = [];
          let churning = true;
          void churn.finally(() => (churning = false));
          while (churning) {
            const started = performance.now();
            await other.daemonInfo();
            latencies.push(performance.now() - started);
            await sleep(100);
          }
          const made = (await churn).reduce((sum, run) => sum + Number(run.facts.made), 0);
          // A stall, not a timing nuance: the daemon answered another connection in milliseconds
          // before; while a watch read the kernel in one go it took 11.8 s.
          expect(Math.max(...latencies)).toBeLessThan(2000);
          expect(latencies.length).toBeGreaterThan(10);

          // The watches go on after the storm: once the slow one's window has passed, a file made is reported.
          await sleep(6000);
          await sandboxCode(sandbox, 'touch /workspace/churn/marker && echo ok=1');
          const marked = (events: WatchEvent[]) => events.some((e) => 'path' in e && e.path.endsWith('/marker'));
          for (let i = 0; i < 150 && !(marked(fast) && marked(slow)); i++) await sleep(100);
          for (const events of [fast, slow]) {
            expect(marked(events)).toBe(true);
            // Every churned name was reported (as created or removed), or an overflow said changes were dropped.
            const seen = new Set(events.flatMap((e) => ('path' in e && /\/c\d_\d+$/.test(e.path) ? [e.path] : [])));
            if (seen.size < made) expect(events.some((e) => e.type === 'overflow')).toBe(true);
          }
          // More new names than a batch holds in one 5 s window: the slow watch cannot have kept them all.
          if (runtime === 'runc') expect(made).toBeGreaterThan(2 * MAX_PENDING_WATCH_EVENTS);
          if (made > 2 * MAX_PENDING_WATCH_EVENTS) expect(slow.some((e) => e.type === 'overflow')).toBe(true);
        } finally {
          other.close();
          for (const watcher of watchers) watcher.close();
        }
        await daemon.expectSame(sandbox);
      } finally {
        await sandbox.kill();
      }
    },
    120_000,
  );

  it("a read-only derived handle for one folder, without exec, cannot take its owner's watches, folders or E2B watchers", async () => {
    const sandbox = await create();
    try {
      await sandboxCode(sandbox, `${makeFolders('/workspace/pub/tree', 5000)} && ${makeFolders('/workspace/own', 3000)}`);
      const { token } = await sandbox.deriveToken({ allowRead: ['/workspace/pub'], readonly: true });
      const narrow = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token });
      const held: Watcher[] = [];
      try {
        // As many watches as it is given: half of the daemon's, then a typed refusal.
        let refusal: unknown;
        while (held.length <= MAX_WATCHES) {
          try {
            held.push(await narrow.files.watch('/workspace/pub', { recursive: false }));
          } catch (err) {
            refusal = err;
            break;
          }
        }
        expect(refusal).toBeInstanceOf(ResourceExhaustedError);
        expect(held.length).toBe(MAX_WATCHES / 2);
        // One of them again, recursive over 5,052 folders: it gets what is left of the derived half
        // of the folder budget, and says the rest was dropped.
        held.pop()!.close();
        const dropped: WatchEvent[] = [];
        let recursive: Watcher | undefined;
        for (let i = 0; i < 50 && !recursive; i++) {
          // The closed watch's slot comes back once the daemon has seen the cancel.
          recursive = await narrow.files.watch('/workspace/pub', { onEvent: (e) => dropped.push(e) }).catch(() => sleep(100).then(() => undefined));
        }
        held.push(recursive!);
        expect(recursive!.watchedFolders).toBeLessThanOrEqual(SANDBOX_FOLDERS / 2);
        for (let i = 0; i < 50 && !dropped.some((e) => e.type === 'overflow'); i++) await sleep(100);
        expect(dropped).toContainEqual(expect.objectContaining({ type: 'overflow', reason: 'watch-limit' }));

        // The owner still watches, recursively, every one of its 3,031 folders, and hears of a change.
        const seen: WatchEvent[] = [];
        await using mine = await sandbox.files.watch('/workspace/own', { coalesceMs: 20, onEvent: (e) => seen.push(e) });
        expect(mine.watchedFolders).toBe(3031);
        await sandboxCode(sandbox, 'touch /workspace/own/29/2999/owner-sees && echo ok=1');
        for (let i = 0; i < 100 && !seen.some((e) => 'path' in e && e.path.endsWith('owner-sees')); i++) await sleep(50);
        expect(seen).toContainEqual(expect.objectContaining({ type: 'create', path: expect.stringMatching(/owner-sees$/) }));
        expect(seen.filter((e) => e.type === 'overflow')).toEqual([]);

        // The E2B gateway's polling watchers split the same way: the derived token gets half.
        const createWatcher = (accessToken: string, path: string) =>
          fetch(`${warren.url}/e2b/filesystem.Filesystem/CreateWatcher`, {
            method: 'POST',
            headers: { 'e2b-sandbox-id': sandbox.id, 'x-access-token': accessToken, 'content-type': 'application/json', 'connect-protocol-version': '1' },
            body: JSON.stringify({ path, recursive: false }),
          });
        for (const watcher of held.splice(0)) watcher.close(); // the daemon's derived share back, so the gateway's own cap is what refuses
        await sleep(200);
        const statuses: number[] = [];
        for (let i = 0; i < 16; i++) statuses.push((await createWatcher(token, '/workspace/pub')).status);
        expect(statuses.filter((s) => s === 200).length).toBe(8);
        const refused = await createWatcher(token, '/workspace/pub');
        expect(await refused.json()).toMatchObject({ code: 'resource_exhausted' });
        expect((await createWatcher(sandbox.token, '/workspace/own')).status).toBe(200);
      } finally {
        for (const watcher of held) watcher.close();
        narrow.close();
      }
    } finally {
      await sandbox.kill();
    }
  }, 180_000);

  it("one sandbox's watches hold at most its share of the host's inotify watches, in one inotify instance", async () => {
    const sandbox = await create();
    try {
      await sandboxCode(
        sandbox,
        `${makeFolders('/workspace/big/a', 4000)} && ${makeFolders('/workspace/big/b', 4000)} && ${makeFolders('/workspace/big/c', 4000)}`,
      );
      const { pid } = await sandbox.daemonInfo();
      const containerId = warren.controller.sandboxes.record(sandbox.id).containerId;
      const before = await daemonInotify(containerId, pid);
      const overflows: WatchEvent[] = [];
      const watchers: Watcher[] = [];
      try {
        let folders = 0;
        for (const tree of ['a', 'b', 'c']) {
          const watcher = await sandbox.files.watch(`/workspace/big/${tree}`, { onEvent: (e) => e.type === 'overflow' && overflows.push(e) });
          watchers.push(watcher);
          folders += watcher.watchedFolders;
        }
        // 12,123 folders asked for; the sandbox's share is what it gets, and the rest is reported dropped.
        expect(folders).toBeLessThanOrEqual(SANDBOX_FOLDERS);
        for (let i = 0; i < 50 && overflows.length === 0; i++) await sleep(100);
        expect(overflows).toContainEqual(expect.objectContaining({ type: 'overflow', reason: 'watch-limit' }));
        const during = await daemonInotify(containerId, pid);
        expect(during.watches).toBeGreaterThan(SANDBOX_FOLDERS / 2);
        expect(during.watches).toBeLessThanOrEqual(SANDBOX_FOLDERS);
        expect(during.instances).toBe(1);
      } finally {
        for (const watcher of watchers) watcher.close();
      }
      // Closed watches give their kernel watches back.
      let after = await daemonInotify(containerId, pid);
      for (let i = 0; i < 50 && after.watches > before.watches; i++) {
        await sleep(100);
        after = await daemonInotify(containerId, pid);
      }
      expect(after.watches).toBeLessThanOrEqual(before.watches);
    } finally {
      await sandbox.kill();
    }
  }, 180_000);
});
