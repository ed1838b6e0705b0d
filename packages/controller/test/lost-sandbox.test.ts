import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from '@jest/globals';
import { Credentials } from '../src/credentials.js';
import { loadConfig } from '../src/config.js';
import { SandboxService } from '../src/sandboxes.js';
import { FakeClock, FakeProvider } from './fakes.js';

/** A backend that lost a sandbox's unit (a Kubernetes node went away) and says why. */
class LosingProvider extends FakeProvider {
  readonly lost = new Map<string, string>();
  lostReason(handle: string): string | undefined {
    return this.lost.get(handle);
  }
  /** A backend that cannot start a stopped unit again, as on Kubernetes: it has no suspend capability. */
  constructor() {
    super({ without: ['suspend'] });
  }
  readonly alternatives = { suspend: 'a pod that stopped cannot run again with its files' };
}

const dirs: string[] = [];
afterEach(async () => {
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

let clock: FakeClock;

async function service(provider: FakeProvider): Promise<SandboxService> {
  clock = new FakeClock();
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-lost-'));
  dirs.push(stateDir);
  const sandboxes = new SandboxService({
    provider,
    credentials: Credentials.inMemory('k', Buffer.alloc(32, 1)),
    config: loadConfig({}, { stateDir }),
    clock,
    probe: async () => undefined,
  });
  await sandboxes.recover();
  return sandboxes;
}

describe('a sandbox the backend lost', () => {
  it('is removed, and calls to it say it was lost and why rather than that it never existed', async () => {
    const provider = new LosingProvider();
    const sandboxes = await service(provider);
    const { id } = await sandboxes.create({});
    const handle = sandboxes.table.require(id).containerId;
    provider.lost.set(handle, 'its node node3 stopped answering and Kubernetes evicted the pod');
    provider.sandboxes.delete(handle);
    sandboxes.supervisor.event(handle, 'destroy');
    await sandboxes.refreshStates();
    expect(sandboxes.table.has(id)).toBe(false);
    const refusal = await sandboxes.get(id).catch((e: unknown) => e);
    expect(refusal).toMatchObject({ code: 'SANDBOX_NOT_FOUND', message: expect.stringMatching(/was lost: its node node3 stopped answering/) });
    await expect(sandboxes.get('never-was')).rejects.toMatchObject({ message: expect.stringMatching(/never existed/) });
  });

  it('stays exited without retries when the backend cannot start it again (NOT_SUPPORTED)', async () => {
    const provider = new LosingProvider();
    const sandboxes = await service(provider);
    const { id } = await sandboxes.create({});
    const record = sandboxes.table.require(id);
    const restarts: (string | null)[] = [];
    const supervised = sandboxes.supervisor as unknown as { options: { onRestart?: (id: string, error: string | null) => void } };
    supervised.options.onRestart = (_id, error) => restarts.push(error);
    provider.sandboxes.get(record.containerId)!.state = 'exited';
    record.state = 'exited';
    const pending = sandboxes.restartStopped();
    await clock.advance(0);
    await pending;
    expect(record.state).toBe('exited');
    expect(restarts).toEqual([
      expect.stringMatching(
        /Cannot start a stopped sandbox again: the fake provider has no way to freeze or stop a sandbox with its files kept; a pod that stopped cannot run again/,
      ),
    ]);
    expect(sandboxes.willRestart(id)).toBe(false);
  });
});
