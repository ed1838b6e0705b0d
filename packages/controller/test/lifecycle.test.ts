import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { Credentials } from '../src/credentials.js';
import { LABELS } from '../src/labels.js';
import { loadConfig } from '../src/config.js';
import { MAX_RESTARTS, RESTART_WINDOW_MS } from '../src/supervisor.js';
import { SandboxService } from '../src/sandboxes.js';
import { FakeClock, FakeProvider } from './fakes.js';

let stateDir: string;
let provider: FakeProvider;
let clock: FakeClock;
let restarts: [string, string | null][];
let service: SandboxService;

beforeEach(async () => {
  stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-lifecycle-'));
  provider = new FakeProvider();
  clock = new FakeClock();
  restarts = [];
  service = new SandboxService({
    provider,
    credentials: Credentials.inMemory('k'),
    config: loadConfig({}, { stateDir, orphanGraceSeconds: 600 }),
    clock,
    probe: async () => undefined,
    onRestart: (id, error) => restarts.push([id, error]),
  });
  await service.recover();
  await provider.events(
    (handle, action) => service.supervisor.event(handle, action),
    () => undefined,
  );
});
afterEach(async () => {
  await rm(stateDir, { recursive: true, force: true });
});

const handleOf = (id: string) => service.record(id).containerId;

describe('expiry and the reaper, on a fake clock', () => {
  it('kills a sandbox when its ttl is up, not before', async () => {
    const { id } = await service.create({ ttlSeconds: 60 });
    await clock.advance(59_000);
    expect(await service.reapExpired()).toEqual([]);
    await clock.advance(1_000);
    expect(await service.reapExpired()).toEqual([id]);
    expect(service.has(id)).toBe(false);
    expect(provider.sandboxes.size).toBe(0);
  });

  it('keepalive moves the expiry to the ttl from now and never shortens it; setTimeout does either', async () => {
    const { id } = await service.create({ ttlSeconds: 60 });
    await clock.advance(50_000);
    expect((await service.keepalive(id)).expiresAt).toBe(new Date(clock.now() + 60_000).toISOString());
    await clock.advance(59_000);
    expect(await service.reapExpired()).toEqual([]);
    await service.setTimeout(id, 10);
    await clock.advance(10_000);
    expect(await service.reapExpired()).toEqual([id]);
  });

  it("sweeps another controller's sandbox only after its labelled expiry plus the grace", async () => {
    const expires = new Date(clock.now() + 1_000).toISOString();
    provider.adopt({ [LABELS.sandbox]: 'theirs', [LABELS.owner]: 'another-controller', [LABELS.expiresAt]: expires });
    await clock.advance(1_000 + 599_000);
    expect(await service.reapExpired()).toEqual([]);
    await clock.advance(1_000);
    expect(await service.reapExpired()).toEqual(['theirs']);
  });

  it('forgets a sandbox removed from outside on the next refresh', async () => {
    const { id } = await service.create({});
    provider.sandboxes.delete(handleOf(id));
    await service.refreshStates();
    expect(service.has(id)).toBe(false);
  });
});

describe('restart supervision, on a fake clock', () => {
  it('starts a sandbox that died again, after a short grace', async () => {
    const { id } = await service.create({});
    provider.die(handleOf(id));
    expect(service.record(id).state).toBe('exited');
    expect(service.willRestart(id)).toBe(true);
    await clock.advance(2_000);
    expect(service.record(id).state).toBe('running');
    expect(restarts).toEqual([[id, null]]);
  });

  it(`leaves a sandbox exited after ${MAX_RESTARTS + 1} deaths within the window, but keeps restarting deaths spread wider`, async () => {
    const { id: looping } = await service.create({});
    for (let death = 0; death < MAX_RESTARTS; death++) {
      provider.die(handleOf(looping));
      await clock.advance(2_000);
      expect(service.record(looping).state).toBe('running');
    }
    provider.die(handleOf(looping));
    await clock.advance(2_000);
    expect(service.record(looping).state).toBe('exited');
    expect(service.willRestart(looping)).toBe(false);

    const { id: spread } = await service.create({});
    for (let death = 0; death < MAX_RESTARTS + 3; death++) {
      provider.die(handleOf(spread));
      await clock.advance(RESTART_WINDOW_MS / MAX_RESTARTS + 1_000);
      expect(service.record(spread).state).toBe('running');
    }
  });

  it('does not restart a sandbox whose time is up', async () => {
    const { id } = await service.create({ ttlSeconds: 30 });
    await clock.advance(30_000);
    provider.die(handleOf(id));
    await clock.advance(2_000);
    expect(service.record(id).state).toBe('exited');
    expect(provider.calls.filter((c) => c.startsWith('start'))).toEqual([]);
  });

  it('waits while the engine is away, then restarts; that time does not count against the attempts', async () => {
    const { id } = await service.create({});
    service.supervisor.setEngineAway(true);
    provider.die(handleOf(id));
    await clock.advance(2_000);
    for (let second = 0; second < 120; second++) await clock.advance(1_000);
    expect(provider.calls.filter((c) => c.startsWith('start'))).toEqual([]);
    service.supervisor.setEngineAway(false);
    await clock.advance(1_000);
    expect(service.record(id).state).toBe('running');
  });

  it('a sandbox killed on purpose is not restarted', async () => {
    const { id } = await service.create({});
    await service.kill(id);
    expect(provider.calls.filter((c) => c.startsWith('start'))).toEqual([]);
    expect(service.has(id)).toBe(false);
  });
});

