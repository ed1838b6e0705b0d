import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { ABSENT_IMAGE, providerContract } from '../../../test/support/provider-contract.js';
import { Credentials } from '../src/credentials.js';
import { ImageService } from '../src/image-service.js';
import { loadConfig } from '../src/config.js';
import { SandboxService } from '../src/sandboxes.js';
import { type ProviderCapability } from '../src/provider.js';
import { VolumeService } from '../src/volumes.js';
import { FakeProvider } from './fakes.js';

const ALL: ProviderCapability[] = ['images', 'suspend', 'snapshots', 'volumes', 'metrics'];

function subjectOf(provider: FakeProvider, capabilities: ProviderCapability[]) {
  let n = 0;
  provider.missingImages.add(ABSENT_IMAGE);
  // The image the specs name is on the fake engine, inspectable.
  provider.onBuild.set('any', []);
  return () => ({
    provider,
    spec: () => ({
      agentId: `a${++n}`,
      image: 'any',
      env: {},
      labels: { 'warren.sandbox': `a${n}`, 'warren.owner': 'contract' },
      settings: {} as never,
      daemonSecret: 's'.repeat(32),
    }),
    stopFromOutside: async (handle: string) => provider.die(handle),
    capabilities,
  });
}

describe('the fake provider keeps the provider contract', () => {
  providerContract(subjectOf(new FakeProvider(), ALL));
});

describe('a provider with the core only keeps the provider contract', () => {
  providerContract(subjectOf(new FakeProvider({ without: ALL }), []));
});

describe('the service answers NOT_SUPPORTED for what a provider lacks, and the provider is never asked', () => {
  let stateDir: string;
  const provider = new FakeProvider({ without: ALL });
  let sandboxes: SandboxService;

  beforeAll(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-core-only-'));
    sandboxes = new SandboxService({
      provider,
      credentials: Credentials.inMemory('k'),
      config: loadConfig({}, { stateDir }),
      probe: async () => undefined,
      images: new ImageService({ provider, settings: loadConfig({}, { stateDir }).images }),
    });
    await sandboxes.recover();
  });
  afterAll(async () => {
    await rm(stateDir, { recursive: true, force: true });
  });

  it('creates sandboxes from any image (the backend fetches images itself), and refuses pause, hibernate and usage', async () => {
    const { id } = await sandboxes.create({ image: 'python:3.12' });
    const refused = { code: 'NOT_SUPPORTED', message: expect.stringMatching(/the fake provider has no/) };
    await expect(sandboxes.pause(id)).rejects.toMatchObject(refused);
    await expect(sandboxes.hibernate(id)).rejects.toMatchObject(refused);
    await expect(sandboxes.usage(id)).rejects.toMatchObject(refused);
    expect(sandboxes.record(id).state).toBe('running');
    expect(sandboxes.freezer.enabled).toBe(false);
  });

  it('refuses image builds and removals, and lists no images', async () => {
    const images = new ImageService({ provider, settings: loadConfig({}, { stateDir }).images });
    await expect(images.build(Buffer.alloc(1024), { tag: 'mine:1' })).rejects.toMatchObject({ code: 'NOT_SUPPORTED' });
    await expect(images.remove('mine:1')).rejects.toMatchObject({ code: 'NOT_SUPPORTED' });
    expect(await images.list()).toEqual([]);
  });

  it('refuses named volumes', async () => {
    const volumes = new VolumeService({ sandboxes, provider, config: loadConfig({}, { stateDir }) });
    await expect(volumes.create({ tenant: 'default', keyId: 'key1' }, { name: 'data' })).rejects.toMatchObject({
      code: 'NOT_SUPPORTED',
      message: expect.stringMatching(/named volumes/),
    });
  });
});
