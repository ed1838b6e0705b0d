import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { lstat, mkdir, open, rename, rm, rmdir, symlink, unlink } from 'node:fs/promises';
import path from 'node:path';
import { CodedError, describePolicy, isWithin, MAX_LIST_ENTRIES, MAX_PAGE_BYTES, mountsOf, suffixAllowed, type EntryType } from '@warren/protocol';
import type { CallContext, Handler } from '../dispatch.js';
import { checkSize, checkSuffix, openChecked, removeFolderAt, requireRegularFile, resolvePath, typeOf, type ResolvedPath } from '../policy.js';
import { mapFsError } from '../fs-error.js';
import { atPinnedFolder, FolderTree, pinChild } from '../folder-pin.js';
import { approve, checkHardLinks, inFolder, makeFolders, ownHandle, ownPath, resolveFor, type FsContext } from './fs-common.js';
import { walkTree } from './fs-walk.js';
import { ownerNames } from './owner-names.js';
import { compileGlob } from './glob.js';

type TreeHandlers = {
  'fs.list': Handler<'fs.list'>;
  'fs.glob': Handler<'fs.glob'>;
  'fs.mkdir': Handler<'fs.mkdir'>;
  'fs.delete': Handler<'fs.delete'>;
  'fs.move': Handler<'fs.move'>;
  'fs.copy': Handler<'fs.copy'>;
};

/** How far a glob walks: entries looked at, and folder depth (the pattern's own limits are in `glob.ts`). */
export const GLOB_LIMITS = { maxScanned: 200_000, maxDepth: 64 } as const;
/** The most entries one copy or move-by-copy handles. */
export const MAX_COPY_ENTRIES = 100_000;

/** An upper bound of a list entry's JSON besides its path, link target, owner and group (keys, type, size, mtime, mode). */
const ENTRY_JSON_BYTES = 160;

/** The bytes a string takes in JSON: its length when it needs no escaping and is ASCII, else measured. */
function jsonBytes(text: string): number {
  return /^[\x20-\x21\x23-\x5b\x5d-\x7e]*$/.test(text) ? text.length + 2 : Buffer.byteLength(JSON.stringify(text));
}

export function entryType(type: ReturnType<typeof typeOf>): EntryType {
  return type === 'file' || type === 'directory' || type === 'symlink' ? type : 'other';
}

