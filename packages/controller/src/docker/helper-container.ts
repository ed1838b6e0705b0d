import { randomBytes } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type Docker from 'dockerode';
import { CodedError } from '@warren/protocol';
import type { Logger } from '../logger.js';
import { RUNTIME_DIR } from '../runtime.js';
import { HARDENING_DEFAULTS } from './container-spec.js';
import { rethrow } from './engine-errors.js';
import { hardLimits, processLimitCandidates, type EngineKind } from './engine-kind.js';

/**
 * Short-lived helper containers, created and never (or only briefly) started, through which the
 * provider asks the engine what only a container shows: whether it sees the controller's folders,
 * which process limit it accepts, what a volume holds.
 */

/** A created, never started container with the volume at {@link RUNTIME_DIR}; `name` when it must be unique. */
export async function createHelper(docker: Docker, volume: string, image: string, name?: string): Promise<Docker.Container> {
  return docker.createContainer({
    ...(name === undefined ? {} : { name }),
    Image: image,
    Entrypoint: ['/bin/true'],
    Cmd: [],
    HostConfig: { Mounts: [{ Type: 'volume', Source: volume, Target: RUNTIME_DIR }], NetworkMode: 'none' },
  });
}

/** Runs `use` with a helper container that mounts `volume`, removed after. */
export async function withHelper<T>(docker: Docker, volume: string, image: string, use: (c: Docker.Container) => Promise<T>): Promise<T> {
  const helper = await createHelper(docker, volume, image).catch((e: unknown) => rethrow(e, `create a helper container from ${image}`));
  try {
    return await use(helper);
  } finally {
    await removeHelper(helper);
  }
}

/** Removes a helper container, once more after a moment if the engine was still busy with it (Podman, just after its exit). */
export async function removeHelper(helper: Docker.Container): Promise<void> {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      await helper.remove({ force: true });
      return;
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

/**
 * Whether the engine's containers see the controller's folders: a file with a random name and
 * content is written under the state folder, bound into a helper container, and read back
 * through the engine. Any failure means no.
 */
export async function engineSeesFolder(docker: Docker, stateDir: string, helperImage: string): Promise<boolean> {
  const name = `channel-probe-${randomBytes(8).toString('hex')}`;
  const marker = randomBytes(16).toString('hex');
  const folder = path.join(stateDir, name);
  try {
    await mkdir(folder, { recursive: true, mode: 0o755 });
    await writeFile(path.join(folder, 'marker'), marker);
    const helper = await docker.createContainer({
      Image: helperImage,
      Entrypoint: ['/bin/true'],
      Cmd: [],
      HostConfig: { Binds: [`${folder}:/probe:ro`], NetworkMode: 'none' },
    });
    try {
      const archive = await helper.getArchive({ path: '/probe/marker' });
      const chunks: Buffer[] = [];
      for await (const chunk of archive) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).includes(marker);
    } finally {
      await removeHelper(helper);
    }
  } catch {
    return false;
  } finally {
    await rm(folder, { recursive: true, force: true }).catch(() => undefined);
  }
}

/**
 * The largest RLIMIT_NPROC a container of this engine starts with (see
 * {@link processLimitCandidates}): each candidate is tried on a helper container that runs
 * `/bin/true`, since only a start shows whether the engine may set it. The configured value is
 * tried alone, and a refusal says which setting to lower.
 */
export async function chooseProcessLimit(
  docker: Docker,
  helperImage: string,
  wanted: number | undefined,
  engine: EngineKind | undefined,
  logger: Logger | undefined,
): Promise<number> {
  let ownHard: number | undefined;
  try {
    ownHard = hardLimits(await readFile('/proc/self/limits', 'utf8')).processes;
  } catch {
    ownHard = undefined;
  }
  const candidates = processLimitCandidates(wanted, ownHard);
  let refusal = '';
  for (const limit of candidates) {
    const helper = await docker
      .createContainer({
        Image: helperImage,
        Entrypoint: ['/bin/true'],
        Cmd: [],
        User: '0:0',
        // Podman's own open-files default is above such an engine's hard limit too: the sandboxes' default goes with it.
        HostConfig: {
          NetworkMode: 'none',
          Ulimits: [
            { Name: 'nproc', Soft: limit, Hard: limit },
            { Name: 'nofile', Soft: HARDENING_DEFAULTS.openFiles, Hard: HARDENING_DEFAULTS.openFiles },
          ],
        },
      })
      .catch((e: unknown) => rethrow(e, `create a helper container from ${helperImage}`));
    try {
      await helper.start();
      // It runs /bin/true: once it has exited the engine removes it without a race with its exit.
      await helper.wait().catch(() => undefined);
      logger?.info({ processLimit: limit, tried: candidates }, 'engine.process-limit');
      return limit;
    } catch (err) {
      refusal = (err as { json?: { message?: string } }).json?.message ?? String(err);
      if (!/rlimit/i.test(refusal)) rethrow(err, "start a helper container to learn the engine's process limit");
    } finally {
      await removeHelper(helper);
    }
  }
  throw new CodedError(
    'NOT_SUPPORTED',
    `The ${engine?.name ?? 'container'} engine refused every process limit Warren tried (${candidates.join(', ')}): ${refusal}. ` +
      "Set engine.processLimit (WARREN_PROCESS_LIMIT) to at most the engine's own hard limit (ulimit -Hu of the engine's service).",
  );
}
