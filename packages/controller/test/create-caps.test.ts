import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { CodedError } from '@warren/protocol';
import { Credentials, loadConfig, SandboxService } from '../src/index.js';
import { FakeProvider } from './fakes.js';

/** A provider whose creates wait until the test lets them fail. */
function stallingProvider(): { provider: FakeProvider; waiting: (() => void)[] } {
  const provider = new FakeProvider();
  const waiting: (() => void)[] = [];
  provider.createGate = () => new Promise((_resolve, reject) => waiting.push(() => reject(new CodedError('UPSTREAM_UNAVAILABLE', 'released by the test'))));
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

describe('create caps', () => {
  it('refuses a create beyond maxConcurrentCreates with RESOURCE_EXHAUSTED, and counts again once they end', async () => {
    const { provider, waiting } = stallingProvider();
    const service = new SandboxService({ provider, credentials: Credentials.inMemory('k'), config: loadConfig({}, { stateDir, maxConcurrentCreates: 2 }) });
    await service.recover();
    const first = service.create({});
    const second = service.create({});
    await stalled(waiting, 2);
    await expect(service.create({})).rejects.toMatchObject({ code: 'RESOURCE_EXHAUSTED', message: expect.stringContaining('maxConcurrentCreates') });
    for (const release of waiting.splice(0)) release();
    await expect(first).rejects.toThrow('released by the test');
    await expect(second).rejects.toThrow('released by the test');
    const third = service.create({});
    await stalled(waiting, 1);
    expect(waiting).toHaveLength(1);
    waiting[0]!();
    await expect(third).rejects.toThrow('released by the test');
  });

  it('refuses a create beyond maxSandboxes (creates in flight count)', async () => {
    const { provider, waiting } = stallingProvider();
    const service = new SandboxService({ provider, credentials: Credentials.inMemory('k'), config: loadConfig({}, { stateDir, maxSandboxes: 1 }) });
    await service.recover();
    const first = service.create({});
    await stalled(waiting, 1);
    await expect(service.create({})).rejects.toMatchObject({ code: 'RESOURCE_EXHAUSTED', message: expect.stringContaining('maxSandboxes') });
    waiting[0]!();
    await expect(first).rejects.toThrow();
  });
});