/** Folders, listings, glob, mkdir, delete, move and copy. */
export function treeHandlers(fs: FsContext): TreeHandlers {
  return {
    async 'fs.list'(params, ctx) {
      const target = await resolveFor(fs, ctx, params.path, 'read', 'list');
      requireFolder(target, params.path);
      // A cursor is the count of entries the pages before returned: the walk's order is fixed
      // (breadth first, names sorted), so this page starts that many entries in.
      const skip = params.cursor === undefined ? 0 : Number(params.cursor);
      if (skip >= MAX_LIST_ENTRIES)
        throw new CodedError(
          'INVALID_PARAMS',
          `cursor '${params.cursor}' is past the ${MAX_LIST_ENTRIES} entries a listing reaches; pass a nextCursor a listing returned.`,
          { cursor: params.cursor },
        );
      const pageMax = Math.min(params.maxEntries, MAX_LIST_ENTRIES - skip);
      const entries = [];
      const walk = walkTree(target.absolute, params.path, {
        maxDepth: params.recursive ? params.maxDepth : 1,
        maxVisited: skip + pageMax + 1,
        signal: ctx.signal,
      });
      let seen = 0;
      let bytes = 0;
      let truncated: boolean;
      // The walk stopped before its end (this page is full, or a cap cut it): a next page reads on.
      let more: boolean;
      for (;;) {
        const step = await walk.next();
        if (step.done) {
          truncated = step.value.truncated || (params.recursive && step.value.depthLimited);
          more = step.value.truncated;
          break;
        }
        if (seen++ < skip) continue;
        if (entries.length >= pageMax) {
          truncated = more = true;
          break;
        }
        const e = step.value;
        const entry: { path: string; type: EntryType; size: number; mtimeMs: number; linkTarget?: string; mode: number; owner: string; group: string } = {
          path: e.rel,
          type: entryType(typeOf(e.stat)),
          size: e.stat.size,
          mtimeMs: e.stat.mtimeMs,
          mode: e.stat.mode & 0o7777,
          owner: ownerNames.user(e.stat.uid),
          group: ownerNames.group(e.stat.gid),
        };
        if (e.stat.isSymbolicLink()) entry.linkTarget = e.link ?? '';
        // The page ends before its JSON would pass MAX_PAGE_BYTES, so the answer always fits in a frame.
        bytes +=
          jsonBytes(entry.path) +
          (entry.linkTarget === undefined ? 0 : jsonBytes(entry.linkTarget)) +
          jsonBytes(entry.owner) +
          jsonBytes(entry.group) +
          ENTRY_JSON_BYTES;
        if (bytes > MAX_PAGE_BYTES && entries.length > 0) {
          truncated = more = true;
          break;
        }
        entries.push(entry);
      }
      // No cursor past the listing's own cap, nor after a page that found nothing new (a folder
      // over the scan cap ends the listing there for good).
      const next = skip + entries.length;
      const result = { path: target.display, entries, truncated };
      return { result: more && entries.length > 0 && next < MAX_LIST_ENTRIES ? { ...result, nextCursor: String(next) } : result };
    },

    async 'fs.glob'(params, ctx) {
      const target = await resolveFor(fs, ctx, params.path, 'read', 'glob');
      requireFolder(target, params.path);
      const isMatch = compileGlob(params.pattern);
      const segments = params.pattern.split('/');
      // A negated pattern or one with `**` can match at any depth; otherwise no deeper than its segments.
      const maxDepth = params.pattern.startsWith('!') || segments.some((s) => s.includes('**')) ? GLOB_LIMITS.maxDepth : segments.length;
      const matches: string[] = [];
      let scanned = 0;
      let truncated = false;
      const walk = walkTree(target.absolute, params.path, { maxDepth, maxVisited: GLOB_LIMITS.maxScanned, signal: ctx.signal });
      for (;;) {
        const step = await walk.next();
        if (step.done) {
          // Hitting maxDepth is expected for patterns without `**`; there only the scan caps truncate.
          if (step.value.truncated || (step.value.depthLimited && maxDepth === GLOB_LIMITS.maxDepth)) truncated = true;
          break;
        }
        scanned++;
        const e = step.value;
        if (e.stat.isDirectory() && !params.includeDirectories) continue;
        if (!isMatch(e.rel)) continue;
        if (e.stat.isFile() && !suffixAllowed(target.mount.suffixes, e.rel)) continue;
        if (matches.length >= params.maxResults) {
          truncated = true;
          break;
        }
        matches.push(e.rel);
      }
      if (scanned >= GLOB_LIMITS.maxScanned) truncated = true;
      matches.sort();
      return { result: { path: target.display, matches, truncated, scanned } };
    },

    async 'fs.mkdir'(params, ctx) {
      const target = await resolveFor(fs, ctx, params.path, 'write', 'mkdir');
      if (target.stat) {
        if (target.stat.isDirectory()) return { result: { path: target.display, created: false } };
        throw new CodedError('ALREADY_EXISTS', `'${params.path}' already exists and is a ${typeOf(target.stat)}, not a folder.`, { path: params.path });
      }
      await (
        params.parents
          ? makeFolders(fs, target.absolute, 0o755, params.path)
          : atPinnedFolder(target.absolute, params.path, async (at) => {
              await mkdir(at, { mode: 0o755 });
              await ownPath(fs, at);
            })
      ).catch((e: unknown) => {
        throw mapFsError(e, params.path);
      });
      return { result: { path: target.display, created: true } };
    },

    async 'fs.delete'(params, ctx) {
      const target = await resolveFor(fs, ctx, params.path, 'write', 'delete', { followLast: false });
      await refuseRootOrMount(fs, target, params.path, 'delete');
      const info = target.stat;
      if (!info) throw new CodedError('NOT_FOUND', `No such file or folder: '${params.path}'.`, { path: params.path });
      const type = entryType(typeOf(info));
      try {
        // In its folder pinned by a descriptor: a folder on the way swapped for a link meanwhile
        // (by this sandbox, or another one sharing a volume) cannot lead the delete elsewhere.
        await atPinnedFolder(target.absolute, params.path, async (at) => {
          if (info.isDirectory() && !params.recursive) await rmdir(at);
          else await removeAt(at, info.isDirectory());
        });
      } catch (err) {
        throw mapFsError(err, params.path);
      }
      return { result: { path: target.display, type } };
    },

    async 'fs.move'(params, ctx) {
      const from = await resolveFor(fs, ctx, params.from, 'write', 'move', { followLast: false, approval: { to: params.to } });
      const to = await resolveFor(fs, ctx, params.to, 'write', 'move', { followLast: false, approval: { to: params.to } });
      if (!from.stat) throw new CodedError('NOT_FOUND', `No such file or folder: '${params.from}'.`, { path: params.from });
      await refuseRootOrMount(fs, from, params.from, 'move');
      await refuseRootOrMount(fs, to, params.to, 'replace');
      refuseIntoItself(from, to, params.from, params.to);
      if (!from.stat.isDirectory() && !from.stat.isSymbolicLink()) {
        // A file keeps its suffix rules on both names: no renaming a refused file into a readable one.
        checkSuffix(fs.policy, from, params.from);
        checkNames(fs, to, params.to);
      }
      if (to.stat) {
        if (!params.overwrite)
          throw new CodedError('ALREADY_EXISTS', `'${params.to}' already exists; pass overwrite: true to replace it.`, { path: params.to });
        if (to.absolute === from.absolute) return { result: { from: from.display, to: to.display, type: entryType(typeOf(from.stat)) } };
        if (to.stat.isDirectory()) await atPinnedFolder(to.absolute, params.to, (at) => removeAt(at, true));
      }
      await makeFolders(fs, path.posix.dirname(to.absolute), undefined, params.to).catch((e: unknown) => {
        throw mapFsError(e, params.to);
      });
      try {
        // Both names in their folders pinned by descriptors (see fs.delete).
        await atPinnedFolder(from.absolute, params.from, (fromAt) => atPinnedFolder(to.absolute, params.to, (toAt) => rename(fromAt, toAt)));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw mapFsError(err, params.to);
        // Across file systems: copy, then delete the source (in its folder pinned, as fs.delete does).
        await copyInto(fs, ctx, from, to, params.to, true);
        const fromStat = from.stat;
        await atPinnedFolder(from.absolute, params.from, (at) => removeAt(at, fromStat.isDirectory())).catch((e: unknown) => {
          throw mapFsError(e, params.from);
        });
      }
      return { result: { from: from.display, to: to.display, type: entryType(typeOf(from.stat)) } };
    },

    async 'fs.copy'(params, ctx) {
      const from = await resolveFor(fs, ctx, params.from, 'read', 'copy', { approval: { to: params.to } });
      const to = await resolvePath(fs.policy, params.to, 'write', { followLast: false });
      if (!from.stat) throw new CodedError('NOT_FOUND', `No such file or folder: '${params.from}'.`, { path: params.from });
      refuseIntoItself(from, to, params.from, params.to);
      await refuseRootOrMount(fs, to, params.to, 'replace');
      if (to.stat) {
        if (!params.overwrite)
          throw new CodedError('ALREADY_EXISTS', `'${params.to}' already exists; pass overwrite: true to replace it.`, { path: params.to });
        if (to.absolute === from.absolute)
          throw new CodedError('INVALID_PARAMS', `'${params.from}' and '${params.to}' are the same file.`, { path: params.to });
      }
      // A folder's copy asks once per folder, file and link it writes (before any of it is in
      // place), so an approver sees every name, as it does for single writes; a file's, once.
      const approveEach = to.mount.writeApproval
        ? (display: string, bytes?: number) => approve(ctx, { operation: 'copy', path: display, ...(bytes === undefined ? {} : { bytes }) })
        : undefined;
      if (approveEach && !from.stat.isDirectory()) await approveEach(to.display, from.stat.size);
      const summary = await copyInto(fs, ctx, from, to, params.to, params.overwrite, from.stat.isDirectory() ? approveEach : undefined);
      return { result: { from: from.display, to: to.display, type: entryType(typeOf(from.stat)), ...summary } };
    },
  };
}

