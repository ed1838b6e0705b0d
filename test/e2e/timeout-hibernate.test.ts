import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox as E2bSandbox } from 'e2b';
import { Sandbox } from '@warren/sdk';
import { runCli } from '../support/cli.js';
import { startTestController, type TestController } from '../support/fixtures.js';

/**
 * A sandbox whose time runs out is hibernated instead of killed when it asked for that
 * (`onTimeout: 'hibernate'`; E2B's `autoPause` / `lifecycle.onTimeout: 'pause'`), and a call,
 * connection or resume wakes it (E2B's `autoResume`, `Sandbox.connect`), on a real controller and
 * real containers. The reaper runs only when a test calls it, with a clock set past the expiry,
 * so nothing here waits for time to pass (docs/state.md#when-time-runs-out).
 */
describe('a sandbox whose time runs out hibernates, and wakes', () => {
  let warren: TestController;
  const RETENTION_SECONDS = 3600;
  /** Runs the reaper as if `seconds` had passed. */
  const reapAfter = (seconds: number) => warren.controller.sandboxes.reapExpired(Date.now() + seconds * 1000);

  beforeAll(async () => {
    // The engine is shared: a grace of a century keeps this reaper's clock jumps off other controllers' sandboxes.
    warren = await startTestController({
      config: { reapIntervalMs: 24 * 3600 * 1000, orphanGraceSeconds: 100 * 365 * 24 * 3600, timedOutRetentionSeconds: RETENTION_SECONDS },
    });
  }, 120_000);
  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
  }, 120_000);

  it("Warren's onTimeout: 'hibernate' keeps the files at the timeout; a call wakes it with its ttl again; after the retention it is killed", async () => {
    const options = { baseUrl: warren.url, apiKey: warren.apiKey };
    const sandbox = await Sandbox.create({ ...options, ttlSeconds: 600, onTimeout: 'hibernate' });
    const killed = await Sandbox.create({ ...options, ttlSeconds: 600 });
    try {
      expect((await sandbox.info()).settings).toMatchObject({ onTimeout: 'hibernate' });
      await sandbox.files.write('kept.txt', 'across the timeout');
      const reaped = await reapAfter(601);
      // Only the sandbox without onTimeout was killed; the other is hibernated, its retention its new end.
      expect(reaped).toEqual([killed.id]);
      const asleep = await sandbox.info();
      expect(asleep).toMatchObject({ state: 'hibernated', timedOut: true });
      expect(Date.parse(asleep.expiresAt) - Date.now()).toBeGreaterThan((RETENTION_SECONDS - 60) * 1000);
      // A call wakes it (wakeOnCall is true by default), with its files and its own ttl from now.
      expect(await sandbox.files.read('kept.txt')).toBe('across the timeout');
      const awake = await sandbox.info();
      expect(awake.state).toBe('running');
      expect(awake.timedOut).toBeUndefined();
      expect(Date.parse(awake.expiresAt) - Date.now()).toBeLessThanOrEqual(600_000);
      expect(Date.parse(awake.expiresAt) - Date.now()).toBeGreaterThan(500_000);

      // Out of time again, then past the retention: killed.
      expect(await reapAfter(601)).toEqual([]);
      expect((await sandbox.info()).state).toBe('hibernated');
      expect(await reapAfter(601 + RETENTION_SECONDS + 1)).toEqual([sandbox.id]);
      await expect(sandbox.info()).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND' });
    } finally {
      await sandbox.kill().catch(() => undefined);
      await killed.kill().catch(() => undefined);
    }
  }, 300_000);

  it('wakeOnCall: false wakes only for a resume; wakeOnCall without onTimeout is refused', async () => {
    const options = { baseUrl: warren.url, apiKey: warren.apiKey };
    await expect(Sandbox.create({ ...options, wakeOnCall: false })).rejects.toMatchObject({ code: 'INVALID_PARAMS', details: { field: 'wakeOnCall' } });
    const sandbox = await Sandbox.create({ ...options, ttlSeconds: 600, onTimeout: 'hibernate', wakeOnCall: false });
    try {
      await sandbox.files.write('kept.txt', 'asleep until resumed');
      await reapAfter(601);
      expect(await sandbox.info()).toMatchObject({ state: 'hibernated', timedOut: true, settings: { wakeOnCall: false } });
      // A route that needs it running (its metrics) does not wake it.
      const refused = await fetch(`${warren.url}/v1/sandboxes/${sandbox.id}/metrics`, { headers: { authorization: `Bearer ${warren.apiKey}` } });
      expect(refused.status).toBe(503);
      expect(((await refused.json()) as { error: { code: string; message: string } }).error).toMatchObject({
        code: 'SANDBOX_NOT_READY',
        message: expect.stringMatching(/wakes only when resumed/),
      });
      expect((await sandbox.info()).state).toBe('hibernated');
      expect((await sandbox.resume()).state).toBe('running');
      expect(await sandbox.files.read('kept.txt')).toBe('asleep until resumed');
    } finally {
      await sandbox.kill().catch(() => undefined);
    }
  }, 300_000);

  it("the e2b SDK: lifecycle.onTimeout 'pause' pauses at the timeout and Sandbox.connect resumes it; autoResume lets traffic wake it", async () => {
    const gateway = `${warren.url}/e2b`;
    const opts = { apiKey: warren.apiKey, apiUrl: gateway, sandboxUrl: gateway };
    const paused = await E2bSandbox.create({ ...opts, timeoutMs: 600_000, lifecycle: { onTimeout: 'pause' } });
    const resumable = await E2bSandbox.create({ ...opts, timeoutMs: 600_000, lifecycle: { onTimeout: 'pause', autoResume: true } });
    const plain = await E2bSandbox.create({ ...opts, timeoutMs: 600_000 });
    try {
      expect((await paused.getInfo()).lifecycle).toEqual({ onTimeout: 'pause', autoResume: false });
      expect((await resumable.getInfo()).lifecycle).toEqual({ onTimeout: 'pause', autoResume: true });
      expect((await plain.getInfo()).lifecycle).toEqual({ onTimeout: 'kill', autoResume: false });
      await paused.files.write('kept.txt', 'paused at the timeout');
      await resumable.files.write('kept.txt', 'woken by traffic');

      expect(await reapAfter(601)).toEqual([plain.sandboxId]);
      // Paused, as E2B says it, in the detail and the list; the plain one is gone.
      expect((await paused.getInfo()).state).toBe('paused');
      expect((await resumable.getInfo()).state).toBe('paused');
      const listed = await E2bSandbox.list({ ...opts, query: { state: ['paused'] } }).nextItems();
      expect(listed.map((s) => s.sandboxId).sort()).toEqual([paused.sandboxId, resumable.sandboxId].sort());
      expect(await plain.isRunning()).toBe(false);

      // Without autoResume, traffic does not wake it; Sandbox.connect resumes it with its files.
      expect(await paused.isRunning()).toBe(false);
      await expect(paused.commands.run('true')).rejects.toThrow();
      expect((await paused.getInfo()).state).toBe('paused');
      const reconnected = await E2bSandbox.connect(paused.sandboxId, opts);
      expect((await reconnected.getInfo()).state).toBe('running');
      expect(await reconnected.files.read('kept.txt')).toBe('paused at the timeout');

      // With autoResume, the next call wakes it.
      expect(await resumable.files.read('kept.txt')).toBe('woken by traffic');
      expect((await resumable.getInfo()).state).toBe('running');
      expect((await resumable.commands.run('echo up')).stdout.trim()).toBe('up');
    } finally {
      for (const s of [paused, resumable, plain]) await s.kill().catch(() => undefined);
    }
  }, 300_000);

  it('warren create --on-timeout hibernate --no-wake-on-call asks for both; a bad action is refused naming the choices', async () => {
    const env = { WARREN_URL: warren.url, WARREN_API_KEY: warren.apiKey };
    const created = await runCli(['create', '--ttl', '10m', '--on-timeout', 'hibernate', '--no-wake-on-call', '--json'], { env });
    expect(created.code).toBe(0);
    const answer = JSON.parse(created.stdout) as { id: string; settings: Record<string, unknown> };
    try {
      expect(answer.settings).toMatchObject({ onTimeout: 'hibernate', wakeOnCall: false });
    } finally {
      await warren.controller.sandboxes.kill(answer.id);
    }
    const bad = await runCli(['create', '--on-timeout', 'pause'], { env });
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/kill, hibernate/);
  }, 120_000);

  it('refuses autoResume without autoPause, as E2B does, and keeps the create answer otherwise', async () => {
    const call = (body: unknown) =>
      fetch(`${warren.url}/e2b/v2/sandboxes`, {
        method: 'POST',
        headers: { 'x-api-key': warren.apiKey, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const refused = await call({ templateID: 'base', autoResume: { enabled: true } });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { message: string }).message).toMatch(/autoResume can only be true/);
    const memoryless = await call({ templateID: 'base', autoPause: true, autoPauseMemory: false, autoResume: { enabled: true } });
    expect(memoryless.status).toBe(400);
  }, 60_000);
});
