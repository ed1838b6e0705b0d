import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { CodedError } from '@warren/protocol';
import { Credentials } from '../src/credentials.js';
import { loadConfig } from '../src/config.js';
import { Metrics } from '../src/metrics.js';
import { SandboxService } from '../src/sandboxes.js';
import { cpuBusy, IdleFreezer } from '../src/idle-freezer.js';
import { FakeClock, FakeProvider } from './fakes.js';

let stateDir: string;
let provider: FakeProvider;
let clock: FakeClock;
let metrics: Metrics;

const makeService = (freezeAfterIdleSeconds: number) =>
  new SandboxService({
    provider,
    credentials: Credentials.inMemory('k'),
    config: loadConfig({}, { stateDir, freezeAfterIdleSeconds }),
    clock,
    metrics,
    probe: async () => undefined,
  });

beforeEach(async () => {
  stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-freezer-'));
  provider = new FakeProvider();
  // An idle sandbox: its processes use no CPU between two samples.
  provider.cpuPerSample = 0;
  clock = new FakeClock();
  metrics = new Metrics();
});
afterEach(async () => {
  await rm(stateDir, { recursive: true, force: true });
});

/** Runs check rounds a few seconds apart until one freezes something, at most `rounds` times. */
async function checkRounds(service: SandboxService, rounds: number, stepMs = 5_000): Promise<string[]> {
  for (let i = 0; i < rounds; i++) {
    const frozen = await service.freezer.check();
    if (frozen.length > 0) return frozen;
    await clock.advance(stepMs);
  }
  return [];
}

const engineState = (service: SandboxService, id: string) => provider.sandboxes.get(service.record(id).containerId)?.state;