/** Removes the entry `at` (a name from a pinned folder): a folder with everything in it, by descriptor where /proc allows. */
async function removeAt(at: string, isDirectory: boolean): Promise<void> {
  if (!isDirectory) return unlink(at);
  return at.startsWith('/proc/self/fd/') ? removeFolderAt(at) : rm(at, { recursive: true, force: false, maxRetries: 2 });
}

function requireFolder(target: ResolvedPath, display: string): void {
  if (!target.stat) throw new CodedError('NOT_FOUND', `No such folder: '${display}'.`, { path: display });
  if (!target.stat.isDirectory()) throw new CodedError('NOT_A_DIRECTORY', `'${display}' is a ${typeOf(target.stat)}, not a folder.`, { path: display });
}

async function refuseRootOrMount(fs: FsContext, target: ResolvedPath, display: string, verb: string): Promise<void> {
  if (!target.stat) return;
  if (target.isMountRoot) {
    throw new CodedError(
      'PATH_NOT_WRITABLE',
      `Cannot ${verb} '${display}': it is a sandbox root. Act on the files inside it instead. ${describePolicy(fs.policy)}`,
      { path: display },
    );
  }
  for (const mount of mountsOf(fs.policy)) {
    if (target.stat.isDirectory() && isWithin(target.absolute, mount.root)) {
      throw new CodedError('PATH_NOT_WRITABLE', `Cannot ${verb} '${display}': it holds the sandbox root ${mount.virtual}. ${describePolicy(fs.policy)}`, {
        path: display,
      });
    }
  }
  if (target.stat.isDirectory()) {
    // A folder on another device than its parent is a mount point (a volume): never removed.
    const parent = await lstat(path.posix.dirname(target.absolute)).catch(() => undefined);
    if (parent && parent.dev !== target.stat.dev) {
      throw new CodedError('PATH_NOT_WRITABLE', `Cannot ${verb} '${display}': it is a mount point. Act on the files inside it instead.`, { path: display });
    }
  }
}

