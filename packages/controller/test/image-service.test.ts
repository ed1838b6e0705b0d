import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { pack, type Header } from 'tar-stream';

/** The header fields a test names; tar-stream fills in the rest. */
type Entry = { header: Partial<Header> & { name: string }; body?: string };
import { BUILD_LABEL, ImageService } from '../src/image-service.js';
import { Credentials } from '../src/credentials.js';
import { loadConfig, type ImageSettings } from '../src/config.js';
import { SandboxService } from '../src/sandboxes.js';
import { FakeProvider } from './fakes.js';

const SETTINGS: ImageSettings = {
  allowedRegistries: ['docker.io'],
  pull: 'missing',
  maxPullMb: 100,
  maxBuildContextMb: 10,
  buildNetwork: 'none',
  timeoutMs: 60_000,
};

function service(settings: Partial<ImageSettings> = {}): { provider: FakeProvider; images: ImageService } {
  const provider = new FakeProvider();
  return { provider, images: new ImageService({ provider, settings: { ...SETTINGS, ...settings } }) };
}

/** A tar archive of the given entries (tar-stream writes what it is told, hostile names included). */
async function tar(entries: Entry[]): Promise<Buffer> {
  const p = pack();
  const chunks: Buffer[] = [];
  p.on('data', (c: unknown) => void chunks.push(c as Buffer));
  const ended = new Promise<void>((resolve) => p.on('end', () => resolve()));
  for (const { header, body } of entries) {
    if (body === undefined) p.entry(header);
    else p.entry(header, body);
  }
  p.finalize();
  await ended;
  return Buffer.concat(chunks);
}

const dockerfile = (text = 'FROM alpine:3.20\nRUN true\n') => ({ header: { name: 'Dockerfile', type: 'file' as const, mode: 0o644 }, body: text });

describe('ImageService.ensure', () => {
  it('uses an image already on the engine without pulling, whatever its registry', async () => {
    const { provider, images } = service({ allowedRegistries: [] });
    await expect(images.ensure('evil.com/already/here')).resolves.toEqual({ pulled: false });
    expect(provider.calls.filter((c) => c.startsWith('pull'))).toEqual([]);
  });

  it('pulls a missing image from an allowed registry by its canonical name', async () => {
    const { provider, images } = service();
    provider.missingImages.add('python:3.12');
    const seen: string[] = [];
    await expect(images.ensure('python:3.12', { onProgress: (p) => seen.push(p.status) })).resolves.toEqual({ pulled: true });
    expect(provider.pulled).toEqual(['docker.io/library/python:3.12']);
    expect(seen).toEqual(['Pulling fs layer', 'Pull complete']);
  });

  it('pulls by digest alone when a reference has a tag and a digest', async () => {
    const { provider, images } = service();
    const ref = `alpine:3@sha256:${'c'.repeat(64)}`;
    provider.missingImages.add(ref);
    await images.ensure(ref);
    expect(provider.pulled).toEqual([`docker.io/library/alpine@sha256:${'c'.repeat(64)}`]);
  });

  it('refuses a missing image of another registry before any pull', async () => {
    const { provider, images } = service();
    provider.missingImages.add('evil.com/library/alpine');
    await expect(images.ensure('evil.com/library/alpine')).rejects.toMatchObject({ code: 'IMAGE_NOT_ALLOWED', details: { registry: 'evil.com' } });
    expect(provider.calls.filter((c) => c.startsWith('pull'))).toEqual([]);
  });

  it('refuses an invalid reference before it asks the engine anything', async () => {
    const { provider, images } = service();
    await expect(images.ensure('Alpine')).rejects.toMatchObject({ code: 'IMAGE_NOT_ALLOWED' });
    expect(provider.calls).toEqual([]);
  });

  it('pulls nothing with pull: never', async () => {
    const { provider, images } = service({ pull: 'never' });
    provider.missingImages.add('alpine');
    await expect(images.ensure('alpine')).rejects.toThrow(/images.pull is never/);
    expect(provider.pulled).toEqual([]);
  });

  it('refuses a missing image id (an id cannot be pulled)', async () => {
    const { provider, images } = service();
    const id = `sha256:${'d'.repeat(64)}`;
    provider.missingImages.add(id);
    await expect(images.ensure(id)).rejects.toMatchObject({ code: 'IMAGE_NOT_ALLOWED' });
  });

  it('pulls once for concurrent requests of the same missing image, and each sees progress', async () => {
    const { provider, images } = service();
    provider.missingImages.add('alpine').add('docker.io/library/alpine:latest').add('alpine:latest');
    let release!: () => void;
    provider.pullGate = () => new Promise((resolve) => (release = resolve));
    const progress: string[][] = [[], [], []];
    const all = Promise.all([
      images.ensure('alpine', { onProgress: (p) => progress[0]!.push(p.status) }),
      images.ensure('docker.io/library/alpine:latest', { onProgress: (p) => progress[1]!.push(p.status) }),
      images.ensure('alpine:latest', { onProgress: (p) => progress[2]!.push(p.status) }),
    ]);
    while (!release) await new Promise((r) => setTimeout(r, 1));
    release();
    await all;
    expect(provider.calls.filter((c) => c.startsWith('pull'))).toEqual(['pull docker.io/library/alpine:latest']);
    for (const seen of progress) expect(seen).toContain('Pull complete');
  });

  it('shares a failure with every waiter, and the next request pulls again', async () => {
    const { provider, images } = service();
    provider.missingImages.add('alpine');
    let fail!: (err: Error) => void;
    provider.pullGate = () => new Promise((_resolve, reject) => (fail = reject));
    const a = images.ensure('alpine');
    const b = images.ensure('alpine');
    while (!fail) await new Promise((r) => setTimeout(r, 1));
    const { CodedError } = await import('@warren/protocol');
    fail(new CodedError('IMAGE_TOO_LARGE', 'too large'));
    await expect(a).rejects.toMatchObject({ code: 'IMAGE_TOO_LARGE' });
    await expect(b).rejects.toMatchObject({ code: 'IMAGE_TOO_LARGE' });
    provider.pullGate = undefined;
    await images.ensure('alpine');
    expect(provider.calls.filter((c) => c.startsWith('pull'))).toHaveLength(2);
  });

  it('turns a pull stopped by images.timeoutMs into IMAGE_PULL_FAILED naming the setting', async () => {
    const { provider, images } = service({ timeoutMs: 20 });
    provider.missingImages.add('alpine');
    const { CodedError } = await import('@warren/protocol');
    provider.pullGate = (_image, options) =>
      new Promise((_resolve, reject) => options.signal?.addEventListener('abort', () => reject(new CodedError('CANCELLED', 'stopped'))));
    await expect(images.ensure('alpine')).rejects.toThrow(/images\.timeoutMs/);
  });
});

