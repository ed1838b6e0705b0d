import type { Stats } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { pack } from 'tar-stream';
import { CodedError, isWithin, MAX_FRAME_BYTES, readCheckedTar, suffixAllowed, type ApprovalRequest, type CheckedTarEntry } from '@warren/protocol';
import type { Handler } from '../dispatch.js';
import { openChecked, requireRegularFile, resolvePath, type ResolvedPath } from '../policy.js';
import { mapFsError } from '../fs-error.js';
import { approve, checkHardLinks, readBounded, resolveFor, type FsContext } from './fs-common.js';
import { Placement } from './fs-place.js';
import { walkTree } from './fs-walk.js';

type TarHandlers = { 'fs.upload': Handler<'fs.upload'>; 'fs.download': Handler<'fs.download'> };

/** The largest archive one download answers with: what fits in one frame beside its header. */
export const MAX_DOWNLOAD_BYTES = MAX_FRAME_BYTES - 1024 * 1024;

/** One archive entry checked against the policy, ready to be written. */
interface Planned {
  entry: CheckedTarEntry;
  data: Buffer;
  target: ResolvedPath;
  display: string;
}

/**
 * Writes a checked upload with a journal ({@link Placement}: every step in its folder pinned by a
 * descriptor, missing folders made through descriptors): each file and link is written to a
 * hidden temporary name beside its target (created O_EXCL|O_NOFOLLOW), then moved into place; a
 * file it replaces is first moved aside. When a step fails (no space left,
 * or the folder changed since the checks), every step is undone in reverse, so the folder is as
 * it was, and the replaced files are back.
 */
async function applyUpload(
  fs: FsContext,
  dest: ResolvedPath,
  plan: Planned[],
  display: string,
): Promise<{ files: number; directories: number; symlinks: number; bytes: number }> {
  const placement = new Placement(fs);
  const counts = { files: 0, directories: 0, symlinks: 0, bytes: 0 };
  let current = display;
  try {
    await placement.makeFolders(dest.absolute, display);
    for (const { entry, data, target, display: entryDisplay } of plan) {
      current = entryDisplay;
      await placement.makeFolders(path.posix.dirname(target.absolute), entryDisplay);
      if (entry.kind === 'directory') {
        await placement.makeFolders(target.absolute, entryDisplay, entry.mode | 0o700);
        counts.directories++;
        continue;
      }
      let staged;
      if (entry.kind === 'file') {
        const file = await placement.stageFile(target, entryDisplay, entry.mode);
        staged = file.staged;
        try {
          await file.handle.writeFile(data);
          await file.handle.chmod(entry.mode);
        } finally {
          await file.handle.close();
        }
      } else {
        staged = await placement.stageLink(target, entryDisplay, entry.linkname!);
      }
      await placement.place(staged, entryDisplay);
      if (entry.kind === 'file') {
        counts.files++;
        counts.bytes += entry.size;
      } else counts.symlinks++;
    }
  } catch (err) {
    await placement.rollback();
    const mapped = mapFsError(err, current);
    if (!(mapped instanceof CodedError)) throw mapped;
    throw new CodedError(mapped.code, `${mapped.message} The upload stopped there and was undone: '${display}' is as it was.`, mapped.details);
  }
  await placement.finish();
  return counts;
}