function refuseIntoItself(from: ResolvedPath, to: ResolvedPath, fromDisplay: string, toDisplay: string): void {
  if (from.stat?.isDirectory() && to.absolute !== from.absolute && isWithin(from.absolute, to.absolute)) {
    throw new CodedError('INVALID_PARAMS', `Cannot put the folder '${fromDisplay}' inside itself ('${toDisplay}').`, { from: fromDisplay, to: toDisplay });
  }
}

function checkNames(fs: FsContext, to: ResolvedPath, display: string): void {
  if (!suffixAllowed(to.mount.suffixes, to.absolute)) {
    throw new CodedError(
      'SUFFIX_NOT_ALLOWED',
      `'${display}' has a suffix this sandbox does not allow. Allowed suffixes under ${to.mount.virtual}: ${to.mount.suffixes!.join(', ')}. ${describePolicy(fs.policy)}`,
      {
        path: display,
        allowed: to.mount.suffixes,
      },
    );
  }
}

/**
 * Copies a file or a folder tree into a temporary name beside the destination, then renames it
 * into place. Links are copied only when they still point inside the destination's mount from
 * their new place; FIFOs, devices, disallowed suffixes and oversize files are skipped and named.
 * With `approveEach`, each folder, file and link is approved before it is staged; a deny removes
 * the staging folder, so nothing is in place.
 */
