import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { Credentials } from '../src/credentials.js';
import { loadConfig, type ControllerConfig } from '../src/config.js';
import { DEFAULT_E2B_TEMPLATES } from '../src/e2b/templates.js';
import { silentLogger } from '../src/logger.js';
import { SandboxService } from '../src/sandboxes.js';
import { WarmPools } from '../src/warm-pools.js';
import { FakeClock, FakeProvider } from './fakes.js';

let stateDir: string;
let provider: FakeProvider;

/** A service over a fake provider whose pools are what `config` asks for. */
async function serviceWith(config: Partial<ControllerConfig>): Promise<SandboxService> {
  const full = loadConfig({}, { stateDir, ...config });
  const service = new SandboxService({
    provider,
    credentials: Credentials.inMemory('k'),
    config: full,
    clock: new FakeClock(),
    probe: async () => undefined,
    pool: (s) => WarmPools.fromConfig(s, full, silentLogger(), 0)!,
  });
  await service.recover();
  return service;
}

async function filled(pools: WarmPools): Promise<void> {
  pools.fill();
  for (let i = 0; i < 500 && pools.pools.some((p) => p.readyCount < p.size); i++) await new Promise((r) => setTimeout(r, 5));
  expect(pools.pools.map((p) => p.readyCount)).toEqual(pools.pools.map((p) => p.size));
}

beforeEach(async () => {
  stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-pools-'));
  provider = new FakeProvider();
});
afterEach(async () => {
  await rm(stateDir, { recursive: true, force: true });
});

describe('warm pools per template', () => {
  it('makes one pool per template, sums the sizes of entries that plan alike, and keeps poolSize as the default pool', async () => {
    const service = await serviceWith({
      poolSize: 1,
      pools: [
        { create: { ttlSeconds: 60 }, size: 2 },
        { e2bTemplate: 'base', size: 1 },
        { create: { memoryMb: 256 }, size: 0 },
      ],
    });
    const pools = service.pool as WarmPools;
    expect(pools.pools.map((p) => [p.image, p.size])).toEqual([
      [service.config.defaultImage, 3],
      ['warren/e2b-base:latest', 1],
    ]);
    try {
      await filled(pools);
      // A create of E2B's base template (as the gateway plans it) takes the base pool's member, and only that.
      const base = await service.create({ ...DEFAULT_E2B_TEMPLATES.base!.create, labels: { 'e2b-template': 'base' } });
      expect(base.pooled).toBe(true);
      expect(base.image).toBe('warren/e2b-base:latest');
      // The default pool gave nothing (the base pool may have refilled already).
      expect(pools.pools[0]!.readyCount).toBe(3);
      const plain = await service.create({});
      expect(plain.pooled).toBe(true);
      // A template no pool has starts cold.
      expect((await service.create({ memoryMb: 256 })).pooled).toBe(false);
    } finally {
      await pools.close();
    }
  });

  it('refuses at start a pool of an E2B template the configuration lacks, or of a create the controller would refuse, naming the entry', async () => {
    await expect(serviceWith({ pools: [{ e2bTemplate: 'nope', size: 1 }] })).rejects.toThrow(
      /pools\[0\] names the E2B template 'nope'.*base, code-interpreter-v1/,
    );
    await expect(serviceWith({ pools: [{ create: { memoryMb: 1 << 30 }, size: 1 }] })).rejects.toThrow(/pools\[0\]: the controller would refuse its create/);
  });

  it('a close during a fill waits for the member being started and removes it, so none is left behind', async () => {
    const service = await serviceWith({ poolSize: 1, pools: [{ e2bTemplate: 'base', size: 1 }] });
    const pools = service.pool as WarmPools;
    pools.fill();
    await pools.close();
    // Nothing of the fill happens after close returned (the controller's process may exit then).
    const calls = provider.calls.length;
    expect(provider.sandboxes.size).toBe(0);
    await new Promise((r) => setTimeout(r, 50));
    expect(provider.calls.slice(calls)).toEqual([]);
    expect(provider.sandboxes.size).toBe(0);
  });

  it('reads pools from the configuration file, refusing an entry with both create and e2bTemplate', async () => {
    const file = path.join(stateDir, 'warren.yaml');
    await writeFile(file, 'pools:\n  - e2bTemplate: base\n    size: 2\n  - create: { image: python:3.12, memoryMb: 1024 }\n    size: 1\n');
    expect(loadConfig({}, { stateDir }, file).pools).toEqual([
      { e2bTemplate: 'base', size: 2 },
      { create: { image: 'python:3.12', memoryMb: 1024 }, size: 1 },
    ]);
    await writeFile(file, 'pools:\n  - e2bTemplate: base\n    create: {}\n    size: 2\n');
    expect(() => loadConfig({}, { stateDir }, file)).toThrow(/either create or e2bTemplate/);
  });
});
