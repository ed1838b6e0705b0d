import { constants } from 'node:fs';
import { lstat, open, readdir, readlink, realpath } from 'node:fs/promises';
import path from 'node:path';
import { pack, type Header } from 'tar-stream';
import { TarChecker } from '@warren/protocol';
import { makeError } from './errors.js';

/** The largest build context the SDK packs unless told otherwise (the controller has its own cap, `images.maxBuildContextMb`). */
export const DEFAULT_MAX_CONTEXT_BYTES = 256 * 1024 * 1024;

/** How {@link packBuildContext} packs a folder. */
export interface PackContextOptions {
  /** The Dockerfile's path inside the folder; default `Dockerfile`. It must be a regular file inside the folder. */
  dockerfile?: string | undefined;
  /** The most bytes of file content packed; a larger folder is refused with `BuildContextTooLargeError`. */
  maxBytes?: number | undefined;
  signal?: AbortSignal | undefined;
}

/** A packed context: the tar archive and what went into it. */
export interface PackedContext {
  archive: Buffer;
  /** The Dockerfile's path inside the archive. */
  dockerfile: string;
  files: number;
  bytes: number;
}

/**
 * Packs a folder as a build context, never following a link: a symbolic link is packed as a link
 * when its target is relative and stays inside the folder, and refused otherwise; a file is read
 * through a descriptor opened without following links, so a file swapped for a link while packing
 * is refused too. Sockets, FIFOs and devices are refused; setuid/setgid bits are dropped; the
 * archive passes the same entry rules ({@link TarChecker}) the controller applies. Content past
 * `maxBytes` is refused before it is read.
 *
 * @example
 * const { archive } = await packBuildContext('./template', { dockerfile: 'Dockerfile' });
 */