async function copyInto(
  fs: FsContext,
  ctx: CallContext,
  from: ResolvedPath,
  to: ResolvedPath,
  toDisplay: string,
  overwrite: boolean,
  approveEach?: (display: string, bytes?: number) => Promise<void>,
) {
  const skipped: { path: string; reason: string }[] = [];
  const skip = (p: string, reason: string) => {
    if (skipped.length < 100) skipped.push({ path: p, reason });
  };
  let files = 0;
  let bytes = 0;
  const limitOk = (size: number) => to.mount.maxFileBytes === undefined || size <= to.mount.maxFileBytes;
  const toName = path.posix.basename(to.absolute);
  const stagingName = `.${toName.slice(0, 180)}.warren-${randomBytes(6).toString('hex')}`;

  // `dest`: a name from a pinned folder (the destination's, or the staging tree's).
  const copyFile = async (srcAbs: string, srcStat: import('node:fs').Stats, dest: string, display: string) => {
    const src = await openChecked({ ...from, absolute: srcAbs, stat: srcStat }, display);
    try {
      const info = await src.stat();
      requireRegularFile(info, display);
      checkHardLinks(fs, info, display);
      const out = await open(dest, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, srcStat.mode & 0o777);
      try {
        await ownHandle(fs, out);
        const buffer = Buffer.allocUnsafe(1024 * 1024);
        for (;;) {
          if (ctx.signal.aborted) throw new CodedError('CANCELLED', 'The copy was cancelled.');
          const { bytesRead } = await src.read(buffer, 0, buffer.length);
          if (bytesRead === 0) break;
          await out.write(buffer, 0, bytesRead);
          bytes += bytesRead;
        }
        files++;
      } finally {
        await out.close();
      }
    } finally {
      await src.close();
    }
  };

  // Everything is made in the destination's folder pinned by a descriptor (made through
  // descriptors when missing), and the staging tree below it is entered segment by segment
  // without following a link: a folder swapped for a link during the copy, on the way or inside
  // the staging tree, is refused, never written through.
  await inFolder(fs, path.posix.dirname(to.absolute), toDisplay, async (dir) => {
    try {
      if (!from.stat!.isDirectory()) {
        if (from.stat!.isSymbolicLink()) throw new CodedError('UNSUPPORTED_FILE_TYPE', `'${toDisplay}': copy a link's target, not the link.`);
        requireRegularFile(from.stat, toDisplay);
        checkSuffix(fs.policy, from, toDisplay);
        checkSize(fs.policy, from, toDisplay, from.stat!.size);
        checkNames(fs, to, toDisplay);
        if (!limitOk(from.stat!.size))
          throw new CodedError(
            'FILE_TOO_LARGE',
            `'${toDisplay}' would be ${from.stat!.size} bytes; files under ${to.mount.virtual} may be at most ${to.mount.maxFileBytes} bytes.`,
          );
        await copyFile(from.absolute, from.stat!, dir.at(stagingName), toDisplay);
      } else {
        const destDisplay = (rel: string) => (to.display === '.' ? rel : `${to.display}/${rel}`);
        await approveEach?.(to.display);
        await mkdir(dir.at(stagingName), { mode: from.stat!.mode & 0o777 });
        await ownPath(fs, dir.at(stagingName));
        const staging = await pinChild(dir, stagingName, toDisplay);
        const tree = new FolderTree(staging, toDisplay);
        try {
          const walk = walkTree(from.absolute, toDisplay, { maxDepth: 64, maxVisited: MAX_COPY_ENTRIES, signal: ctx.signal });
          for (;;) {
            const step = await walk.next();
            if (step.done) {
              if (step.value.truncated || step.value.depthLimited)
                throw new CodedError(
                  'RESOURCE_EXHAUSTED',
                  `The folder has more than ${MAX_COPY_ENTRIES} entries or is deeper than 64 levels; copy it in parts.`,
                );
              break;
            }
            const e = step.value;
            if (e.stat.isDirectory()) {
              await approveEach?.(destDisplay(e.rel));
              const dest = await tree.at(e.rel);
              await mkdir(dest, { mode: e.stat.mode & 0o777 });
              await ownPath(fs, dest);
            } else if (e.stat.isFile()) {
              if (!suffixAllowed(to.mount.suffixes, e.rel) || !suffixAllowed(from.mount.suffixes, e.rel)) skip(e.rel, 'suffix not allowed');
              else if (from.mount.maxFileBytes !== undefined && e.stat.size > from.mount.maxFileBytes) skip(e.rel, 'larger than the size limit');
              else if (!limitOk(e.stat.size)) skip(e.rel, 'larger than the size limit');
              else {
                await approveEach?.(destDisplay(e.rel), e.stat.size);
                await copyFile(e.absolute, e.stat, await tree.at(e.rel), e.rel);
              }
            } else if (e.stat.isSymbolicLink()) {
              const target = e.link ?? '';
              const finalPlace = path.posix.join(to.absolute, e.rel);
              const lands = path.posix.resolve(path.posix.dirname(finalPlace), target);
              if (target === '' || target.startsWith('/') || !isWithin(to.mountRealRoot, lands)) skip(e.rel, 'symbolic link would point outside the sandbox');
              else {
                await approveEach?.(destDisplay(e.rel));
                const dest = await tree.at(e.rel);
                await symlink(target, dest);
                await ownPath(fs, dest);
              }
            } else skip(e.rel, `${typeOf(e.stat)} is not copied`);
          }
        } finally {
          await tree.close();
          await staging.close();
        }
      }
      if (to.stat && overwrite) {
        if (to.stat.isDirectory() && !from.stat!.isDirectory()) throw new CodedError('IS_A_DIRECTORY', `'${toDisplay}' is a folder; a file cannot replace it.`);
        if (to.stat.isDirectory()) await removeAt(dir.at(toName), true);
      }
      await rename(dir.at(stagingName), dir.at(toName));
    } catch (err) {
      await removeAt(dir.at(stagingName), from.stat!.isDirectory()).catch(() => undefined);
      throw mapFsError(err, toDisplay);
    }
  });
  return { files, bytes, skipped };
}
