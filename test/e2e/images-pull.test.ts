import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { createLogger, ImageService } from '@warren/controller';
import { Images, Sandbox, type PullProgressEvent } from '@warren/sdk';
import { codeOf } from '../support/files.js';
import { startTestController, type TestController } from '../support/fixtures.js';
import { buildRandomImage, imagePresent, pushImage, startRegistry, type TestRegistry } from '../support/registry.js';

const docker = new Docker();
/** Every image this file makes carries it, so afterAll removes them all. */
const LABEL = { 'warren.e2e': 'images-pull' };
const run = randomBytes(4).toString('hex');

async function removeImage(name: string): Promise<void> {
  await docker
    .getImage(name)
    .remove({ force: true })
    .catch(() => undefined);
}

/** A small image with /bin/sh to push: the test busybox image when scripts/build-images made it, else the default image. */
async function sourceImage(): Promise<string> {
  return (await imagePresent(docker, 'warren/test-busybox:latest')) ? 'warren/test-busybox:latest' : 'warren/sandbox:latest';
}

// Pulls through a real controller from a registry the test starts (Debian's docker-registry on 127.0.0.1).
describe('images on demand, from a local registry', () => {
  let registry: TestRegistry;
  let warren: TestController;
  const lines: { msg?: string; image?: string }[] = [];
  const made: string[] = [];

  beforeAll(async () => {
    registry = await startRegistry();
    const logger = createLogger({ level: 'info', destination: { write: (line: string) => void lines.push(JSON.parse(line) as never) } });
    warren = await startTestController({
      logger,
      config: {
        images: {
          allowedRegistries: [`${registry.host}/warren-e2e`],
          pull: 'missing',
          maxPullMb: 1024,
          maxBuildContextMb: 16,
          buildNetwork: 'none',
          timeoutMs: 120_000,
        },
      },
    });
  });
  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    for (const name of made) await removeImage(name);
    const labelled = await docker.listImages({ filters: { label: ['warren.e2e=images-pull'] } });
    for (const image of labelled) await removeImage(image.Id);
    await registry?.[Symbol.asyncDispose]();
  });

  /** Pushes `source` to the registry as `name` and removes the local name, so the engine lacks it. */
  async function publish(source: string, name: string): Promise<void> {
    made.push(name);
    const [repo, tag] = [name.slice(0, name.lastIndexOf(':')), name.slice(name.lastIndexOf(':') + 1)];
    await docker.getImage(source).tag({ repo, tag });
    await pushImage(docker, name);
    await removeImage(name);
    expect(await imagePresent(docker, name)).toBe(false);
  }

  it('a create of a missing image pulls it once for concurrent creates, and the sandboxes run', async () => {
    const image = `${registry.host}/warren-e2e/shell:${run}`;
    await publish(await sourceImage(), image);
    const options = { baseUrl: warren.url, apiKey: warren.apiKey, image };
    // One create shows the pull's progress (it pulls first); the other just waits for the same pull.
    const seen: string[] = [];
    const created = await Promise.all([Sandbox.create({ ...options, onPullProgress: (e) => seen.push(e.status) }), Sandbox.create(options)]);
    try {
      for (const sandbox of created) {
        expect(await sandbox.commands.run(['sh', '-c', 'echo pulled'])).toMatchObject({ exitCode: 0, stdout: 'pulled\n' });
        expect((await sandbox.info()).image).toBe(image);
      }
    } finally {
      for (const sandbox of created) await sandbox.kill().catch(() => undefined);
    }
    expect(await imagePresent(docker, image)).toBe(true);
    const started = lines.filter((l) => l.msg === 'image.pull.started' && l.image === image);
    expect(started).toHaveLength(1);
    expect(lines.some((l) => l.msg === 'image.pulled' && l.image === image)).toBe(true);
    expect(seen.length).toBeGreaterThan(0);
  });

  it('Images.pull streams the layer progress of a real download', async () => {
    const image = `${registry.host}/warren-e2e/blob:${run}`;
    await buildRandomImage(docker, image, 2 * 1024 * 1024, LABEL);
    await publish(image, image);
    const events: PullProgressEvent[] = [];
    const images = new Images({ baseUrl: warren.url, apiKey: warren.apiKey });
    await expect(images.pull(image, { onProgress: (e) => events.push(e) })).resolves.toEqual({ image });
    const statuses = events.map((e) => e.status);
    expect(statuses).toContain('Pull complete');
    expect(events.some((e) => e.status === 'Downloading' && typeof e.total === 'number' && e.total > 1024 * 1024)).toBe(true);
    expect(await imagePresent(docker, image)).toBe(true);
  });

  it('a pull over images.maxPullMb is stopped with IMAGE_TOO_LARGE and leaves no image', async () => {
    const image = `${registry.host}/warren-e2e/large:${run}`;
    await buildRandomImage(docker, image, 3 * 1024 * 1024, LABEL);
    await publish(image, image);
    const capped = new ImageService({
      provider: warren.controller.sandboxes.provider,
      settings: { ...warren.controller.config.images, maxPullMb: 1 },
    });
    await expect(capped.ensure(image)).rejects.toMatchObject({ code: 'IMAGE_TOO_LARGE' });
    expect(await imagePresent(docker, image)).toBe(false);
    // The same image pulls under the controller's own cap: nothing half-pulled stood in the way.
    await new Images({ baseUrl: warren.url, apiKey: warren.apiKey }).pull(image);
    expect(await imagePresent(docker, image)).toBe(true);
  });

  it('refuses an image outside the allowed path before any request reaches the registry', async () => {
    const before = registry.requests();
    for (const image of [`${registry.host}/other/x:1`, `${registry.host}/warren-e2e-evil/x:1`, `localhost:${registry.host.split(':')[1]}/warren-e2e/x:1`]) {
      expect(await codeOf(Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, image }))).toBe('IMAGE_NOT_ALLOWED');
    }
    expect(registry.requests()).toBe(before);
    // The count does see requests: an allowed image that is not there is asked for.
    await codeOf(new Images({ baseUrl: warren.url, apiKey: warren.apiKey }).pull(`${registry.host}/warren-e2e/absent:${run}`));
    expect(registry.requests()).toBeGreaterThan(before);
  });

  it('answers IMAGE_PULL_FAILED for an image the registry does not have, and leaves nothing', async () => {
    const image = `${registry.host}/warren-e2e/missing:${run}`;
    expect(await codeOf(new Images({ baseUrl: warren.url, apiKey: warren.apiKey }).pull(image))).toBe('IMAGE_PULL_FAILED');
    expect(await imagePresent(docker, image)).toBe(false);
  });
});