describe("onTimeout: 'hibernate', on a fake clock", () => {
  it('hibernates at the timeout instead of killing, keeps it for the retention across a restart, and a wake gives it its ttl again', async () => {
    const { id } = await service.create({ ttlSeconds: 60, onTimeout: 'hibernate' });
    const plain = await service.create({ ttlSeconds: 60 });
    await clock.advance(60_000);
    expect(await service.reapExpired()).toEqual([plain.id]);
    const asleep = await service.get(id);
    expect(asleep).toMatchObject({ state: 'hibernated', timedOut: true });
    const retention = service.config.timedOutRetentionSeconds * 1000;
    expect(asleep.expiresAt).toBe(new Date(clock.now() + retention).toISOString());
    // A restarted controller still knows it timed out, and when its retention ends.
    const again = new SandboxService({ provider, credentials: service.credentials, config: service.config, clock, probe: async () => undefined });
    await again.recover();
    expect(await again.get(id)).toMatchObject({ state: 'hibernated', timedOut: true, expiresAt: asleep.expiresAt });
    await clock.advance(1_000);
    await again.wake(id);
    const awake = await again.get(id);
    expect(awake.state).toBe('running');
    expect(awake.timedOut).toBeUndefined();
    expect(awake.expiresAt).toBe(new Date(clock.now() + 60_000).toISOString());
    // Timed out again, then past its retention: killed.
    await clock.advance(60_000);
    expect(await again.reapExpired()).toEqual([]);
    await clock.advance(retention);
    expect(await again.reapExpired()).toEqual([id]);
    expect(again.has(id)).toBe(false);
  });

  it('wakeOnCall: false refuses a wake but a resume, and wakeOnCall alone is refused', async () => {
    await expect(service.create({ wakeOnCall: false })).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
    const { id } = await service.create({ ttlSeconds: 60, onTimeout: 'hibernate', wakeOnCall: false });
    await clock.advance(60_000);
    await service.reapExpired();
    await expect(service.wake(id)).rejects.toMatchObject({ code: 'SANDBOX_NOT_READY' });
    expect((await service.resume(id)).state).toBe('running');
  });
});

describe('hibernation, on a fake clock', () => {
  it('hibernates only sandboxes idle for their hibernateAfterSeconds with no open connection', async () => {
    const idle = await service.create({ hibernateAfterSeconds: 60 });
    const connected = await service.create({ hibernateAfterSeconds: 60 });
    const never = await service.create({});
    service.connectionChanged(connected.id, 1);
    await clock.advance(59_000);
    expect(await service.hibernateIdle()).toEqual([]);
    service.touch(idle.id);
    await clock.advance(59_000);
    expect(await service.hibernateIdle()).toEqual([]);
    await clock.advance(1_000);
    expect(await service.hibernateIdle()).toEqual([idle.id]);
    expect(service.record(idle.id).state).toBe('hibernated');
    expect(provider.sandboxes.get(handleOf(idle.id))!.state).toBe('exited');
    expect(service.record(connected.id).state).toBe('running');
    expect(service.record(never.id).state).toBe('running');
  });

  it('the supervisor leaves a hibernated sandbox stopped, a wake starts it once for concurrent callers, and a restart keeps it hibernated', async () => {
    const { id } = await service.create({});
    await service.hibernate(id);
    provider.die(handleOf(id));
    expect(await service.restartStopped()).toEqual({ restarted: [], failed: [] });
    expect((await service.get(id)).state).toBe('hibernated');
    const again = new SandboxService({ provider, credentials: service.credentials, config: service.config, clock, probe: async () => undefined });
    await again.recover();
    expect(again.record(id).state).toBe('hibernated');
    const starts = provider.calls.filter((c) => c.startsWith('start')).length;
    await Promise.all([again.wake(id), again.wake(id), again.wake(id)]);
    expect(provider.calls.filter((c) => c.startsWith('start')).length).toBe(starts + 1);
    expect(again.record(id).state).toBe('running');
    await again.wake(id);
    expect(provider.calls.filter((c) => c.startsWith('start')).length).toBe(starts + 1);
  });
});