describe('ImageService.build', () => {
  it('builds a checked context, labelled, on no network, and pulls its missing base from an allowed registry first', async () => {
    const { provider, images } = service();
    provider.missingImages.add('alpine:3.20');
    const output: string[] = [];
    const built = await images.build(
      await tar([dockerfile(), { header: { name: 'app/a.txt', type: 'file' }, body: 'a' }]),
      { tag: 'tmpl' },
      {
        onOutput: (t) => output.push(t),
      },
    );
    expect(built.image).toBe('tmpl:latest');
    expect(provider.pulled).toEqual(['docker.io/library/alpine:3.20']);
    expect(provider.builds[0]!.options).toMatchObject({ tag: 'tmpl:latest', dockerfile: 'Dockerfile', network: 'none' });
    expect(provider.builds[0]!.options.labels[BUILD_LABEL]).toBeDefined();
    expect(output.join('')).toMatch(/Pulled alpine:3.20[\s\S]*Step 1\/1/);
  });

  it.each<[string, Entry[]]>([
    ['a link that leaves the context', [{ header: { name: 'escape', type: 'symlink', linkname: '../../etc/passwd' } }]],
    ['an absolute link', [{ header: { name: 'abs', type: 'symlink', linkname: '/etc/shadow' } }]],
    ['a hard link', [{ header: { name: 'hard', type: 'link', linkname: 'Dockerfile' } }]],
    ['an absolute name', [{ header: { name: '/etc/cron.d/x', type: 'file' }, body: 'x' }]],
    ['a .. name', [{ header: { name: '../outside', type: 'file' }, body: 'x' }]],
    ['a device', [{ header: { name: 'dev', type: 'character-device', devmajor: 1, devminor: 3 } }]],
    ['a FIFO', [{ header: { name: 'fifo', type: 'fifo' } }]],
    ['a setuid file', [{ header: { name: 'suid', type: 'file', mode: 0o4755 }, body: 'x' }]],
    [
      'a file below a link of the same archive',
      [{ header: { name: 'l', type: 'symlink', linkname: '.' } }, { header: { name: 'l/x', type: 'file' }, body: 'x' }],
    ],
  ])('refuses a context with %s before the engine sees it', async (_why, extra) => {
    const { provider, images } = service();
    await expect(images.build(await tar([dockerfile(), ...extra]), { tag: 'tmpl' })).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
    expect(provider.builds).toEqual([]);
  });

  it('packs a link that stays inside the context as a link', async () => {
    const { provider, images } = service();
    await images.build(
      await tar([dockerfile(), { header: { name: 'a', type: 'file' }, body: 'a' }, { header: { name: 'b', type: 'symlink', linkname: 'a' } }]),
      {
        tag: 'tmpl',
      },
    );
    expect(provider.builds).toHaveLength(1);
  });

  it.each(['../Dockerfile', '/Dockerfile', 'sub/../../Dockerfile', '.'])('refuses the Dockerfile path %j outside the context', async (file) => {
    const { provider, images } = service();
    await expect(images.build(await tar([dockerfile()]), { tag: 'tmpl', dockerfile: file })).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
    expect(provider.builds).toEqual([]);
  });

  it('refuses a Dockerfile that is a link, or missing', async () => {
    const { images } = service();
    const linked = await tar([
      { header: { name: 'real', type: 'file' }, body: 'FROM alpine' },
      { header: { name: 'Dockerfile', type: 'symlink', linkname: 'real' } },
    ]);
    await expect(images.build(linked, { tag: 'tmpl' })).rejects.toThrow(/is a symlink; it must be a regular file/);
    await expect(images.build(await tar([dockerfile()]), { tag: 'tmpl', dockerfile: 'other/Dockerfile' })).rejects.toThrow(/has no file 'other\/Dockerfile'/);
  });

  it('refuses a base image from a registry that is not allowed, before pulling or building', async () => {
    const { provider, images } = service();
    provider.missingImages.add('evil.com/base');
    await expect(images.build(await tar([dockerfile('FROM evil.com/base\n')]), { tag: 'tmpl' })).rejects.toMatchObject({ code: 'IMAGE_NOT_ALLOWED' });
    await expect(images.build(await tar([dockerfile('FROM alpine\nCOPY --from=evil.com/base /x /x\n')]), { tag: 'tmpl' })).rejects.toMatchObject({
      code: 'IMAGE_NOT_ALLOWED',
    });
    expect(provider.pulled).toEqual([]);
    expect(provider.builds).toEqual([]);
  });

  it('refuses a Dockerfile the engine would fetch from (the rules are in dockerfile-check.test.ts), before anything is pulled or built', async () => {
    const { provider, images } = service();
    provider.missingImages.add('alpine');
    await expect(images.build(await tar([dockerfile('FROM alpine\nARG U=http://10.0.0.1/x\nADD $U /x\n')]), { tag: 'tmpl' })).rejects.toMatchObject({
      code: 'INVALID_PARAMS',
    });
    expect(provider.pulled).toEqual([]);
    expect(provider.builds).toEqual([]);
  });

  it('refuses a base image whose ONBUILD triggers would fetch: at once when it is on the engine, after the pull when it was not', async () => {
    const { provider, images } = service();
    provider.onBuild.set('base:1', ['RUN true', 'ADD http://10.0.0.1/x /x']);
    let started = false;
    await expect(images.build(await tar([dockerfile('FROM base:1\n')]), { tag: 'tmpl' }, { onStart: () => (started = true) })).rejects.toMatchObject({
      code: 'INVALID_PARAMS',
      details: { image: 'base:1' },
    });
    expect(started).toBe(false);
    provider.missingImages.add('pulled:1');
    provider.pullGate = async () => void provider.onBuild.set('pulled:1', ['COPY --from=10.0.0.1:5000/x /a /b']);
    await expect(images.build(await tar([dockerfile('FROM pulled:1\n')]), { tag: 'tmpl' })).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
    expect(provider.pulled).toEqual(['docker.io/library/pulled:1']);
    expect(provider.builds).toEqual([]);
    // Triggers that fetch nothing are run by the engine as they are.
    provider.onBuild.set('base:2', ['COPY . /app', 'RUN make']);
    await expect(images.build(await tar([dockerfile('FROM base:2\n')]), { tag: 'tmpl' })).resolves.toMatchObject({ image: 'tmpl:latest' });
  });

  it('does not remove an image a build under way starts from, so the engine never pulls it back unchecked', async () => {
    const { provider, images } = service();
    provider.imageLabels.set('base:1', { [BUILD_LABEL]: 'x' });
    let release!: () => void;
    provider.buildGate = () => new Promise<void>((resolve) => (release = resolve));
    const building = images.build(await tar([dockerfile('FROM base:1\n')]), { tag: 'child' });
    while (provider.builds.length === 0) await new Promise((resolve) => setImmediate(resolve));
    await expect(images.remove('base:1')).rejects.toMatchObject({ code: 'CONFLICT' });
    release();
    await building;
    await images.remove('base:1');
    expect(provider.imageLabels.has('base:1')).toBe(false);
  });

  it('does not replace an image Warren did not build', async () => {
    const { provider, images } = service();
    provider.imageLabels.set('python:latest', { maintainer: 'someone' });
    await expect(images.build(await tar([dockerfile()]), { tag: 'python' })).rejects.toMatchObject({ code: 'CONFLICT' });
    provider.imageLabels.set('mine:latest', { [BUILD_LABEL]: 'x' });
    await expect(images.build(await tar([dockerfile()]), { tag: 'mine' })).resolves.toMatchObject({ image: 'mine:latest' });
    // The earlier build of the name, now nameless, is removed.
    expect(provider.calls).toContain(`removeImage sha256:${'e'.repeat(64)}`);
  });

  it('refuses image names with a registry host', async () => {
    const { images } = service();
    await expect(images.build(await tar([dockerfile()]), { tag: 'docker.io/library/alpine' })).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
  });

  it('lists and removes only images Warren built', async () => {
    const { provider, images } = service();
    provider.imageLabels.set('theirs:1', {});
    provider.imageLabels.set('mine:1', { [BUILD_LABEL]: 'x' });
    expect((await images.list()).map((i) => i.tags)).toEqual([['mine:1']]);
    await expect(images.remove('theirs:1')).rejects.toMatchObject({ code: 'FORBIDDEN' });
    await expect(images.remove('nothing:1')).rejects.toMatchObject({ code: 'NOT_FOUND' });
    await images.remove('mine:1');
    expect(provider.imageLabels.has('mine:1')).toBe(false);
    expect(provider.imageLabels.has('theirs:1')).toBe(true);
  });
});

