import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox as E2bSandbox, RateLimitError } from 'e2b';
import { Sandbox, WarrenError } from '@warren/sdk';
import { startTestController, type TestController, tenantCredentials } from '../support/fixtures.js';

/**
 * Each fork settles alone (docs/state.md#fork): a tenant allowed three live sandboxes forks its one
 * sandbox into three, so two forks start and the third is refused by the tenant's maxSandboxes,
 * on a real controller and real containers, through Warren's SDK, its REST answer and the real
 * `e2b` SDK.
 */
describe('a fork into N settles each fork alone', () => {
  let warren: TestController;
  const tenantKey = `wk_capped_${randomBytes(16).toString('hex')}`;
  const api = (method: string, route: string, body?: unknown) =>
    fetch(`${warren.url}${route}`, {
      method,
      headers: { authorization: `Bearer ${tenantKey}`, 'content-type': 'application/json' },
      body: body === undefined ? null : JSON.stringify(body),
    });
  const live = async () => ((await (await api('GET', '/v1/sandboxes')).json()) as { sandboxes: { id: string }[] }).sandboxes.map((s) => s.id);
  const killAllBut = async (keep: string) => {
    for (const id of await live()) if (id !== keep) await api('DELETE', `/v1/sandboxes/${id}`);
  };

  beforeAll(async () => {
    const apiKey = `wk_test_${randomBytes(16).toString('hex')}`;
    warren = await startTestController({
      credentials: await tenantCredentials(apiKey, [tenantKey]),
      config: { tenants: { limits: { 'other-1': { maxSandboxes: 3 } } }, snapshots: { maxCount: 8, maxMb: 4096, maxForkCount: 4 } },
    });
  }, 120_000);
  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
  }, 120_000);

  it('two of three forks start and the third reports its own error, in the SDK, the REST answer and the CLI-facing sandboxes list', async () => {
    const parent = await Sandbox.create({ baseUrl: warren.url, apiKey: tenantKey, ttlSeconds: 600 });
    try {
      await parent.files.write('state.txt', 'from the parent');
      const settled = await parent.forkSettled({ count: 3 });
      expect(settled).toHaveLength(3);
      const forks = settled.filter((f): f is Sandbox => f instanceof Sandbox);
      const errors = settled.filter((f): f is WarrenError => f instanceof WarrenError);
      expect(forks).toHaveLength(2);
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatchObject({ code: 'RESOURCE_EXHAUSTED', details: expect.objectContaining({ limit: 'maxSandboxes', max: 3 }) });
      expect(errors[0]!.message).toMatch(/maxSandboxes = 3/);
      // The forks that started are whole sandboxes of their own.
      for (const fork of forks) expect(await fork.files.read('state.txt')).toBe('from the parent');
      await forks[0]!.files.write('state.txt', 'fork 0');
      expect(await forks[1]!.files.read('state.txt')).toBe('from the parent');
      expect((await live()).sort()).toEqual([parent.id, ...forks.map((f) => f.id)].sort());

      // With the tenant full, a fork of one starts none: the answer is that fork's error, not an empty 201.
      const none = await api('POST', `/v1/sandboxes/${parent.id}/fork`, { count: 1 });
      expect(none.status).toBe(429);
      expect(((await none.json()) as { error: { code: string } }).error.code).toBe('RESOURCE_EXHAUSTED');

      // The raw answer: the started forks in sandboxes (as before), and one result per requested fork, in order.
      for (const fork of forks) await fork.kill();
      const raw = await api('POST', `/v1/sandboxes/${parent.id}/fork`, { count: 3 });
      expect(raw.status).toBe(201);
      const answer = (await raw.json()) as {
        sandboxes: { id: string; token: string }[];
        results: { sandbox?: { id: string }; error?: { code: string; suggestion: string } }[];
      };
      expect(answer.sandboxes).toHaveLength(2);
      expect(answer.results).toHaveLength(3);
      expect(answer.results.filter((r) => r.sandbox !== undefined).map((r) => r.sandbox!.id)).toEqual(answer.sandboxes.map((s) => s.id));
      const failed = answer.results.filter((r) => r.error !== undefined);
      expect(failed).toHaveLength(1);
      expect(failed[0]).toEqual({ error: expect.objectContaining({ code: 'RESOURCE_EXHAUSTED', suggestion: expect.any(String) }) });
      expect(failed[0]!.sandbox).toBeUndefined();
      await killAllBut(parent.id);

      // fork() stays all or nothing for its caller: the started forks are killed and the first failure thrown.
      await expect(parent.fork({ count: 3 })).rejects.toMatchObject({ code: 'RESOURCE_EXHAUSTED' });
      expect(await live()).toEqual([parent.id]);
    } finally {
      await killAllBut('');
      await parent.kill().catch(() => undefined);
    }
  }, 300_000);

  it("the e2b SDK's Sandbox.fork gets a sandbox per started fork and a RateLimitError for the refused one", async () => {
    const gateway = `${warren.url}/e2b`;
    const opts = { apiKey: tenantKey, apiUrl: gateway, sandboxUrl: gateway };
    const parent = await E2bSandbox.create(opts);
    try {
      await parent.files.write('state.txt', 'e2b parent');
      const results = await parent.fork({ count: 3, timeoutMs: 120_000 });
      expect(results).toHaveLength(3);
      const forks = results.filter((r): r is E2bSandbox => r instanceof E2bSandbox);
      const errors = results.filter((r): r is Error => !(r instanceof E2bSandbox));
      expect(forks).toHaveLength(2);
      expect(errors).toHaveLength(1);
      expect(errors[0]).toBeInstanceOf(RateLimitError);
      expect(errors[0]!.message).toMatch(/maxSandboxes = 3/);
      for (const fork of forks) expect(await fork.files.read('state.txt')).toBe('e2b parent');
    } finally {
      await killAllBut('');
    }
  }, 300_000);
});
