import { createHash } from 'node:crypto';
import path from 'node:path';
import { packTar } from '../tar.js';
import { runtimeEntries, type AgentRuntime } from '../runtime.js';
import { RUNTIME_IN_IMAGE } from './pod-spec.js';

/** The runtime image's name for a runtime build: what the Kubernetes provider runs its init container from by default. */
export function runtimeImageName(runtime: AgentRuntime, repository = 'warren/runtime'): string {
  return `${repository}:${runtime.hash}`;
}

/**
 * Warren's runtime as an image archive in the format `docker save` writes (`docker load`,
 * `ctr images import` and `skopeo copy docker-archive:` read it): one layer holding the runtime
 * under {@link RUNTIME_IN_IMAGE}, no shell and nothing else, since the init container copies it
 * with the runtime's own Node. Made without Docker or a registry, so an operator can load it on
 * nodes or push it wherever the cluster pulls from.
 *
 * @example
 * await writeFile('runtime.tar', await runtimeImageTar(runtime, runtimeImageName(runtime)));
 * // ctr -n k8s.io images import runtime.tar   (or: docker load -i runtime.tar && docker push ...)
 */
export async function runtimeImageTar(runtime: AgentRuntime, tag: string): Promise<Buffer> {
  const root = RUNTIME_IN_IMAGE.replace(/^\//, '');
  const folders = new Set<string>([`${root}/`, `${root}/lib/`]);
  for (const file of runtime.files) for (let dir = path.posix.dirname(file.name); dir !== '.'; dir = path.posix.dirname(dir)) folders.add(`${root}/${dir}/`);
  const mtime = new Date(0);
  const layer = await packTar([
    ...[...folders].sort().map((name) => ({ header: { name, type: 'directory' as const, mode: 0o755, mtime } })),
    ...(await runtimeEntries(runtime, (file) => ({ name: `${root}/${file.name}`, mode: file.mode, mtime }))),
    { header: { name: `${root}/.complete`, mode: 0o644, mtime }, content: runtime.hash },
  ]);
  const diffId = createHash('sha256').update(layer).digest('hex');
  const config = JSON.stringify({
    architecture: process.arch === 'x64' ? 'amd64' : process.arch,
    os: 'linux',
    config: { Labels: { 'warren.runtime': runtime.hash } },
    rootfs: { type: 'layers', diff_ids: [`sha256:${diffId}`] },
  });
  const configName = `${createHash('sha256').update(config).digest('hex')}.json`;
  const manifest = JSON.stringify([{ Config: configName, RepoTags: [tag], Layers: [`${diffId}/layer.tar`] }]);
  return packTar([
    { header: { name: 'manifest.json', mode: 0o644, mtime }, content: manifest },
    { header: { name: configName, mode: 0o644, mtime }, content: config },
    { header: { name: `${diffId}/`, type: 'directory', mode: 0o755, mtime } },
    { header: { name: `${diffId}/layer.tar`, mode: 0o644, mtime }, content: layer },
  ]);
}
