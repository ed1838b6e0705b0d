import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { Credentials } from '../src/credentials.js';
import { loadConfig } from '../src/config.js';
import type { LifecycleReport } from '../src/events/lifecycle.js';
import { SandboxService } from '../src/sandboxes.js';
import { FakeClock, FakeProvider } from './fakes.js';

let stateDir: string;
let provider: FakeProvider;
let clock: FakeClock;
let service: SandboxService;
let heard: LifecycleReport[];

beforeEach(async () => {
  stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-lifecycle-events-'));
  provider = new FakeProvider();
  clock = new FakeClock();
  heard = [];
  service = new SandboxService({ provider, credentials: Credentials.inMemory('k'), config: loadConfig({}, { stateDir }), clock, probe: async () => undefined });
  service.lifecycle.subscribe((report) => heard.push(report));
  await service.recover();
  await provider.events(
    (handle, action) => service.supervisor.event(handle, action),
    () => undefined,
  );
});
afterEach(async () => {
  await rm(stateDir, { recursive: true, force: true });
});

const types = () => heard.map((r) => r.type);

describe('the sandbox service reports each lifecycle change once, with the tenant', () => {
  it('created and ready, then paused, resumed, hibernated, woken and killed', async () => {
    const { id } = await service.create({}, { owner: { tenant: 'acme', keyId: 'k1' } });
    await service.pause(id);
    await service.resume(id);
    await service.hibernate(id);
    await service.wake(id);
    await service.kill(id);
    expect(types()).toEqual(['created', 'ready', 'paused', 'resumed', 'hibernated', 'woken', 'killed']);
    expect(new Set(heard.map((r) => `${r.tenant}/${r.sandboxId}`))).toEqual(new Set([`acme/${id}`]));
    expect(heard[0]?.details).toMatchObject({ source: 'cold' });
  });

  it('expired for what the reaper ends at its ttl, failed for what vanished from the backend', async () => {
    const { id: old } = await service.create({ ttlSeconds: 60 });
    await clock.advance(60_000);
    await service.reapExpired();
    expect(heard.filter((r) => r.sandboxId === old).map((r) => r.type)).toEqual(['created', 'ready', 'expired']);
    expect(heard.at(-1)?.tenant).toBe('default');
    const { id: lost } = await service.create({});
    provider.sandboxes.delete(service.record(lost).containerId);
    await service.refreshStates();
    expect(heard.at(-1)).toMatchObject({ type: 'failed', sandboxId: lost, details: { reason: expect.any(String) } });
  });

  it('oom-killed and failed when the engine says so, ready again once the supervisor restarted it', async () => {
    const { id } = await service.create({});
    const handle = service.record(id).containerId;
    service.supervisor.event(handle, 'oom');
    provider.die(handle);
    await clock.advance(2_000);
    expect(types().slice(2)).toEqual(['oom-killed', 'failed', 'ready']);
    expect(heard[3]?.details).toMatchObject({ restarting: true });
    expect(heard[4]?.details).toMatchObject({ restarted: true });
  });
});