/** Folder upload and download as tar archives, one frame each way. */
export function tarHandlers(fs: FsContext): TarHandlers {
  return {
    async 'fs.upload'(params, ctx) {
      const payload = ctx.payload ?? Buffer.alloc(0);
      const dest = await resolvePath(fs.policy, params.path, 'write');
      if (dest.stat && !dest.stat.isDirectory())
        throw new CodedError('NOT_A_DIRECTORY', `'${params.path}' is a file; upload into a folder.`, { path: params.path });
      const entries = readCheckedTar(payload);

      // Check every entry against the policy and what already exists, and ask every approval,
      // before writing anything.
      const base = params.path.replace(/\/+$/, '') || '.';
      const plan: Planned[] = [];
      const conflicts: string[] = [];
      for (const { entry, data } of entries) {
        const display = base === '.' ? entry.name : `${base}/${entry.name}`;
        const target = await resolvePath(fs.policy, display, 'write', { followLast: false });
        if (entry.kind === 'file') {
          if (!suffixAllowed(target.mount.suffixes, entry.name)) {
            throw new CodedError(
              'SUFFIX_NOT_ALLOWED',
              `The archive entry '${entry.name}' has a suffix this sandbox does not allow (${target.mount.suffixes!.join(', ')}). Nothing was written.`,
              { entry: entry.name },
            );
          }
          if (target.mount.maxFileBytes !== undefined && entry.size > target.mount.maxFileBytes) {
            throw new CodedError(
              'FILE_TOO_LARGE',
              `The archive entry '${entry.name}' is ${entry.size} bytes; the limit is ${target.mount.maxFileBytes}. Nothing was written.`,
              { entry: entry.name },
            );
          }
        }
        if (target.stat) {
          const isDir = target.stat.isDirectory();
          if (entry.kind === 'directory' && !isDir)
            throw new CodedError('ALREADY_EXISTS', `The archive has a folder '${entry.name}' where a file exists. Nothing was written.`, { entry: entry.name });
          if (entry.kind !== 'directory' && isDir)
            throw new CodedError('IS_A_DIRECTORY', `The archive has a file '${entry.name}' where a folder exists. Nothing was written.`, { entry: entry.name });
          if (entry.kind !== 'directory' && !params.overwrite) conflicts.push(entry.name);
          if (entry.kind !== 'directory' && !target.stat.isFile() && !target.stat.isSymbolicLink()) {
            throw new CodedError('UNSUPPORTED_FILE_TYPE', `'${display}' exists and is not a regular file. Nothing was written.`, { entry: entry.name });
          }
        }
        plan.push({ entry, data, target, display });
      }
      if (conflicts.length > 0) {
        throw new CodedError(
          'ALREADY_EXISTS',
          `${conflicts.length} file(s) of the archive already exist (${conflicts.slice(0, 10).join(', ')}${conflicts.length > 10 ? ', ...' : ''}); pass overwrite: true to replace them. Nothing was written.`,
          {
            conflicts: conflicts.slice(0, 100),
          },
        );
      }
      // One approval per file and link written and per folder made, each under the rules of the
      // mount it lands in: an approver sees every name, as it does for single writes.
      const ask = (request: ApprovalRequest) =>
        approve(ctx, request).catch((err: unknown) => {
          throw err instanceof CodedError ? new CodedError(err.code, `${err.message} Nothing of the upload was written.`, err.details) : err;
        });
      if (!dest.stat && dest.mount.writeApproval) await ask({ operation: 'upload', path: dest.display, bytes: payload.length });
      for (const { entry, target } of plan) {
        if (entry.kind === 'directory' && target.stat) continue;
        if (target.mount.writeApproval) await ask({ operation: 'upload', path: target.display, ...(entry.kind === 'file' ? { bytes: entry.size } : {}) });
      }

      return { result: { path: dest.display, ...(await applyUpload(fs, dest, plan, params.path)) } };
    },

    async 'fs.download'(params, ctx) {
      const source = await resolveFor(fs, ctx, params.path, 'read', 'download');
      if (!source.stat) throw new CodedError('NOT_FOUND', `No such file or folder: '${params.path}'.`, { path: params.path });
      const archive = pack();
      const chunks: Buffer[] = [];
      archive.on('data', (c: unknown) => chunks.push(c as Buffer));
      const finished = new Promise<void>((resolve, reject) => {
        archive.on('end', resolve);
        archive.on('error', reject);
      });
      let total = 0;
      const tooLarge = (what: string) =>
        new CodedError(
          'FILE_TOO_LARGE',
          `'${params.path}' makes an archive larger than ${MAX_DOWNLOAD_BYTES} bytes, the most one fs.download carries${what}; download it with fs.downloadStream (sandbox.files.downloadTo), which streams any size.`,
          { path: params.path, limit: MAX_DOWNLOAD_BYTES },
        );
      const add = (header: Parameters<typeof archive.entry>[0], data?: Buffer) =>
        new Promise<void>((resolve, reject) => {
          total += 512 + (data ? Math.ceil(data.length / 512) * 512 : 0);
          if (total > MAX_DOWNLOAD_BYTES) return reject(tooLarge(''));
          if (data) archive.entry(header, data, (err) => (err ? reject(err) : resolve()));
          else archive.entry(header, (err) => (err ? reject(err) : resolve()));
        });
      const entries = downloadEntries(fs, source, params.path, ctx.signal);
      try {
        for (;;) {
          const step = await entries.next();
          if (step.done) {
            archive.finalize();
            await finished;
            const tar = Buffer.concat(chunks);
            return { result: { path: source.display, ...step.value, bytes: tar.length }, payload: tar };
          }
          const { header, file } = step.value;
          if (!file) {
            await add(header);
            continue;
          }
          const handle = await openDownloadFile(fs, source, file);
          try {
            // What is left of the archive's cap, counted in bytes actually read (a sparse file's
            // size says nothing about what reading it takes).
            const room = MAX_DOWNLOAD_BYTES - total - 1024;
            const data = await readBounded(handle, Math.max(0, room), () => tooLarge(` ('${file.display}' alone holds more than fits)`), file.stat.size);
            await add({ ...header, size: data.length }, data);
          } finally {
            await handle.close();
          }
        }
      } catch (err) {
        archive.destroy();
        await entries.return(undefined as never).catch(() => undefined);
        throw mapFsError(err, params.path);
      }
    },
  };
}