describe('creates of images the engine lacks', () => {
  let stateDir: string;
  beforeEach(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-images-'));
  });
  afterEach(async () => {
    await rm(stateDir, { recursive: true, force: true });
  });
  const sandboxService = (provider: FakeProvider) =>
    new SandboxService({ provider, credentials: Credentials.inMemory('k'), config: loadConfig({}, { stateDir }), probe: async () => undefined });

  it('concurrent creates of one missing image wait for one pull, then each starts a sandbox of it', async () => {
    const provider = new FakeProvider();
    provider.missingImages.add('node:20');
    let release!: () => void;
    provider.pullGate = () => new Promise((resolve) => (release = resolve));
    const sandboxes = sandboxService(provider);
    await sandboxes.recover();
    const creates = [sandboxes.create({ image: 'node:20' }), sandboxes.create({ image: 'node:20' })];
    while (!release) await new Promise((r) => setTimeout(r, 1));
    expect(provider.calls.filter((c) => c.startsWith('create'))).toEqual([]);
    release();
    const created = await Promise.all(creates);
    expect(created.map((c) => c.image)).toEqual(['node:20', 'node:20']);
    expect(provider.calls.filter((c) => c.startsWith('pull'))).toEqual(['pull docker.io/library/node:20']);
  });

  it('a create of an image from a registry that is not allowed is refused before any pull or container', async () => {
    const provider = new FakeProvider();
    provider.missingImages.add('localhost:5000/x');
    const sandboxes = sandboxService(provider);
    await sandboxes.recover();
    await expect(sandboxes.create({ image: 'localhost:5000/x' })).rejects.toMatchObject({ code: 'IMAGE_NOT_ALLOWED' });
    expect(provider.calls.filter((c) => c.startsWith('pull') || c.startsWith('create'))).toEqual([]);
  });
});

describe('build slots', () => {
  it('run a few builds at once, queue a few, and refuse the rest with a retry time', async () => {
    const capped = new ImageService({ provider: new FakeProvider(), settings: SETTINGS, buildsAtOnce: 1, buildsWaiting: 1 });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const order: string[] = [];
    const first = capped.withBuildSlot(async () => {
      order.push('first');
      await gate;
    });
    const second = capped.withBuildSlot(async () => void order.push('second'));
    await expect(capped.withBuildSlot(async () => undefined)).rejects.toMatchObject({ code: 'RESOURCE_EXHAUSTED', details: { retryAfterSeconds: 60 } });
    expect(order).toEqual(['first']);
    release();
    await Promise.all([first, second]);
    expect(order).toEqual(['first', 'second']);
  });
});
