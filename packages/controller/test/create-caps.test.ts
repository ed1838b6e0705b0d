import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { CodedError } from '@warren/protocol';
import { Credentials, DockerProvider, loadConfig, SandboxService } from '../src/index.js';

/** A Docker adapter whose container starts wait until the test lets them fail. */
class StallingDocker extends DockerProvider {
  readonly waiting: (() => void)[] = [];
  override startSandbox(): Promise<string> {
    return new Promise((_resolve, reject) => this.waiting.push(() => reject(new CodedError('UPSTREAM_UNAVAILABLE', 'released by the test'))));
  }
  override runtimeInfo() {
    return Promise.resolve([{ name: 'runc', args: [] }]);
  }
  override listSandboxes() {
    return Promise.resolve([]);
  }
}

/** Waits until `count` container starts are stalled (each create first prepares its socket folder on disk); the test timeout bounds it. */
async function stalled(docker: StallingDocker, count: number): Promise<void> {
  while (docker.waiting.length < count) await new Promise((r) => setTimeout(r, 5));
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
    const docker = new StallingDocker();
    const service = new SandboxService(docker, Credentials.inMemory('k'), loadConfig({}, { stateDir, maxConcurrentCreates: 2 }), 'runtime');
    await service.recover();
    const first = service.create({});
    const second = service.create({});
    await stalled(docker, 2);
    await expect(service.create({})).rejects.toMatchObject({ code: 'RESOURCE_EXHAUSTED', message: expect.stringContaining('maxConcurrentCreates') });
    for (const release of docker.waiting.splice(0)) release();
    await expect(first).rejects.toThrow('released by the test');
    await expect(second).rejects.toThrow('released by the test');
    const third = service.create({});
    await stalled(docker, 1);
    expect(docker.waiting).toHaveLength(1);
    docker.waiting[0]!();
    await expect(third).rejects.toThrow('released by the test');
  });

  it('refuses a create beyond maxSandboxes (creates in flight count)', async () => {
    const docker = new StallingDocker();
    const service = new SandboxService(docker, Credentials.inMemory('k'), loadConfig({}, { stateDir, maxSandboxes: 1 }), 'runtime');
    await service.recover();
    const first = service.create({});
    await stalled(docker, 1);
    await expect(service.create({})).rejects.toMatchObject({ code: 'RESOURCE_EXHAUSTED', message: expect.stringContaining('maxSandboxes') });
    docker.waiting[0]!();
    await expect(first).rejects.toThrow();
  });
});
