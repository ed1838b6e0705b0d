import type Docker from 'dockerode';
import type { Logger } from '../logger.js';
import { RUNTIME_DIR, runtimeTar, type AgentRuntime } from '../runtime.js';
import { nameInUse, noSuchContainer, rethrow } from './engine-errors.js';
import { createHelper, removeHelper, withHelper } from './helper-container.js';

/**
 * How old the runtime fill's helper container must be before another controller takes it as left by
 * one that died mid-fill: a fill copies about 120 MB into the engine, seconds even on a remote one.
 */
const RUNTIME_FILL_STALE_MS = 180_000;

/**
 * The engine volume that carries the agent runtime (Node, its libraries, the daemon) into every
 * sandbox, read-only at {@link RUNTIME_DIR}: one per runtime build, filled once, shared by every
 * controller on the engine.
 *
 * @example
 * const volume = await new RuntimeVolumes(docker, logger).ensure(runtime, 'warren/sandbox:latest');
 */
export class RuntimeVolumes {
  constructor(
    private readonly docker: Docker,
    private readonly logger: Logger | undefined,
  ) {}

  /**
   * Makes sure the runtime volume for this runtime exists and is complete, filling it through a
   * created (never started) helper container. A volume is filled by one controller at a time, and
   * never once it is complete: the engine unpacks an archive over an existing file by removing it
   * first, so a second fill would pull the loader and Node from under the sandboxes that another
   * controller on this engine is starting from the same volume. The fill's helper container has a
   * fixed name, and the engine's unique container names are the lock: a controller that finds it
   * taken waits for `.complete`. A fill that died midway (no `.complete`, no helper) is redone; a
   * helper older than {@link RUNTIME_FILL_STALE_MS} is taken as left by a controller that died.
   */
  async ensure(runtime: AgentRuntime, helperImage: string, staleMs = RUNTIME_FILL_STALE_MS): Promise<string> {
    const name = `warren-runtime-${runtime.hash}`;
    const lock = `warren-runtime-fill-${runtime.hash}`;
    for (let waited = 0; ; waited++) {
      const existing = await this.docker
        .getVolume(name)
        .inspect()
        .catch((err: { statusCode?: number }) => (err.statusCode === 404 ? undefined : rethrow(err, `inspect volume ${name}`)));
      if (existing && (await this.volumeIsComplete(name, helperImage))) return name;
      if (!existing)
        // Another controller may make it meanwhile: Docker answers that as made, Podman with an error, after which it is there.
        await this.docker.createVolume({ Name: name, Labels: { 'warren.runtime': runtime.hash } }).catch(async (e: unknown) => {
          const madeMeanwhile = await this.docker
            .getVolume(name)
            .inspect()
            .catch(() => undefined);
          if (!madeMeanwhile) rethrow(e, `create volume ${name}`);
        });
      const filler = await this.claimRuntimeFill(lock, name, helperImage, staleMs);
      if (filler) {
        try {
          // Another controller may have completed it between the look above and the claim.
          if (!(await holdsComplete(filler, name))) await filler.putArchive(await runtimeTar(runtime), { path: RUNTIME_DIR });
        } finally {
          await removeHelper(filler);
        }
        return name;
      }
      if (waited === 0) this.logger?.info({ volume: name }, 'runtime.fill-wait');
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }

  /**
   * Creates the runtime fill's helper container under its fixed name, or undefined when another
   * controller holds it. A holder older than `staleMs` is removed first, so a controller that died
   * mid-fill does not stop every later start.
   */
  private async claimRuntimeFill(lock: string, volume: string, helperImage: string, staleMs: number): Promise<Docker.Container | undefined> {
    const held = await this.docker
      .getContainer(lock)
      .inspect()
      .catch((err: unknown) => (noSuchContainer(err) ? undefined : rethrow(err, `inspect container ${lock}`)));
    if (held) {
      if (!(Date.now() - Date.parse(held.Created) > staleMs)) return undefined;
      this.logger?.warn({ container: lock, created: held.Created }, 'runtime.fill-stale');
      await removeHelper(this.docker.getContainer(lock));
    }
    return createHelper(this.docker, volume, helperImage, lock).catch((err: unknown) => {
      if (nameInUse(err)) return undefined;
      return rethrow(err, `create the runtime fill's helper container from ${helperImage}`);
    });
  }

  /**
   * Removes the runtime volumes of earlier agent builds, once they are an hour old. The engine
   * refuses to remove a volume a container still mounts (a sandbox of an older controller that is
   * still running), so those stay until a later start finds them free; the hour spares a volume
   * another controller on this engine has just made and not yet mounted. Returns the names removed.
   */
  async removeOld(current: string, minAgeMs = 3_600_000): Promise<string[]> {
    const { Volumes } = await this.docker.listVolumes({ filters: { label: ['warren.runtime'] } }).catch((e: unknown) => rethrow(e, 'list volumes'));
    const removed: string[] = [];
    for (const volume of Volumes ?? []) {
      const createdAt = Date.parse((volume as { CreatedAt?: string }).CreatedAt ?? '');
      if (volume.Name === current || !(Date.now() - createdAt >= minAgeMs)) continue;
      await this.docker
        .getVolume(volume.Name)
        .remove()
        .then(
          () => removed.push(volume.Name),
          () => undefined,
        );
    }
    return removed;
  }

  /** Whether the runtime volume holds `.complete`, looked at through a helper of its own. */
  private async volumeIsComplete(volume: string, helperImage: string): Promise<boolean> {
    return withHelper(this.docker, volume, helperImage, (helper) => holdsComplete(helper, volume));
  }
}

/** Whether the runtime volume mounted in `helper` holds `.complete`; an engine failure is thrown, not taken as "no". */
export async function holdsComplete(helper: Docker.Container, volume: string): Promise<boolean> {
  const archive = await helper
    .getArchive({ path: `${RUNTIME_DIR}/.complete` })
    .catch((err: { statusCode?: number }) => (err.statusCode === 404 ? undefined : rethrow(err, `read ${RUNTIME_DIR}/.complete of volume ${volume}`)));
  archive?.resume();
  return archive !== undefined;
}
