import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { collectRuntime, DockerProvider, loadConfig, type AgentRuntime } from '@warren/controller';
import { removeStateDir } from '../support/state-dir.js';

// The runtime volume is shared by every controller on an engine with the same build. The engine
// unpacks an archive over an existing file by removing it first, so a second fill of a volume in
// use pulls the loader from under sandboxes that are starting: CI once saw "exec
// /opt/warren/ld-linux.so failed: No such file or directory" when two test files' controllers
// started together. Each test here uses a runtime of its own name, so the volume starts empty.
describe('the runtime volume', () => {
  let stateDir: string;
  let image: string;
  let base: AgentRuntime;
  const volumes: string[] = [];
  const providers: DockerProvider[] = [];

  /** A runtime named for this test alone, with a made file that counts how often it was written. */
  function countedRuntime(): { runtime: AgentRuntime; fills: () => number; volume: string; lock: string } {
    let fills = 0;
    const hash = `test${randomBytes(6).toString('hex')}`;
    const runtime: AgentRuntime = {
      hash,
      files: [
        ...base.files,
        {
          name: 'fill-count',
          mode: 0o644,
          produce: async () => {
            fills++;
            return Buffer.from(String(fills));
          },
        },
      ],
    };
    volumes.push(`warren-runtime-${hash}`);
    return { runtime, fills: () => fills, volume: `warren-runtime-${hash}`, lock: `warren-runtime-fill-${hash}` };
  }

  function provider(): DockerProvider {
    const made = new DockerProvider({ stateDir });
    providers.push(made);
    return made;
  }

  /** Runs the runtime's own Node from the volume in a container of the default image; its stdout. */
  async function runNode(volume: string, script: string): Promise<string> {
    const docker = provider().docker;
    const container = await docker.createContainer({
      Image: image,
      Entrypoint: ['/opt/warren/ld-linux.so', '--library-path', '/opt/warren/lib', '/opt/warren/node', '-e', script],
      Cmd: [],
      User: '1000:1000',
      // A terminal, so the logs come back as written rather than in the engine's stream frames.
      Tty: true,
      HostConfig: { Mounts: [{ Type: 'volume', Source: volume, Target: '/opt/warren', ReadOnly: true }], NetworkMode: 'none' },
    });
    try {
      await container.start();
      const { StatusCode } = (await container.wait()) as { StatusCode: number };
      // String(): dockerode hands back a body that parses as JSON ("1") as that value.
      const logs = String(await container.logs({ stdout: true, stderr: true }));
      expect({ StatusCode, logs }).toEqual({ StatusCode: 0, logs: expect.any(String) });
      return logs;
    } finally {
      await container.remove({ force: true });
    }
  }

  /** True when the promise has not settled after `ms`. */
  async function stillPending(promise: Promise<unknown>, ms: number): Promise<boolean> {
    const pending = Symbol('pending');
    const first = await Promise.race([promise, new Promise((resolve) => setTimeout(() => resolve(pending), ms))]);
    return first === pending;
  }

  beforeAll(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-runtime-volume-'));
    const config = loadConfig({}, { stateDir });
    image = config.defaultImage;
    base = await collectRuntime(config.agentBundlePath);
  }, 60_000);
  afterAll(async () => {
    const docker = provider().docker;
    for (const volume of volumes) {
      await docker
        .getContainer(volume.replace('warren-runtime-', 'warren-runtime-fill-'))
        .remove({ force: true })
        .catch(() => undefined);
      await docker
        .getVolume(volume)
        .remove()
        .catch(() => undefined);
    }
    await removeStateDir(stateDir);
  });

  it('is filled once when several controllers start together, and the Node it holds runs', async () => {
    const { runtime, fills, volume } = countedRuntime();
    // Six at once: enough to meet the engines' own races too (Podman answers a volume or container it is
    // making or removing with a 500 of its own words for a moment).
    const names = await Promise.all([0, 1, 2, 3, 4, 5].map(() => provider().runtimeVolumes.ensure(runtime, image)));
    expect(names).toEqual(Array(6).fill(volume));
    expect(fills()).toBe(1);
    // A later controller finds it complete and leaves it alone.
    await provider().runtimeVolumes.ensure(runtime, image);
    expect(fills()).toBe(1);
    expect(await runNode(volume, "process.stdout.write(require('fs').readFileSync('/opt/warren/fill-count', 'utf8'))")).toBe('1');
  }, 120_000);

  it('waits while another controller holds the fill, and fills once it is gone', async () => {
    const { runtime, fills, volume, lock } = countedRuntime();
    const docker = provider().docker;
    await docker.createVolume({ Name: volume, Labels: { 'warren.runtime': runtime.hash } });
    // A controller mid-fill: its helper holds the lock, and no `.complete` yet.
    const holder = await docker.createContainer({
      name: lock,
      Image: image,
      Entrypoint: ['/bin/true'],
      HostConfig: { Mounts: [{ Type: 'volume', Source: volume, Target: '/opt/warren' }], NetworkMode: 'none' },
    });
    const waiting = provider().runtimeVolumes.ensure(runtime, image);
    expect(await stillPending(waiting, 1500)).toBe(true);
    expect(fills()).toBe(0);
    // That controller died without finishing: the waiter takes the fill over.
    await holder.remove({ force: true });
    expect(await waiting).toBe(volume);
    expect(fills()).toBe(1);
    expect(await runNode(volume, "process.stdout.write(require('fs').readFileSync('/opt/warren/.complete', 'utf8'))")).toBe(runtime.hash);
  }, 120_000);

  it('takes over a fill whose holder is older than the stale limit (a controller that died mid-fill)', async () => {
    const { runtime, fills, volume, lock } = countedRuntime();
    const docker = provider().docker;
    await docker.createVolume({ Name: volume, Labels: { 'warren.runtime': runtime.hash } });
    await docker.createContainer({
      name: lock,
      Image: image,
      Entrypoint: ['/bin/true'],
      HostConfig: { Mounts: [{ Type: 'volume', Source: volume, Target: '/opt/warren' }], NetworkMode: 'none' },
    });
    // A stale limit of 0: the holder made just now already counts as left behind.
    expect(await provider().runtimeVolumes.ensure(runtime, image, 0)).toBe(volume);
    expect(fills()).toBe(1);
    await expect(docker.getContainer(lock).inspect()).rejects.toMatchObject({ statusCode: 404 });
  }, 120_000);
});