describe('the idle freezer, on a fake clock', () => {
  it('freezes a sandbox idle past freezeAfterIdleSeconds, and not before; it stays running for the API with frozen: true', async () => {
    const service = makeService(60);
    await service.recover();
    const { id } = await service.create({});
    await clock.advance(59_000);
    expect(await checkRounds(service, 1, 0)).toEqual([]);
    expect(await service.freezer.check()).toEqual([]);
    await clock.advance(1_000);
    // The first round past the limit takes the CPU baseline, the next one freezes.
    expect(await service.freezer.check()).toEqual([]);
    await clock.advance(5_000);
    expect(await service.freezer.check()).toEqual([id]);
    expect(engineState(service, id)).toBe('paused');
    const info = await service.get(id);
    expect(info.state).toBe('running');
    expect(info.frozen).toBe(true);
    expect(service.countByState().frozen).toBe(1);
  });

  it('thaws on the next call, which waits for it, and records the thaw time', async () => {
    const service = makeService(60);
    await service.recover();
    const { id } = await service.create({});
    await clock.advance(60_000);
    expect(await checkRounds(service, 3)).toEqual([id]);
    await service.wake(id);
    expect(engineState(service, id)).toBe('running');
    expect(service.record(id).frozen).toBe(false);
    expect((await service.get(id)).frozen).toBeUndefined();
    expect(await metrics.registry.getSingleMetricAsString('warren_sandbox_thaw_seconds')).toMatch(/warren_sandbox_thaw_seconds_count 1/);
    // The thaw was activity: the idle time starts again.
    await clock.advance(30_000);
    expect(await checkRounds(service, 2)).toEqual([]);
  });

  it('never freezes while a call is in flight (a foreground command, a watch, a terminal, a port tunnel)', async () => {
    const service = makeService(60);
    await service.recover();
    const { id } = await service.create({});
    const release = service.freezer.hold(id);
    await clock.advance(600_000);
    expect(await checkRounds(service, 5)).toEqual([]);
    release();
    await clock.advance(60_000);
    expect(await checkRounds(service, 3)).toEqual([id]);
  });

  it('a frame on an open connection thaws a frozen sandbox without being asked', async () => {
    const service = makeService(60);
    await service.recover();
    const { id } = await service.create({});
    await clock.advance(60_000);
    expect(await checkRounds(service, 3)).toEqual([id]);
    service.freezer.touch(id);
    // The thaw runs in the background of the frame; wake() waits for it.
    await service.wake(id);
    expect(engineState(service, id)).toBe('running');
  });

  it('keeps a sandbox whose processes use CPU awake though nobody calls it', async () => {
    const service = makeService(60);
    await service.recover();
    const { id } = await service.create({});
    provider.cpuPerSample = 0.5; // half a CPU second per 5 s round: 10 % of a CPU
    await clock.advance(60_000);
    expect(await checkRounds(service, 6)).toEqual([]);
    provider.cpuPerSample = 0;
    expect(await checkRounds(service, 3)).toEqual([id]);
    expect(service.record(id).state).toBe('running');
  });

  it('keeps a sandbox awake while its busy hook says so (open egress connections)', async () => {
    const service = makeService(60);
    await service.recover();
    const { id } = await service.create({});
    let egressOpen = 1;
    const freezer = new IdleFreezer({ idleSeconds: 60, table: service.table, provider, clock, busy: () => egressOpen > 0 });
    // A freezer counts a sandbox's idle time from when it first sees it.
    expect(await freezer.check()).toEqual([]);
    await clock.advance(60_000);
    for (let i = 0; i < 4; i++, await clock.advance(5_000)) expect(await freezer.check()).toEqual([]);
    egressOpen = 0;
    await freezer.check();
    await clock.advance(5_000);
    expect(await freezer.check()).toEqual([id]);
  });

  it('the reaper kills a frozen sandbox when its time is up', async () => {
    const service = makeService(60);
    await service.recover();
    const { id } = await service.create({ ttlSeconds: 600 });
    await clock.advance(60_000);
    expect(await checkRounds(service, 3)).toEqual([id]);
    await clock.advance(600_000);
    expect(await service.reapExpired()).toEqual([id]);
    expect(service.has(id)).toBe(false);
    expect(provider.sandboxes.size).toBe(0);
  });

  it("a listing that sees the engine's paused state does not turn a frozen sandbox into a paused one", async () => {
    const service = makeService(60);
    await service.recover();
    const { id } = await service.create({});
    await clock.advance(60_000);
    expect(await checkRounds(service, 3)).toEqual([id]);
    await service.refreshStates();
    expect(service.record(id).state).toBe('running');
    expect(service.record(id).frozen).toBe(true);
    expect(await service.find({ state: 'running' })).toHaveLength(1);
  });

  it("a listing taken while a snapshot's capture has the container paused leaves the sandbox running", async () => {
    const service = makeService(0);
    await service.recover();
    const { id } = await service.create({});
    const handle = service.record(id).containerId;
    await service.whileCapturing(id, async () => {
      await provider.suspend.pause(handle); // as the provider's snapshot does
      await service.refreshStates();
      await provider.suspend.resume(handle);
    });
    expect(service.record(id).state).toBe('running');
    expect(service.record(id).capturing).toBeUndefined();
    // Without a capture under way the same listing is taken at its word.
    await provider.suspend.pause(handle);
    await service.refreshStates();
    expect(service.record(id).state).toBe('paused');
  });

  it('a pause of a frozen sandbox makes it paused on purpose: no call thaws it; resume does', async () => {
    const service = makeService(60);
    await service.recover();
    const { id } = await service.create({});
    await clock.advance(60_000);
    expect(await checkRounds(service, 3)).toEqual([id]);
    expect((await service.pause(id)).state).toBe('paused');
    service.freezer.touch(id);
    await service.wake(id);
    expect(engineState(service, id)).toBe('paused');
    expect(service.record(id).state).toBe('paused');
    expect((await service.resume(id)).state).toBe('running');
    expect(engineState(service, id)).toBe('running');
    // A paused sandbox is not the freezer's to thaw or freeze.
    await service.pause(id);
    await clock.advance(600_000);
    expect(await checkRounds(service, 3)).toEqual([]);
  });

  it('a resume of a frozen sandbox thaws it', async () => {
    const service = makeService(60);
    await service.recover();
    const { id } = await service.create({});
    await clock.advance(60_000);
    expect(await checkRounds(service, 3)).toEqual([id]);
    const info = await service.resume(id);
    expect(info.state).toBe('running');
    expect(info.frozen).toBeUndefined();
    expect(engineState(service, id)).toBe('running');
  });

  it('a sandbox that died while frozen is exited, not frozen', async () => {
    const service = makeService(60);
    await service.recover();
    const { id } = await service.create({});
    await clock.advance(60_000);
    expect(await checkRounds(service, 3)).toEqual([id]);
    provider.sandboxes.get(service.record(id).containerId)!.state = 'exited';
    await service.refreshStates();
    expect(service.record(id).frozen).toBe(false);
  });

  it('a restarted controller tells a frozen sandbox from a paused one (its mark in the state folder)', async () => {
    const credentials = Credentials.inMemory('k');
    const make = () =>
      new SandboxService({
        provider,
        credentials,
        config: loadConfig({}, { stateDir, freezeAfterIdleSeconds: 60 }),
        clock,
        metrics,
        probe: async () => undefined,
      });
    const first = make();
    await first.recover();
    const { id: idle } = await first.create({});
    const { id: paused } = await first.create({});
    await first.pause(paused);
    await clock.advance(60_000);
    expect(await checkRounds(first, 3)).toEqual([idle]);

    const second = make();
    await second.recover();
    expect(second.record(idle)).toMatchObject({ state: 'running', frozen: true });
    expect(second.record(paused).state).toBe('paused');
    expect(second.record(paused).frozen).toBeUndefined();
    await second.wake(idle);
    expect(engineState(second, idle)).toBe('running');
    // Thawed, its mark is gone: a third controller sees a running sandbox.
    const third = make();
    await third.recover();
    expect(third.record(idle).frozen).toBeUndefined();
  });

  it('freezes nothing when freezeAfterIdleSeconds is 0 (the default)', async () => {
    const service = makeService(0);
    await service.recover();
    expect(loadConfig({}, { stateDir }).freezeAfterIdleSeconds).toBe(0);
    await service.create({});
    await clock.advance(3_600_000);
    expect(service.freezer.enabled).toBe(false);
    expect(await checkRounds(service, 3)).toEqual([]);
  });

  it('is off on a provider without the suspend capability (Kubernetes), and the sandbox keeps running', async () => {
    provider = new FakeProvider({ without: ['suspend'] });
    const service = makeService(60);
    await service.recover();
    const { id } = await service.create({});
    expect(service.freezer.enabled).toBe(false);
    await clock.advance(60_000);
    expect(await checkRounds(service, 3)).toEqual([]);
    expect(service.record(id).frozen).toBeUndefined();
    expect(engineState(service, id)).toBe('running');
  });

  it('stops trying when the engine refuses a freeze with NOT_SUPPORTED, and keeps the sandbox running', async () => {
    const service = makeService(60);
    await service.recover();
    const { id } = await service.create({});
    provider.suspend.pause = () => Promise.reject(new CodedError('NOT_SUPPORTED', 'this engine has no freezer'));
    await clock.advance(60_000);
    expect(await checkRounds(service, 3)).toEqual([]);
    expect(service.freezer.enabled).toBe(false);
    expect(service.record(id).frozen).toBeUndefined();
    expect(engineState(service, id)).toBe('running');
  });

  it('a call that arrives while the engine freezes the sandbox thaws it at once', async () => {
    const service = makeService(60);
    await service.recover();
    const { id } = await service.create({});
    const pause = provider.suspend.pause.bind(provider.suspend);
    let release: (() => void) | undefined;
    provider.suspend.pause = async (handle) => {
      await pause(handle);
      release = service.freezer.hold(id); // a call starts while the pause is under way
    };
    await clock.advance(60_000);
    await checkRounds(service, 3);
    expect(release).toBeDefined();
    await service.wake(id);
    expect(engineState(service, id)).toBe('running');
    expect(service.record(id).frozen).toBe(false);
  });
});

