// The Docker engine restarted under a running controller: the controller notices, answers /readyz
// 503 until its sandboxes are back, starts them again with their files, replaces the warm pool's
// stopped members, and SDK clients carry on by themselves.
//
// This tier restarts the engine, so it runs alone, after the others (scripts/test), and only on an
// engine that Warren's own scripts started (scripts/lib/common.sh marks it); it never restarts
// an engine the machine's owner runs.
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { createLogger } from '@warren/controller';
import { Sandbox, Snapshots, Volumes } from '@warren/sdk';
import { reasonNotToRestartEngine, startEngine as startEngineIn, stopEngine } from '../support/engine.js';
import { startTestController, type TestController } from '../support/fixtures.js';
import { until } from '../support/reliability.js';

const repo = path.resolve(import.meta.dirname, '..', '..');
const startEngine = () => startEngineIn(repo);

const skipReason = await reasonNotToRestartEngine();
if (skipReason) process.stderr.write(`engine restart tests skipped: ${skipReason}.\n`);
const ours = skipReason === undefined;

async function readyz(url: string): Promise<number> {
  return (await fetch(`${url}/readyz`).catch(() => undefined))?.status ?? 0;
}

(ours ? describe : describe.skip)('the Docker engine restarts under a running controller', () => {
  let warren: TestController;
  const events: ({ msg: string } & Record<string, unknown>)[] = [];
  let sandboxes: Sandbox[] = [];

  beforeAll(async () => {
    warren = await startTestController({
      config: { poolSize: 1 },
      logger: createLogger({ destination: { write: (line) => void events.push(JSON.parse(line) as (typeof events)[number]) } }),
    });
    sandboxes = await Promise.all(
      ['warren/sandbox:latest', 'warren/test-busybox:latest'].map((image) => Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, image })),
    );
    await until('the warm pool to fill', async () => (warren.controller.pool?.readyCount === 1 ? true : undefined), 60_000);
  });

  afterAll(async () => {
    // Whatever happened above, leave an engine running for whoever comes next.
    await startEngine().catch(() => undefined);
    for (const sandbox of sandboxes) await sandbox.kill().catch(() => undefined);
    await warren?.[Symbol.asyncDispose]();
  });

  it('answers 503 while the engine is away, then restarts each sandbox with its files', async () => {
    for (const [i, sandbox] of sandboxes.entries()) {
      await sandbox.files.write('kept.txt', `written before the restart ${i}`);
      await sandbox.commands.start('sleep 1000');
    }

    await stopEngine();
    expect(await readyz(warren.url)).toBe(503);
    // A call made while the engine is down waits for the sandbox to come back (the SDK reconnects
    // and repeats reads), instead of failing with "the sandbox ended".
    const pending = sandboxes.map((sandbox) => sandbox.files.read('kept.txt', { timeoutMs: 110_000 }));
    await startEngine();

    expect(await Promise.all(pending)).toEqual(['written before the restart 0', 'written before the restart 1']);
    await until('/readyz to answer 200', async () => ((await readyz(warren.url)) === 200 ? true : undefined), 60_000);
    for (const sandbox of sandboxes) {
      expect((await sandbox.info()).state).toBe('running');
      expect((await sandbox.commands.run(['echo', 'after'])).stdout).toBe('after\n');
      // Processes do not survive a container restart; the README says so.
      expect((await sandbox.commands.list()).filter((p) => p.running)).toEqual([]);
    }
    expect(events.map((e) => e.msg)).toEqual(expect.arrayContaining(['docker.lost', 'docker.back', 'sandboxes.restarted']));
    expect(events.find((e) => e.msg === 'sandboxes.restarted')).toMatchObject({ restarted: 2, failed: [] });
  });

  it('replaces the warm pool members that stopped with the engine, and creates work again', async () => {
    await until('the warm pool to refill', async () => (warren.controller.pool?.readyCount === 1 ? true : undefined), 60_000);
    const fresh = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    sandboxes.push(fresh);
    expect((await fresh.commands.run(['echo', 'pooled'])).stdout).toBe('pooled\n');
  });

  it('keeps a hibernated sandbox hibernated, and snapshots and volumes whole, across an engine restart', async () => {
    const options = { baseUrl: warren.url, apiKey: warren.apiKey };
    const volumes = new Volumes(options);
    const snapshots = new Snapshots(options);
    await volumes.create({ name: 'engine-restart-vol' });
    const sleeper = await Sandbox.create({ ...options, volumes: [{ name: 'engine-restart-vol', path: '/data' }] });
    sandboxes.push(sleeper);
    await sleeper.files.write('kept.txt', 'hibernated');
    await sleeper.commands.run(['sh', '-c', 'echo vol > /data/v']);
    const snap = await sleeper.snapshot({ name: 'engine-restart' });
    await sleeper.hibernate();

    await stopEngine();
    await startEngine();
    await until('/readyz to answer 200', async () => ((await readyz(warren.url)) === 200 ? true : undefined), 60_000);

    // Not started again with the others: it stays hibernated until a call wakes it, with its files.
    expect((await sleeper.info()).state).toBe('hibernated');
    expect(await sleeper.files.read('kept.txt', { timeoutMs: 60_000 })).toBe('hibernated');
    expect((await sleeper.info()).state).toBe('running');
    expect((await sleeper.commands.run(['cat', '/data/v'])).stdout).toBe('vol\n');
    expect((await snapshots.get('engine-restart')).id).toBe(snap.id);
    const child = await Sandbox.create({ ...options, snapshot: snap.id });
    sandboxes.push(child);
    expect(await child.files.read('kept.txt')).toBe('hibernated');
    await Promise.all([sleeper.kill(), child.kill()]);
    await snapshots.delete(snap.id);
    await volumes.delete('engine-restart-vol');
  });
});
