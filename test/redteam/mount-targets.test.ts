import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { Images, Sandbox, Volumes } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';

/** Every spelling of the daemon's folders and the folders above them that a create request can give. */
const HOSTILE_TARGETS = [
  '/',
  '/opt',
  '/opt/',
  '/run',
  '//run//',
  '/run/warren',
  '/run/warren/cpu',
  '/run/warren-egress',
  '/var/run',
  '/var/run/warren',
  '/var/lock/../run',
  '/data/../opt',
  '/run/warren-egress/..',
];

/**
 * A create request against the daemon's folders: a named volume or a host folder mounted at or
 * above `/opt/warren` or `/run/warren`, by any spelling, would hand the sandbox user the daemon's
 * runtime or socket. Each is refused before anything is made; a mount target that only the
 * image's own links lead there (`/data -> /run`) is caught by the daemon, which refuses to run
 * under it, and the create fails with nothing left behind.
 */
describe("red team: mounts over the daemon's folders", () => {
  let warren: TestController;
  let mountRoot: string;

  beforeAll(async () => {
    mountRoot = await mkdtemp(path.join(os.tmpdir(), 'warren-mount-targets-'));
    warren = await startTestController({ config: { allowedMountRoots: [mountRoot] } });
  }, 60_000);

  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    await rm(mountRoot, { recursive: true, force: true });
  }, 60_000);

  const options = () => ({ baseUrl: warren.url, apiKey: warren.apiKey, ttlSeconds: 300 });
  const docker = new Docker();
  /** Containers, of any state, that mount the host folder `source` or run `image`. */
  const containersWith = async (match: { source?: string; image?: string }) =>
    (await docker.listContainers({ all: true })).filter((c) => c.Image === match.image || c.Mounts.some((m) => m.Source === match.source));

  it('refuses volumes, host mounts and workspaces at or above those folders, by every spelling, and makes nothing', async () => {
    const volumes = new Volumes(options());
    await volumes.create({ name: 'over' });
    try {
      for (const target of HOSTILE_TARGETS) {
        await expect(Sandbox.create({ ...options(), volumes: [{ name: 'over', path: target }] })).rejects.toMatchObject({ code: 'FORBIDDEN' });
        await expect(Sandbox.create({ ...options(), mounts: [{ hostPath: mountRoot, path: target }] })).rejects.toMatchObject({ code: 'FORBIDDEN' });
        await expect(Sandbox.create({ ...options(), workspace: target })).rejects.toMatchObject({
          code: expect.stringMatching(/^(FORBIDDEN|INVALID_PARAMS)$/),
        });
      }
      expect(warren.controller.sandboxes.list()).toEqual([]);
      expect(await containersWith({ source: mountRoot })).toEqual([]);
      expect((await volumes.get('over')).sandboxes).toEqual([]);
    } finally {
      await volumes.delete('over');
    }
  }, 120_000);

  it("refuses to run under a mount that only the image's own link leads over /run, and leaves nothing behind", async () => {
    const context = await mkdtemp(path.join(os.tmpdir(), 'warren-linked-image-'));
    try {
      await writeFile(path.join(context, 'Dockerfile'), 'FROM warren/sandbox:latest\nUSER 0\nRUN ln -s /run /data\n');
      const { image } = await new Images(options()).build({ context, tag: 'warren-redteam/linked-run:1' });
      const volumes = new Volumes(options());
      await volumes.create({ name: 'linked' });
      try {
        // The request names /data, which the plan cannot know is /run in this image.
        const refused = await Sandbox.create({ ...options(), image, volumes: [{ name: 'linked', path: '/data' }] }).then(
          (s) => s.kill().then(() => 'created'),
          (err: { code?: string; message?: string }) => `${err.code}: ${err.message}`,
        );
        expect(refused).toMatch(/covers the daemon's folder/);
        expect(warren.controller.sandboxes.list()).toEqual([]);
        expect(await containersWith({ image })).toEqual([]);
        // The same image with the volume elsewhere is an ordinary sandbox.
        const fine = await Sandbox.create({ ...options(), image, volumes: [{ name: 'linked', path: '/mnt/linked' }] });
        expect((await fine.commands.run('echo ok')).stdout).toBe('ok\n');
        await fine.kill();
      } finally {
        await volumes.delete('linked');
      }
    } finally {
      await rm(context, { recursive: true, force: true });
    }
  }, 240_000);
});
