import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { Sandbox } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';
import { until } from '../support/wait.js';

/**
 * `freezeAfterIdleSeconds` on real Docker: an idle sandbox is frozen with the cgroup freezer (the
 * engine reports it paused, its processes stop), the API still says `running` with `frozen: true`,
 * and the next call or connection thaws it with its files and processes as they were.
 */
describe('freezing idle sandboxes', () => {
  let warren: TestController;
  const docker = new Docker();
  const sandboxes: Sandbox[] = [];

  beforeAll(async () => {
    warren = await startTestController({ config: { freezeAfterIdleSeconds: 2, poolSize: 0 } });
  });
  afterAll(async () => {
    for (const s of sandboxes) await s.kill().catch(() => undefined);
    await warren?.[Symbol.asyncDispose]();
  });

  const create = async () => {
    const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, ttlSeconds: 600 });
    sandboxes.push(sandbox);
    return sandbox;
  };
  const enginePaused = async (sandbox: Sandbox) => {
    const record = warren.controller.sandboxes.record(sandbox.id);
    return (await docker.getContainer(record.containerId).inspect()).State.Paused;
  };
  // REST reads (info) never thaw a sandbox: only calls and connections to its daemon do.
  const frozen = async (sandbox: Sandbox) => (await sandbox.info()).frozen === true;
  const metric = async (name: string) => {
    const text = await (await fetch(`${warren.url}/metrics`, { headers: { authorization: `Bearer ${warren.apiKey}` } })).text();
    return Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  };

  it('freezes an idle sandbox (its processes stop), and the next call thaws it with files and processes kept', async () => {
    const sandbox = await create();
    await sandbox.files.write('kept.txt', 'still here');
    // A background process that writes the time once a second: it stops while frozen and goes on after.
    const ticker = await sandbox.commands.start(['sh', '-c', 'while true; do date +%s >> /workspace/ticks; sleep 1; done']);
    await until('the sandbox to freeze', async () => (await frozen(sandbox)) || undefined, 30_000, 200);
    const frozenAt = Date.now() / 1000;
    const info = await sandbox.info();
    expect(info.state).toBe('running');
    expect(await enginePaused(sandbox)).toBe(true);
    const thawsBefore = await metric('warren_sandbox_thaw_seconds_count');

    // Stay frozen a while (REST reads do not thaw), then make a call on the connection that was open all along.
    await new Promise((r) => setTimeout(r, 5_000));
    expect(await frozen(sandbox)).toBe(true);
    const thawedAt = Date.now() / 1000;
    expect(await sandbox.files.read('kept.txt')).toBe('still here');
    expect(await enginePaused(sandbox)).toBe(false);
    expect((await sandbox.info()).frozen).toBeUndefined();
    expect(await metric('warren_sandbox_thaw_seconds_count')).toBe(thawsBefore + 1);

    // The same process runs on, and wrote nothing while frozen.
    const alive = await sandbox.commands.run(['sh', '-c', `kill -0 ${ticker.pid} && echo alive`]);
    expect(alive.stdout.trim()).toBe('alive');
    const ticks = (await sandbox.files.read('ticks')).trim().split('\n').map(Number);
    // Seconds wholly inside the freeze (at least three of them): a running ticker writes each one.
    expect(Math.floor(thawedAt) - Math.ceil(frozenAt)).toBeGreaterThanOrEqual(3);
    const duringFreeze = ticks.filter((t) => t >= Math.ceil(frozenAt) && t < Math.floor(thawedAt));
    expect(duringFreeze).toEqual([]);
    await until('the ticker to tick after the thaw', async () => {
      const after = (await sandbox.files.read('ticks')).trim().split('\n').map(Number);
      return after.some((t) => t >= Math.floor(thawedAt)) || undefined;
    });
    await ticker.kill();
  });

  it('a new connection thaws a frozen sandbox, and a frozen sandbox can be killed', async () => {
    const sandbox = await create();
    await sandbox.files.write('a.txt', 'a');
    sandbox.close();
    await until('the sandbox to freeze', async () => (await frozen(sandbox)) || undefined, 30_000, 200);
    const again = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, apiKey: warren.apiKey });
    expect(await again.files.read('a.txt')).toBe('a');
    expect(await enginePaused(sandbox)).toBe(false);
    again.close();

    await until('the sandbox to freeze again', async () => (await frozen(sandbox)) || undefined, 30_000, 200);
    const containerId = warren.controller.sandboxes.record(sandbox.id).containerId;
    await warren.controller.sandboxes.kill(sandbox.id);
    await expect(docker.getContainer(containerId).inspect()).rejects.toMatchObject({ statusCode: 404 });
  });

  it('a request through a port URL thaws a frozen sandbox, and its server answers', async () => {
    const sandbox = await create();
    await sandbox.files.write('index.html', 'served after a thaw');
    const server = await sandbox.commands.start(['python3', '-m', 'http.server', '8000', '--bind', '127.0.0.1']);
    const get = () => fetch(sandbox.ports.baseUrl(8000) + 'index.html', { headers: { authorization: `Bearer ${sandbox.token}` } });
    await until('the server to answer', async () => ((await get().catch(() => undefined))?.ok ? true : undefined));
    await until('the sandbox to freeze', async () => (await frozen(sandbox)) || undefined, 30_000, 200);
    const answer = await get();
    expect(answer.status).toBe(200);
    expect(await answer.text()).toBe('served after a thaw');
    expect(await enginePaused(sandbox)).toBe(false);
    // Once the request is over, nothing holds the sandbox (a daemon connection kept for reuse does not).
    await until('the sandbox to freeze again after the request', async () => (await frozen(sandbox)) || undefined, 30_000, 200);
    expect((await get()).status).toBe(200);
    await server.kill();
  });

  it('never freezes a sandbox while a foreground command runs past the idle time', async () => {
    const sandbox = await create();
    // The controller's own record, read often: a freeze would also stop the command itself, which would then never answer.
    const record = warren.controller.sandboxes.record(sandbox.id);
    let sawFrozen = false;
    let done = false;
    const watch = (async () => {
      while (!done) {
        sawFrozen ||= record.frozen === true;
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    const result = await sandbox.commands.run('sleep 5; echo finished', { timeoutMs: 30_000 });
    done = true;
    await watch;
    expect(result.stdout.trim()).toBe('finished');
    expect(sawFrozen).toBe(false);
    // Idle afterwards, it does freeze: the command was what kept it awake.
    await until('the sandbox to freeze after the command', async () => (await frozen(sandbox)) || undefined, 30_000, 200);
  });

  it('never freezes a sandbox whose background process computes, even one held to 0.01 CPUs; an idle one beside them freezes', async () => {
    const busy = await create();
    const held = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, ttlSeconds: 600, cpus: 0.01 });
    sandboxes.push(held);
    const idle = await create();
    // Background loops with no output: no call in flight and no frame, only CPU says they work.
    const loops = [await busy.commands.start(['sh', '-c', 'while :; do :; done']), await held.commands.start(['sh', '-c', 'while :; do :; done'])];
    // The controller's own records, read often (a REST read never thaws, but a frozen loop would show in the record).
    const sawFrozen = new Set<string>();
    let done = false;
    const watch = (async () => {
      while (!done) {
        for (const s of [busy, held]) if (warren.controller.sandboxes.record(s.id).frozen === true) sawFrozen.add(s === busy ? 'busy' : 'held');
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    try {
      await until('the idle sandbox to freeze', async () => (await frozen(idle)) || undefined, 30_000, 200);
      // Several more idle periods and checks (2 s each, checks every second) with the loops running.
      await new Promise((r) => setTimeout(r, 8_000));
    } finally {
      done = true;
      await watch;
    }
    expect([...sawFrozen]).toEqual([]);
    expect(await enginePaused(busy)).toBe(false);
    expect(await enginePaused(held)).toBe(false);
    // Stopped, the loops no longer hold them: both freeze.
    for (const loop of loops) await loop.kill();
    await until('the busy sandbox to freeze once its loop ended', async () => (await frozen(busy)) || undefined, 30_000, 200);
    await until('the held sandbox to freeze once its loop ended', async () => (await frozen(held)) || undefined, 30_000, 200);
  });

  it('an open folder watch keeps its sandbox awake, so a background process that writes later is seen', async () => {
    const sandbox = await create();
    await sandbox.files.mkdir('watched');
    await using watcher = await sandbox.files.watch('watched', { coalesceMs: 20 });
    // Writes after three idle periods; frozen, it would write nothing until something thawed it.
    await sandbox.commands.start(['sh', '-c', 'sleep 6; echo late > /workspace/watched/late.txt']);
    const record = warren.controller.sandboxes.record(sandbox.id);
    let sawFrozen = false;
    const events: unknown[] = [];
    const isLate = (e: unknown) => typeof e === 'object' && e !== null && 'path' in e && e.path === 'watched/late.txt';
    const consumer = (async () => {
      for await (const event of watcher) {
        events.push(event);
        if (isLate(event)) break;
      }
    })();
    const seen = await until(
      'the watch to report the late write',
      () => {
        sawFrozen ||= record.frozen === true;
        return events.find(isLate);
      },
      30_000,
      20,
    );
    await consumer;
    expect(seen).toMatchObject({ path: 'watched/late.txt' });
    expect(sawFrozen).toBe(false);
  });

  it('an explicit pause is not thawed by a connection that asks not to resume; resume thaws it', async () => {
    const sandbox = await create();
    await until('the sandbox to freeze', async () => (await frozen(sandbox)) || undefined, 30_000, 200);
    const paused = await sandbox.pause();
    expect(paused.state).toBe('paused');
    expect(paused.frozen).toBeUndefined();
    await expect(Sandbox.connect(sandbox.id, { baseUrl: warren.url, apiKey: warren.apiKey, resume: false })).rejects.toMatchObject({
      code: 'SANDBOX_NOT_READY',
    });
    expect(await enginePaused(sandbox)).toBe(true);
    await sandbox.resume();
    expect(await enginePaused(sandbox)).toBe(false);
    expect((await sandbox.commands.run('echo up')).stdout.trim()).toBe('up');
  });
});

describe('freezing idle sandboxes over the exec daemon channel (a docker exec bridge, which a paused container refuses)', () => {
  let warren: TestController;

  beforeAll(async () => {
    warren = await startTestController({ config: { freezeAfterIdleSeconds: 2, poolSize: 0, daemonChannel: 'exec' } });
  });
  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
  });

  it('thaws before opening the bridge, and a call on a connection opened before the freeze goes through', async () => {
    const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, ttlSeconds: 600 });
    try {
      await sandbox.files.write('kept.txt', 'kept');
      await until('the sandbox to freeze', async () => (await sandbox.info()).frozen || undefined, 30_000, 200);
      expect(await sandbox.files.read('kept.txt')).toBe('kept');
      await until('the sandbox to freeze again', async () => (await sandbox.info()).frozen || undefined, 30_000, 200);
      const again = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, apiKey: warren.apiKey });
      expect((await again.commands.run('cat kept.txt')).stdout).toBe('kept');
      again.close();
    } finally {
      await sandbox.kill().catch(() => undefined);
    }
  });
});
