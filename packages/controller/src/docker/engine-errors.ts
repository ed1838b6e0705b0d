/** How the Docker provider turns dockerode's failures into Warren's typed errors. */
import type { SandboxSettings } from '@warren/protocol';
import { CodedError } from '@warren/protocol';
import { workspaceOf } from './container-spec.js';

/** Whether an engine error has Docker's status, or is Podman's (4.3) 500 with words that mean the same. */
export function engineAnswered(err: unknown, status: number, podmanWords: RegExp): boolean {
  const e = err as { statusCode?: number; json?: { message?: string }; message?: string };
  return e.statusCode === status || (e.statusCode === 500 && podmanWords.test(e.json?.message ?? e.message ?? ''));
}

/** The engine has no such container (Podman says so with a 500 for one it is removing). */
export const noSuchContainer = (err: unknown): boolean => engineAnswered(err, 404, /no such container|does not exist/i);

/** A remove refused because another remove of the same container is under way (the reaper's, a second kill). */
export function removalInProgress(err: unknown): boolean {
  const e = err as { statusCode?: number; json?: { message?: string }; message?: string };
  return (e.statusCode === 409 || e.statusCode === 500) && /removal of container .* is already in progress/i.test(e.json?.message ?? e.message ?? '');
}

/** A create refused because the container name is taken. */
export const nameInUse = (err: unknown): boolean => engineAnswered(err, 409, /already in use/i);

/** Bytes as MiB for messages. */
export function mib(bytes: number): string {
  return (bytes / 1024 / 1024).toFixed(bytes < 1024 * 1024 ? 2 : 0);
}

/** A failed pull as Warren's error: a full disk is `IMAGE_TOO_LARGE`, an engine that is away `UPSTREAM_UNAVAILABLE`, the rest `IMAGE_PULL_FAILED`. */
export function pullFailure(image: string, err: unknown): CodedError {
  if (err instanceof CodedError) return err;
  const e = err as { statusCode?: number; json?: { message?: string }; reason?: string; code?: string; message?: string } | string | undefined;
  const detail = typeof e === 'string' ? e : (e?.json?.message ?? e?.message ?? e?.reason ?? String(err));
  if (typeof e === 'object' && (e.code === 'ECONNREFUSED' || e.code === 'ENOENT' || e.code === 'EACCES')) return engineError(err, `pull ${image}`);
  if (/no space left on device/i.test(detail))
    return new CodedError('IMAGE_TOO_LARGE', `The image ${image} does not fit on the engine's disk (${detail}); nothing of it was kept.`, { image });
  return new CodedError('IMAGE_PULL_FAILED', `Could not pull ${image}: ${detail}.`, { image });
}

/**
 * A dockerode failure as the Warren error the Docker provider throws for it, for callers that
 * report rather than throw.
 *
 * @example
 * engineError({ statusCode: 404, json: Buffer.from('Not Found\n') }, 'update container x').code; // 'NOT_SUPPORTED'
 */
export function engineError(err: unknown, doing: string): CodedError {
  try {
    rethrow(err, doing);
  } catch (coded) {
    return coded as CodedError;
  }
}

/** The engine's own words for a dockerode failure. */
export function engineDetail(err: unknown): string {
  const e = err as { json?: { message?: string } | Buffer | string; reason?: string; message?: string };
  return (typeof e.json === 'object' && !Buffer.isBuffer(e.json) ? e.json?.message : undefined) ?? e.reason ?? e.message ?? String(err);
}

/**
 * The engine's refusal of a working folder it cannot make or enter in the image (a file on its
 * path, or a link of the image's that leads out of the container, which runc refuses), as
 * INVALID_PARAMS naming the field; undefined for any other failure. The engine's words are left
 * out: they name folders of the engine's host.
 */
export function workdirRefusal(err: unknown, settings: SandboxSettings, image: string): CodedError | undefined {
  const detail = engineDetail(err);
  const { workdir } = settings;
  const about =
    detail.includes(`mkdir ${workdir}: `) ||
    detail.includes(`${workdir}: not a directory`) ||
    detail.includes(`${workdir} is not a directory`) ||
    /chdir to cwd|possible container breakout/i.test(detail);
  if (!about) return undefined;
  const field = workdir === workspaceOf(settings) ? 'workspace' : 'workdir';
  return new CodedError(
    'INVALID_PARAMS',
    `The working folder '${workdir}' cannot be made or entered in image ${image}: a file, or a link that leaves the container, lies on its path. Give ${field} a folder the image has room for (such as /workspace or /home/user), or leave it out.`,
    { field, path: workdir },
  );
}

/** Maps a dockerode failure to a Warren error that says what to do. */
export function rethrow(err: unknown, doing: string): never {
  const e = err as { statusCode?: number; json?: { message?: string } | Buffer | string; reason?: string; code?: string; message?: string };
  const detail = engineDetail(err);
  if (e.code === 'ECONNREFUSED' || e.code === 'ENOENT' || e.code === 'EACCES') {
    throw new CodedError(
      'UPSTREAM_UNAVAILABLE',
      `Could not ${doing}: the Docker engine is not reachable (${e.code}). Start Docker (scripts/start does) or set DOCKER_HOST.`,
    );
  }
  if (/error setting rlimit/i.test(detail)) {
    throw new CodedError(
      'INVALID_PARAMS',
      `Could not ${doing}: the engine may not set a resource limit this high (${detail}). Lower limits.openFiles (or engine.processLimit) to at most the engine's hard limits (ulimit -Hn, ulimit -Hu of the engine's service).`,
    );
  }
  if (e.statusCode === 404 && /image/i.test(detail)) {
    throw new CodedError('NOT_FOUND', `Could not ${doing}: ${detail}. Build Warren's images with scripts/build-images, or docker pull the image.`);
  }
  // An engine without the endpoint (Podman 4.3 has no `container update`) answers a bare 404 body, not a container's.
  const body = Buffer.isBuffer(e.json) || typeof e.json === 'string' ? String(e.json) : e.json?.message;
  if (e.statusCode === 404 && /^\s*(404 )?(page )?not found\s*$/i.test(body ?? ''))
    throw new CodedError(
      'NOT_SUPPORTED',
      `Could not ${doing}: this engine has no API for it (it answered '404 ${(body ?? '').trim()}'; Podman 4.3 lacks some of Docker's).`,
    );
  if (e.statusCode === 404) throw new CodedError('SANDBOX_NOT_FOUND', `Could not ${doing}: ${detail}`);
  // Docker answers 409 to a pause of a paused container; Podman answers 500 'container state improper'.
  if ((e.statusCode === 409 || e.statusCode === 500) && /is not paused|is already paused|is paused|container state improper/i.test(detail))
    throw new CodedError('CONFLICT', `Could not ${doing}: ${detail}. Check the sandbox's state with GET /v1/sandboxes/<id>.`);
  if (e.statusCode === 409) throw new CodedError('CONFLICT', `Could not ${doing}: ${detail}`);
  throw new CodedError('UPSTREAM_UNAVAILABLE', `Could not ${doing}: ${detail}`);
}
