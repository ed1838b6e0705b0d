import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { parse, parseAllDocuments } from 'yaml';

const folder = path.resolve(import.meta.dirname, '../../../deploy/kubernetes');

interface Kustomization {
  resources: string[];
  namespace: string;
  images: { name: string; newName: string; newTag: string }[];
  replicas: { name: string; count: number }[];
}

/** Every container image the manifests name. */
async function imagesOf(files: string[]): Promise<string[]> {
  const images: string[] = [];
  for (const file of files)
    for (const doc of parseAllDocuments(await readFile(path.join(folder, file), 'utf8'))) {
      const object = doc.toJS() as { spec?: { template?: { spec?: { containers?: { image: string }[] } } } } | null;
      for (const container of object?.spec?.template?.spec?.containers ?? []) images.push(container.image);
    }
  return images;
}

describe('the Kubernetes manifests (deploy/kubernetes)', () => {
  it('are all in the kustomization, which sets the image, namespace, replicas and resources', async () => {
    const kustomization = parse(await readFile(path.join(folder, 'kustomization.yaml'), 'utf8')) as Kustomization;
    const manifests = (await readdir(folder)).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml');
    expect([...kustomization.resources].sort()).toEqual(manifests.sort());
    expect(kustomization.namespace).toBe('warren');
    expect(kustomization.replicas).toEqual([{ name: 'warren-controller', count: 2 }]);
    // The kustomization's image entry names exactly what the manifests name, so setting it takes effect.
    const images = await imagesOf(manifests);
    expect(images.length).toBeGreaterThan(0);
    for (const image of images) expect(kustomization.images.map((i) => i.name)).toContain(image.replace(/:[^/:]+$/, ''));
  });

  it('name no image a kubelet would pull from a registry account Warren does not control', async () => {
    const manifests = (await readdir(folder)).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml');
    // A name without a registry host (warren/controller) means docker.io; a host under .invalid resolves nowhere.
    for (const image of await imagesOf(manifests)) expect(image.split('/')[0]).toMatch(/\.invalid$/);
  });
});
