import { chown } from 'node:fs/promises';
import { CodedError, type SandboxSettings } from '@warren/protocol';
import type { VolumeCapability } from '../provider.js';
import type { SandboxContainerSpec } from './container-spec.js';
import { rethrow } from './engine-errors.js';
import type { DockerState } from './state.js';

/** The label of an engine volume that holds a named volume (its id). */
export const VOLUME_LABEL = 'warren.volume';

/** The engine's name of a named volume without a quota. */
function volumeName(id: string): string {
  return `warren-vol-${id}`;
}

/**
 * Named volumes on the Docker engine, as the provider's volumes capability: an ext4 image with a
 * quota where this host gives workspaces one, an engine volume otherwise.
 *
 * @example
 * const { quota } = await new DockerVolumes(state).create('v1', 1 << 30);
 */
export class DockerVolumes implements VolumeCapability {
  constructor(private readonly state: DockerState) {}

  /** The named volumes of a sandbox's settings as mounts (each volume with a quota mounted on the host first). */
  async mounts(settings: SandboxSettings): Promise<SandboxContainerSpec['volumes']> {
    const out: NonNullable<SandboxContainerSpec['volumes']> = [];
    const onHost = new Set((await this.state.volumeStore?.list()) ?? []);
    for (const v of settings.volumes ?? []) {
      const folder = onHost.has(v.id) ? await this.state.volumeStore?.attach(v.id) : undefined;
      out.push(
        folder !== undefined
          ? { type: 'bind', source: folder, target: v.path, readOnly: v.readOnly }
          : { type: 'volume', source: volumeName(v.id), target: v.path, readOnly: v.readOnly },
      );
    }
    return out;
  }

  /**
   * A named volume: an ext4 image of exactly `sizeBytes` where this host gives workspaces a quota
   * (the same store as theirs), otherwise an engine volume without a limit. Its root belongs to
   * the default sandbox user (1000:1000, as the host sees it under remap).
   */
  async create(id: string, sizeBytes: number): Promise<{ quota: boolean }> {
    const shift = this.state.remap ?? { uid: 0, gid: 0 };
    const owner = { uid: shift.uid + 1000, gid: shift.gid + 1000 };
    if (this.state.volumeStore?.describe().quota) {
      await this.state.volumeStore.create(id, owner, sizeBytes);
      return { quota: true };
    }
    const volume = await this.state.docker
      .createVolume({ Name: volumeName(id), Labels: { [VOLUME_LABEL]: id } })
      .catch((e: unknown) => rethrow(e, `create volume ${id}`));
    const mountpoint = (volume as unknown as { Mountpoint?: string }).Mountpoint;
    // The engine makes its root root's; hand it to the sandbox user where this host sees it.
    if (mountpoint) await chown(mountpoint, owner.uid, owner.gid).catch(() => undefined);
    return { quota: false };
  }

  async remove(id: string): Promise<void> {
    if ((await this.state.volumeStore?.list())?.includes(id)) await this.state.volumeStore?.remove(id);
    await this.state.docker
      .getVolume(volumeName(id))
      .remove()
      .catch((err: { statusCode?: number }) => {
        if (err.statusCode === 404) return;
        if (err.statusCode === 409) throw new CodedError('CONFLICT', `Volume ${id} is still mounted by a container; kill the sandboxes that mount it first.`);
        rethrow(err, `remove volume ${id}`);
      });
  }

  async usage(id: string): Promise<number | undefined> {
    return (await this.state.volumeStore?.usage(id).catch(() => undefined))?.usedBytes;
  }
}
