import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { Sandbox } from '@warren/sdk';
import { startTestController } from '../support/fixtures.js';
import { ControllerProcess, freePort } from '../support/reliability.js';
import { until } from '../support/wait.js';
import { removeStateDir } from '../support/state-dir.js';

const docker = new Docker();

const containerGone = async (id: string) =>
  docker
    .getContainer(id)
    .inspect()
    .then(
      () => undefined,
      () => true as const,
    );

describe('a controller restart loses nothing', () => {
  const stateDirs: string[] = [];
  const processes: ControllerProcess[] = [];
  const containers: string[] = [];

  afterAll(async () => {
    for (const p of processes) await p.stop('SIGKILL');
    for (const id of containers)
      await docker
        .getContainer(id)
        .remove({ force: true, v: true })
        .catch(() => undefined);
    for (const dir of stateDirs) await removeStateDir(dir);
  });

  const newStateDir = async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'warren-restart-'));
    stateDirs.push(dir);
    return dir;
  };
  const startProcess = async (env: Record<string, string>) => {
    const p = await ControllerProcess.start(env);
    processes.push(p);
    return p;
  };
  /** The container of a sandbox, remembered so afterAll removes it whatever happens. */
  const containerOf = async (id: string) => {
    const found = await docker.listContainers({ all: true, filters: { label: [`warren.sandbox=${id}`] } });
    expect(found).toHaveLength(1);
    containers.push(found[0]!.Id);
    return found[0]!.Id;
  };

  it('after SIGKILL: same sandboxes, files intact, background process still running, expired ones reaped; a clean stop leaves sandboxes running', async () => {
    const apiKey = `wk_test_${randomBytes(16).toString('hex')}`;
    const env = { WARREN_STATE_DIR: await newStateDir(), WARREN_API_KEY: apiKey, WARREN_PORT: String(await freePort()), WARREN_REAP_INTERVAL_MS: '300' };
    const first = await startProcess(env);
    const options = { baseUrl: first.url, apiKey };

    const kept = await Sandbox.create({ ...options, labels: { role: 'kept' }, ttlSeconds: 600 });
    const keptContainer = await containerOf(kept.id);
    await kept.commands.run(['sh', '-c', 'printf "precious" > /workspace/data.txt']);
    await kept.commands.start(['sh', '-c', 'while true; do date >> /workspace/tick; sleep 0.2; done'], { tag: 'ticker' });
    const moved = await kept.setTimeout(900_000); // stored in the state folder, not in the (immutable) labels
    const doomed = await Sandbox.create({ ...options, labels: { role: 'doomed' }, ttlSeconds: 600 });
    const doomedContainer = await containerOf(doomed.id);
    await doomed.setTimeout(1000); // expires while the controller is down

    await first.stop('SIGKILL');
    kept.close();
    doomed.close();
    await new Promise((r) => setTimeout(r, 1200));
    expect((await docker.getContainer(keptContainer).inspect()).State.Running).toBe(true);

    const second = await startProcess(env);
    expect(second.url).toBe(first.url);
    // The reaper removes the container, then the record: wait for both, or the listing can still show it.
    const listed = await until('the expired sandbox to be reaped', async () => {
      if (!(await containerGone(doomedContainer))) return undefined;
      const sandboxes = await Sandbox.list(options);
      return sandboxes.some((s) => s.id === doomed.id) ? undefined : sandboxes;
    });
    expect(listed.map((s) => s.id)).toEqual([kept.id]);
    expect(listed[0]).toMatchObject({ state: 'running', labels: { role: 'kept' }, expiresAt: moved.expiresAt });

    const again = await Sandbox.connect(kept.id, { baseUrl: second.url, token: kept.token });
    try {
      expect((await again.commands.run('cat /workspace/data.txt')).stdout).toBe('precious');
      const ticks = async () => Number((await again.commands.run('wc -l < /workspace/tick')).stdout.trim());
      const before = await ticks();
      await until('the background process to write more', async () => ((await ticks()) > before ? true : undefined), 10_000);
    } finally {
      again.close();
    }

    // A clean stop (SIGTERM) leaves the sandbox running.
    await second.stop('SIGTERM');
    expect((await docker.getContainer(keptContainer).inspect()).State.Running).toBe(true);
  });

  it('a controller sharing the engine sweeps the expired containers of a controller gone for good, and only those', async () => {
    const apiKey = `wk_test_${randomBytes(16).toString('hex')}`;
    const gone = await startProcess({ WARREN_STATE_DIR: await newStateDir(), WARREN_API_KEY: apiKey, WARREN_PORT: '0' });
    const short = await Sandbox.create({ baseUrl: gone.url, apiKey, ttlSeconds: 10 });
    const long = await Sandbox.create({ baseUrl: gone.url, apiKey, ttlSeconds: 600 });
    const shortContainer = await containerOf(short.id);
    const longContainer = await containerOf(long.id);
    short.close();
    long.close();
    await gone.stop('SIGKILL');

    await using other = await startTestController({ config: { orphanGraceSeconds: 0, reapIntervalMs: 300 } });
    expect(other.controller.sandboxes.list()).toEqual([]); // not its containers: never adopted
    await until('the orphan to be swept', async () => ((await containerGone(shortContainer)) ? true : undefined), 30_000);
    expect((await docker.getContainer(longContainer).inspect()).State.Running).toBe(true);
  });

  it('kills its sandboxes on a clean shutdown when configured to', async () => {
    const warren = await startTestController({ config: { killOnShutdown: true } });
    const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    const containerId = warren.controller.sandboxes.record(sandbox.id).containerId;
    sandbox.close();
    await warren.controller.close();
    expect(await containerGone(containerId)).toBe(true);
    await warren[Symbol.asyncDispose]();
  });
});