describe('when a sandbox counts as busy (cpuBusy)', () => {
  const at = (seconds: number, cpuSeconds: number, throttledPeriods?: number) => ({ at: seconds * 1000, cpuSeconds, throttledPeriods });

  it('busy from 2 % of a CPU between two samples, idle below', () => {
    expect(cpuBusy(at(0, 10), at(5, 10.2), 1)).toBe(true);
    expect(cpuBusy(at(0, 10), at(5, 10.01), 1)).toBe(false);
  });

  it('a loop held to a CPU limit below 2 % of a CPU is busy: it uses half of its limit or more', () => {
    // cpus: 0.01, and a loop that takes all of it: 1 % of a CPU.
    expect(cpuBusy(at(0, 1), at(10, 1.1), 0.01)).toBe(true);
    expect(cpuBusy(at(0, 1), at(10, 1.001), 0.01)).toBe(false);
  });

  it('held back by its CPU limit at all (throttled periods grew) is busy, however little CPU it got', () => {
    expect(cpuBusy(at(0, 1, 40), at(5, 1.001, 41), 1)).toBe(true);
    expect(cpuBusy(at(0, 1, 40), at(5, 1.001, 40), 1)).toBe(false);
  });

  it('counters that went backwards (a restarted container) decide nothing: the later sample is the new baseline', () => {
    expect(cpuBusy(at(0, 50), at(5, 2), 1)).toBeUndefined();
    expect(cpuBusy(at(0, 1, 90), at(5, 1, 3), 1)).toBeUndefined();
    expect(cpuBusy(at(5, 1), at(5, 1), 1)).toBeUndefined();
  });

  it('the freezer keeps a restarted busy sandbox awake: a CPU counter that went backwards is never read as idle', async () => {
    const service = makeService(60);
    await service.recover();
    const { id } = await service.create({});
    provider.cpuPerSample = 0.5;
    provider.cpuSeconds = 100;
    await clock.advance(60_000);
    expect(await service.freezer.check()).toEqual([]); // the baseline, at 100.5 CPU seconds
    provider.cpuSeconds = 0; // the container started again: its counter begins anew, and it computes
    await clock.advance(5_000);
    expect(await checkRounds(service, 4)).toEqual([]);
    expect(service.record(id).frozen).toBeUndefined();
  });
});
