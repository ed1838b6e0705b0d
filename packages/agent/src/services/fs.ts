import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { mkdir, open, rename, stat, unlink } from 'node:fs/promises';
import path from 'node:path';
import { CodedError } from '@warren/protocol';
import type { Handler } from '../dispatch.js';
import { resolvePath, type FilePolicy } from '../policy.js';

/** The largest file `fs.read` returns in one frame; larger files need a range read. */
export const MAX_READ_BYTES = 16 * 1024 * 1024;

/** Maps the errno values a file call can meet to wire codes that say what to do. */
export function fsError(err: unknown, display: string): never {
  const code = (err as NodeJS.ErrnoException).code;
  if (err instanceof CodedError) throw err;
  if (code === 'ENOENT') throw new CodedError('NOT_FOUND', `No such file or folder: '${display}'.`, { path: display });
  if (code === 'EISDIR') throw new CodedError('IS_A_DIRECTORY', `'${display}' is a folder, not a file.`, { path: display });
  if (code === 'ENOTDIR') throw new CodedError('NOT_A_DIRECTORY', `A parent of '${display}' is a file, not a folder.`, { path: display });
  if (code === 'ELOOP') throw new CodedError('PATH_NOT_IN_SANDBOX', `'${display}' is a symbolic link; file calls do not follow links.`, { path: display });
  if (code === 'EACCES' || code === 'EPERM' || code === 'EROFS') {
    throw new CodedError('PATH_NOT_WRITABLE', `The sandbox user may not access '${display}' (${code}).`, { path: display });
  }
  throw err;
}

export function fsHandlers(policy: FilePolicy): { 'fs.read': Handler<'fs.read'>; 'fs.write': Handler<'fs.write'> } {
  return {
    async 'fs.read'(params) {
      const target = await resolvePath(policy, params.path, 'read');
      // O_NOFOLLOW: a link swapped in after resolution is refused; O_NONBLOCK: a FIFO never hangs the call.
      const handle = await open(target.absolute, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK).catch((e) => fsError(e, target.display));
      try {
        const info = await handle.stat();
        if (info.isDirectory()) throw new CodedError('IS_A_DIRECTORY', `'${target.display}' is a folder, not a file.`, { path: target.display });
        if (!info.isFile()) throw new CodedError('INVALID_PARAMS', `'${target.display}' is not a regular file.`, { path: target.display });
        if (info.size > MAX_READ_BYTES) {
          throw new CodedError('FILE_TOO_LARGE', `'${target.display}' is ${info.size} bytes; fs.read returns at most ${MAX_READ_BYTES} bytes.`, {
            path: target.display,
            size: info.size,
            limit: MAX_READ_BYTES,
          });
        }
        const bytes = await handle.readFile();
        return { result: { path: target.display, size: bytes.length, mtimeMs: info.mtimeMs }, payload: bytes };
      } finally {
        await handle.close();
      }
    },

    async 'fs.write'(params, ctx) {
      const target = await resolvePath(policy, params.path, 'write');
      const content = ctx.payload ?? Buffer.alloc(0);
      const folder = path.dirname(target.absolute);
      await mkdir(folder, { recursive: true }).catch((e) => fsError(e, target.display));
      const existing = await stat(target.absolute).catch(() => undefined);
      if (existing?.isDirectory()) throw new CodedError('IS_A_DIRECTORY', `'${target.display}' is a folder, not a file.`, { path: target.display });
      // Write beside the target, then rename: readers see the old or the new file, never a torn one.
      const temp = path.join(folder, `.${path.basename(target.absolute)}.warren-${randomBytes(6).toString('hex')}`);
      const mode = existing ? existing.mode & 0o7777 : (params.mode ?? 0o644);
      const handle = await open(temp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode).catch((e) => fsError(e, target.display));
      try {
        await handle.writeFile(content);
        await handle.chmod(mode);
        await handle.close();
        await rename(temp, target.absolute);
      } catch (err) {
        await handle.close().catch(() => undefined);
        await unlink(temp).catch(() => undefined);
        fsError(err, target.display);
      }
      return { result: { path: target.display, bytesWritten: content.length } };
    },
  };
}
