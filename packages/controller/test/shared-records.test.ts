import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { Credentials } from '../src/credentials.js';
import { LABELS } from '../src/labels.js';
import { loadConfig } from '../src/config.js';
import { SandboxService } from '../src/sandboxes.js';
import { silentLogger } from '../src/logger.js';
import { WarmPool } from '../src/pool.js';
import { type SharedRecords } from '../src/provider.js';
import { type StoredRecord } from '../src/record-store.js';
import { FakeClock, FakeProvider } from './fakes.js';

/**
 * Records kept by the backend, as the Kubernetes provider keeps them on pod annotations: a claim
 * is one atomic compare-and-set, like the API server's JSON patch with a `test` step.
 */
class FakeSharedRecords implements SharedRecords {
  readonly records = new Map<string, StoredRecord>();
  readonly claimed = new Set<string>();
  constructor(private readonly provider: FakeProvider) {}
  async readAll(): Promise<Map<string, StoredRecord>> {
    const live = new Set([...this.provider.sandboxes.values()].map((s) => s.agentId));
    return new Map([...this.records.values()].filter((r) => live.has(r.agentId)).map((r) => [r.id, { ...r }]));
  }
  async read(agentId: string): Promise<StoredRecord | undefined> {
    const found = this.records.get(agentId);
    return found && { ...found };
  }
  async write(record: StoredRecord): Promise<void> {
    this.records.set(record.agentId, { ...record });
  }
  async remove(): Promise<void> {}
  async unclaimed(): Promise<{ agentId: string; handle: string; labels: Record<string, string> }[]> {
    return [...this.provider.sandboxes.values()]
      .filter((s) => s.labels[LABELS.pool] === '1' && !this.claimed.has(s.handle))
      .map((s) => ({ agentId: s.agentId, handle: s.handle, labels: s.labels }));
  }
  async retire(handle: string): Promise<boolean> {
    if (this.claimed.has(handle)) return false;
    this.claimed.add(handle);
    return true;
  }
  async claim(handle: string, record: StoredRecord): Promise<boolean> {
    await new Promise((r) => setImmediate(r)); // a round trip: both claimants are in flight at once
    if (this.claimed.has(handle) || !this.provider.sandboxes.has(handle)) return false;
    this.claimed.add(handle);
    this.records.set(record.agentId, { ...record });
    return true;
  }
}

class SharedFakeProvider extends FakeProvider {
  readonly sharedRecords: FakeSharedRecords = new FakeSharedRecords(this);
}

let stateDirs: string[];
let provider: SharedFakeProvider;
let clock: FakeClock;
const masterKey = Buffer.alloc(32, 7);

async function replica(poolSize = 0): Promise<SandboxService> {
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-shared-'));
  stateDirs.push(stateDir);
  const service = new SandboxService({
    provider,
    credentials: Credentials.inMemory('k', masterKey),
    config: loadConfig({}, { stateDir }),
    clock,
    probe: async () => undefined,
    pool: (s) => new WarmPool(s, poolSize, silentLogger()),
  });
  await service.recover();
  return service;
}

beforeEach(() => {
  stateDirs = [];
  provider = new SharedFakeProvider();
  clock = new FakeClock();
});
afterEach(async () => {
  for (const dir of stateDirs) await rm(dir, { recursive: true, force: true });
});

describe('two controller replicas on one backend with shared records', () => {
  it("each finds the other's sandboxes, made after it started, by id and in lists", async () => {
    const a = await replica();
    const b = await replica();
    const made = await a.create({ labels: { team: 'x' } });
    expect(b.has(made.id)).toBe(false);
    expect((await b.get(made.id)).id).toBe(made.id);
    expect((await b.find({ labels: { team: 'x' } })).map((s) => s.id)).toEqual([made.id]);
  });

  it('does not reap a sandbox whose expiry another replica moved, and reaps it once that passes', async () => {
    const a = await replica();
    const b = await replica();
    const { id } = await a.create({ ttlSeconds: 60 });
    await b.ensureKnown(id);
    await clock.advance(50_000);
    await a.keepalive(id); // now expires 110 s after the start
    await clock.advance(20_000);
    expect(await b.reapExpired()).toEqual([]);
    expect(provider.sandboxes.size).toBe(1);
    await clock.advance(40_000);
    expect(await b.reapExpired()).toEqual([id]);
  });

  it('hands one pool member to exactly one of two replicas claiming it at once', async () => {
    const a = await replica(1);
    const b = await replica(0);
    (a.pool as WarmPool).fill();
    for (let i = 0; i < 100 && a.pool!.readyCount < 1; i++) await new Promise((r) => setImmediate(r));
    expect(a.pool!.readyCount).toBe(1);
    const [fromA, fromB] = await Promise.all([a.create({}), b.create({})]);
    expect([fromA.pooled, fromB.pooled].filter(Boolean)).toHaveLength(1);
    expect(fromA.id).not.toBe(fromB.id);
    const agents = new Set([a.record(fromA.id).agentId, b.record(fromB.id).agentId]);
    expect(agents.size).toBe(2);
    expect(provider.sharedRecords.claimed.size).toBe(1);
  });

  it("claims another replica's unclaimed member when its own pool is empty", async () => {
    const a = await replica(1);
    const b = await replica(0);
    (a.pool as WarmPool).fill();
    for (let i = 0; i < 100 && a.pool!.readyCount < 1; i++) await new Promise((r) => setImmediate(r));
    // A create with an environment of its own never gets a member (its env is fixed at start).
    expect((await b.create({ env: { OWN: '1' } })).pooled).toBe(false);
    expect(provider.sharedRecords.claimed.size).toBe(0);
    const made = await b.create({});
    expect(made.pooled).toBe(true);
    // A's own copy of that member is now lost to B: A's next take skips it instead of handing it out twice.
    const next = await a.create({});
    expect(next.id).not.toBe(made.id);
    expect(a.record(next.id).agentId).not.toBe(b.record(made.id).agentId);
  });

  it('never removes a member another replica claimed when it empties its own pool', async () => {
    const a = await replica(1);
    const b = await replica(0);
    (a.pool as WarmPool).fill();
    for (let i = 0; i < 100 && a.pool!.readyCount < 1; i++) await new Promise((r) => setImmediate(r));
    const made = await b.create({});
    expect(made.pooled).toBe(true);
    // A still lists the member as ready (it has not tried to take it): closing its pool must leave it.
    await (a.pool as WarmPool).close();
    expect([...provider.sandboxes.values()].map((s) => s.agentId)).toContain(b.record(made.id).agentId);
    expect((await b.get(made.id)).state).toBe('running');
  });
});