export async function packBuildContext(folder: string, options: PackContextOptions = {}): Promise<PackedContext> {
  const maxBytes = options.maxBytes ?? DEFAULT_MAX_CONTEXT_BYTES;
  let root: string;
  try {
    root = await realpath(folder);
    if (!(await lstat(root)).isDirectory()) throw new Error('not a folder');
  } catch (err) {
    throw makeError(
      'INVALID_PARAMS',
      `The build context '${folder}' is not a folder that can be read (${(err as Error).message}); name the folder with the Dockerfile.`,
      {
        cause: err,
      },
    );
  }
  const dockerfile = insideContext(options.dockerfile ?? 'Dockerfile');
  const checker = new TarChecker();
  const archive = pack();
  const chunks: Buffer[] = [];
  archive.on('data', (chunk: unknown) => void chunks.push(chunk as Buffer));
  const ended = new Promise<void>((resolve, reject) => {
    archive.on('end', () => resolve());
    archive.on('error', reject);
  });
  let bytes = 0;
  let files = 0;
  let dockerfileFound = false;

  const add = async (header: Partial<Header> & { name: string }, body?: Buffer) => {
    try {
      checker.check(header);
    } catch (err) {
      throw makeError('INVALID_PARAMS', `${(err as Error).message.replace('Nothing was written.', 'Nothing was sent.')}`, {
        details: { path: header.name },
        cause: err,
      });
    }
    await new Promise<void>((resolve, reject) => {
      const done = (err?: Error | null) => (err ? reject(err) : resolve());
      if (body === undefined) archive.entry(header, done);
      else archive.entry(header, body, done);
    });
  };

  const walk = async (relative: string): Promise<void> => {
    const names = (await readdir(path.join(root, relative))).sort();
    for (const name of names) {
      if (options.signal?.aborted) throw makeError('CANCELLED', 'Packing the build context was cancelled.');
      const rel = relative === '' ? name : `${relative}/${name}`;
      const full = path.join(root, rel);
      const info = await lstat(full);
      const mode = info.mode & 0o777;
      if (info.isDirectory()) {
        await add({ name: rel, type: 'directory', mode, mtime: info.mtime });
        await walk(rel);
      } else if (info.isSymbolicLink()) {
        const target = await readlink(full);
        if (path.isAbsolute(target) || escapes(rel, target))
          throw makeError(
            'INVALID_PARAMS',
            `The build context has a link '${rel}' -> '${target}' that points outside the context folder; links are packed as links, never followed, and must stay inside. Copy the file into the context instead.`,
            { details: { path: rel, target } },
          );
        await add({ name: rel, type: 'symlink', linkname: target, mode: 0o777, mtime: info.mtime });
      } else if (info.isFile()) {
        if (bytes + info.size > maxBytes) throw tooLarge(folder, maxBytes);
        const handle = await open(full, constants.O_RDONLY | constants.O_NOFOLLOW).catch((err: NodeJS.ErrnoException) => {
          throw makeError(
            'INVALID_PARAMS',
            `Could not read '${rel}' of the build context (${err.code ?? err.message}); it may have been replaced by a link while packing.`,
            {
              cause: err,
            },
          );
        });
        let body: Buffer;
        try {
          const opened = await handle.stat();
          if (!opened.isFile()) throw makeError('INVALID_PARAMS', `'${rel}' of the build context changed while packing; pack it again.`);
          if (bytes + opened.size > maxBytes) throw tooLarge(folder, maxBytes);
          body = await handle.readFile();
        } finally {
          await handle.close();
        }
        bytes += body.length;
        if (bytes > maxBytes) throw tooLarge(folder, maxBytes);
        files++;
        if (rel === dockerfile) dockerfileFound = true;
        await add({ name: rel, type: 'file', mode, size: body.length, mtime: info.mtime }, body);
      } else {
        const kind = info.isSocket() ? 'a socket' : info.isFIFO() ? 'a FIFO' : 'a device';
        throw makeError(
          'UNSUPPORTED_FILE_TYPE',
          `The build context has ${kind} at '${rel}'; a context holds regular files, folders and links only. Build from a folder without it.`,
          { details: { path: rel } },
        );
      }
    }
  };

  try {
    await walk('');
  } catch (err) {
    archive.destroy();
    throw err;
  }
  archive.finalize();
  await ended;
  if (!dockerfileFound)
    throw makeError(
      'INVALID_PARAMS',
      `The build context '${folder}' has no regular file '${dockerfile}'; put the Dockerfile inside the context folder, or name it with dockerfile.`,
      {
        details: { dockerfile },
      },
    );
  return { archive: Buffer.concat(chunks), dockerfile, files, bytes };
}

/** The Dockerfile's path as the archive names it; refused when it would leave the context. */
function insideContext(given: string): string {
  const normal = path.posix.normalize(given.replaceAll(path.sep, '/'));
  if (path.posix.isAbsolute(normal) || normal === '..' || normal.startsWith('../') || normal === '.' || normal.includes('\0'))
    throw makeError(
      'INVALID_PARAMS',
      `The Dockerfile '${given}' is not inside the build context; give its path relative to the context folder, e.g. Dockerfile or docker/Dockerfile.`,
    );
  return normal.replace(/\/+$/, '');
}

/** True when a relative link target, taken from the link's folder, leaves the context (any `..` after a step down counts: it is taken physically). */
function escapes(rel: string, target: string): boolean {
  const parts = target.split('/').filter((s) => s !== '' && s !== '.');
  const firstDown = parts.findIndex((s) => s !== '..');
  if (firstDown !== -1 && parts.slice(firstDown).includes('..')) return true;
  const lands = path.posix.normalize(path.posix.join(path.posix.dirname(rel), target));
  return lands === '..' || lands.startsWith('../');
}

function tooLarge(folder: string, maxBytes: number) {
  return makeError(
    'BUILD_CONTEXT_TOO_LARGE',
    `The build context '${folder}' holds more than ${maxBytes} bytes (maxContextBytes); build from a folder with only what the Dockerfile copies.`,
    { details: { maxBytes } },
  );
}