/** One entry of a download: its tar header, and for a file where to read its bytes. */
export interface DownloadEntry {
  header: { name: string; type: 'file' | 'directory' | 'symlink'; mode: number; mtime: Date; linkname?: string; size?: number };
  file?: { absolute: string; stat: Stats; display: string };
}

/** What a download counts besides its bytes. */
export interface DownloadCounts {
  files: number;
  directories: number;
  symlinks: number;
  skipped: { path: string; reason: string }[];
}

/**
 * The entries of a download, in archive order, never following a link: the file itself, or the
 * folder's tree (folders, regular files with an allowed suffix, links that stay inside it). What
 * is left out is counted in `skipped` (at most 100 named). Returns the counts when done.
 */
export async function* downloadEntries(
  fs: FsContext,
  source: ResolvedPath,
  display: string,
  signal: AbortSignal,
): AsyncGenerator<DownloadEntry, DownloadCounts> {
  const counts: DownloadCounts = { files: 0, directories: 0, symlinks: 0, skipped: [] };
  const skip = (p: string, reason: string) => {
    if (counts.skipped.length < 100) counts.skipped.push({ path: p, reason });
  };
  if (!source.stat!.isDirectory()) {
    requireRegularFile(source.stat, display);
    const name = path.posix.basename(source.absolute);
    yield {
      header: { name, type: 'file', mode: source.stat!.mode & 0o777, mtime: source.stat!.mtime },
      file: { absolute: source.absolute, stat: source.stat!, display },
    };
    counts.files++;
    return counts;
  }
  const walk = walkTree(source.absolute, display, { maxDepth: 64, maxVisited: 100_000, signal });
  for (;;) {
    const step = await walk.next();
    if (step.done) {
      if (step.value.truncated || step.value.depthLimited) skip('.', 'the folder is larger than 100000 entries or 64 levels; the rest was left out');
      return counts;
    }
    const e = step.value;
    if (e.stat.isDirectory()) {
      yield { header: { name: `${e.rel}/`, type: 'directory', mode: e.stat.mode & 0o777, mtime: e.stat.mtime } };
      counts.directories++;
    } else if (e.stat.isFile()) {
      if (!suffixAllowed(source.mount.suffixes, e.rel)) skip(e.rel, 'suffix not allowed');
      else {
        yield {
          header: { name: e.rel, type: 'file', mode: e.stat.mode & 0o777, mtime: e.stat.mtime },
          file: { absolute: e.absolute, stat: e.stat, display: e.rel },
        };
        counts.files++;
      }
    } else if (e.stat.isSymbolicLink()) {
      const target = e.link ?? '';
      const lands = path.posix.resolve(path.posix.dirname(e.absolute), target);
      const parts = target.split('/').filter((s) => s !== '' && s !== '.');
      const firstDown = parts.findIndex((s) => s !== '..');
      const lateDotDot = firstDown !== -1 && parts.slice(firstDown).includes('..');
      // Links are kept only when they stay inside the downloaded folder; never followed.
      if (target === '' || target.startsWith('/') || lateDotDot || !isWithin(source.absolute, lands) || lands === source.absolute)
        skip(e.rel, 'symbolic link points outside the downloaded folder');
      else {
        yield { header: { name: e.rel, type: 'symlink', linkname: target, mode: 0o777, mtime: e.stat.mtime } };
        counts.symlinks++;
      }
    } else skip(e.rel, 'not a regular file, folder or link');
  }
}

/** Opens one file of a download through the policy's checks: a regular file, no hard links a narrowed handle may not read. */
export async function openDownloadFile(fs: FsContext, source: ResolvedPath, file: NonNullable<DownloadEntry['file']>): Promise<FileHandle> {
  const handle = await openChecked({ ...source, absolute: file.absolute, stat: file.stat }, file.display);
  try {
    const info = await handle.stat();
    requireRegularFile(info, file.display);
    checkHardLinks(fs, info, file.display);
    return handle;
  } catch (err) {
    await handle.close();
    throw err;
  }
}
