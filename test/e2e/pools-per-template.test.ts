import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox as E2bSandbox } from 'e2b';
import { Sandbox } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';
import { until } from '../support/wait.js';

/**
 * A warm pool per template (docs/controller.md#warm-pools): the default pool of `poolSize`, one of
 * E2B's `base` template and one of a create request of its own, on a real controller and real
 * containers. A create takes a member of the pool its template matches, and only of that pool.
 */
describe('warm pools per template', () => {
  let warren: TestController;
  const custom = { image: 'warren/test-debian:latest', memoryMb: 256 } as const;
  const readyCounts = () => warren.controller.pool!.pools.map((pool) => pool.readyCount);
  const allReady = () => until('every pool to be full', () => (readyCounts().every((n) => n >= 1) ? true : undefined), 120_000);

  beforeAll(async () => {
    warren = await startTestController({
      config: {
        poolSize: 1,
        pools: [
          { e2bTemplate: 'base', size: 1 },
          { create: custom, size: 1 },
          // The same template as the default's, planned alike: it adds to that pool.
          { create: { ttlSeconds: 120 }, size: 1 },
        ],
      },
    });
  }, 120_000);
  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
  }, 120_000);

  it('keeps one pool per template, sized by the configuration; entries that plan alike are one pool', () => {
    const pools = warren.controller.pool!.pools;
    expect(pools.map((pool) => [pool.image, pool.size])).toEqual([
      ['warren/sandbox:latest', 2],
      ['warren/e2b-base:latest', 1],
      ['warren/test-debian:latest', 1],
    ]);
  });

  it("each template's create takes its own pool's member: Warren's default, a custom create, and the e2b SDK's base", async () => {
    await allReady();
    const options = { baseUrl: warren.url, apiKey: warren.apiKey };
    const made: Sandbox[] = [];
    try {
      const plain = await Sandbox.create(options);
      made.push(plain);
      expect(plain.startup?.pooled).toBe(true);

      const before = readyCounts();
      const own = await Sandbox.create({ ...options, ...custom });
      made.push(own);
      expect(own.startup?.pooled).toBe(true);
      expect((await own.info()).settings.memoryMb).toBe(256);
      expect((await own.commands.run('cat /etc/debian_version')).exitCode).toBe(0);
      // Only the custom pool gave a member.
      expect(readyCounts()[1]).toBe(before[1]);

      // Another memory size is another template: no pool has it, so it starts cold.
      const other = await Sandbox.create({ ...options, ...custom, memoryMb: 384 });
      made.push(other);
      expect(other.startup?.pooled).toBe(false);

      const gateway = `${warren.url}/e2b`;
      const e2b = await E2bSandbox.create({ apiKey: warren.apiKey, apiUrl: gateway, sandboxUrl: gateway });
      try {
        expect(warren.controller.sandboxes.record(e2b.sandboxId).pooled).toBe(true);
        expect(warren.controller.sandboxes.record(e2b.sandboxId).image).toBe('warren/e2b-base:latest');
        // The claimed member is the template's sandbox in full: its home and user.
        expect((await e2b.commands.run('pwd; whoami')).stdout.trim().split('\n')).toEqual(['/home/user', 'user']);
        expect((await e2b.getInfo()).templateId).toBe('base');
      } finally {
        await e2b.kill();
      }
      // Each pool refills.
      await allReady();
    } finally {
      for (const sandbox of made) await sandbox.kill().catch(() => undefined);
    }
  }, 300_000);
});
