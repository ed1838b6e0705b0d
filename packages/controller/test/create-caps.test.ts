import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { CodedError } from '@warren/protocol';
import { Credentials } from '../src/credentials.js';
import { loadConfig } from '../src/config.js';
import { SandboxService } from '../src/sandboxes.js';
import { FakeProvider } from './fakes.js';

/** A provider whose creates wait until the test lets them through or fail. */
function stallingProvider(): { provider: FakeProvider; waiting: { pass: () => void; fail: () => void }[] } {
  const provider = new FakeProvider();
  const waiting: { pass: () => void; fail: () => void }[] = [];
  provider.createGate = () =>
    new Promise((resolve, reject) => waiting.push({ pass: resolve, fail: () => reject(new CodedError('UPSTREAM_UNAVAILABLE', 'released by the test')) }));
  return { provider, waiting };
}

/** Waits until `count` creates are stalled; the test timeout bounds it. */
async function stalled(waiting: unknown[], count: number): Promise<void> {
  while (waiting.length < count) await new Promise((r) => setTimeout(r, 5));
}

let stateDir: string;
beforeEach(async () => {
  stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-caps-'));
});
afterEach(async () => {
  await rm(stateDir, { recursive: true, force: true });
});

const service = (provider: FakeProvider, config: Parameters<typeof loadConfig>[1]) =>
  new SandboxService({ provider, credentials: Credentials.inMemory('k'), config: loadConfig({}, { stateDir, ...config }), probe: async () => undefined });

describe('create caps', () => {
  it('runs at most maxConcurrentCreates at once; the next waits its turn and then runs', async () => {
    const { provider, waiting } = stallingProvider();
    const sandboxes = service(provider, { maxConcurrentCreates: 2 });
    await sandboxes.recover();
    const first = sandboxes.create({});
    const second = sandboxes.create({});
    await stalled(waiting, 2);
    const third = sandboxes.create({});
    await new Promise((r) => setTimeout(r, 50));
    expect(waiting).toHaveLength(2);
    waiting[0]!.fail();
    await expect(first).rejects.toThrow('released by the test');
    await stalled(waiting, 3);
    waiting[1]!.pass();
    waiting[2]!.pass();
    await expect(second).resolves.toMatchObject({ state: 'running' });
    await expect(third).resolves.toMatchObject({ state: 'running' });
  });

  it('refuses at once when the queue is full, with a retry time (429 + Retry-After over REST)', async () => {
    const { provider, waiting } = stallingProvider();
    const sandboxes = service(provider, { maxConcurrentCreates: 1, maxQueuedCreates: 1 });
    await sandboxes.recover();
    const first = sandboxes.create({});
    await stalled(waiting, 1);
    const queued = sandboxes.create({});
    await expect(sandboxes.create({})).rejects.toMatchObject({
      code: 'RESOURCE_EXHAUSTED',
      message: expect.stringContaining('maxQueuedCreates'),
      details: { retryAfterSeconds: expect.any(Number) },
    });
    waiting[0]!.pass();
    await stalled(waiting, 2);
    waiting[1]!.pass();
    await Promise.all([first, queued]);
  });

  it('refuses a create that waited createQueueTimeoutMs for a slot', async () => {
    const { provider, waiting } = stallingProvider();
    const sandboxes = service(provider, { maxConcurrentCreates: 1, createQueueTimeoutMs: 100 });
    await sandboxes.recover();
    const first = sandboxes.create({});
    await stalled(waiting, 1);
    await expect(sandboxes.create({})).rejects.toMatchObject({ code: 'RESOURCE_EXHAUSTED', message: expect.stringContaining('waited 100 ms') });
    waiting[0]!.pass();
    await first;
  });

  it('refuses a create beyond maxSandboxes (creates in flight and queued count)', async () => {
    const { provider, waiting } = stallingProvider();
    const sandboxes = service(provider, { maxSandboxes: 1 });
    await sandboxes.recover();
    const first = sandboxes.create({});
    await stalled(waiting, 1);
    await expect(sandboxes.create({})).rejects.toMatchObject({ code: 'RESOURCE_EXHAUSTED', message: expect.stringContaining('maxSandboxes') });
    waiting[0]!.fail();
    await expect(first).rejects.toThrow();
  });
});
