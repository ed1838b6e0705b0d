import { createHash, randomBytes } from 'node:crypto';
import type { Stats } from 'node:fs';
import { constants } from 'node:fs';
import { lchown, link, lstat, open, rename, unlink, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { allocFramePayload, CodedError, describePolicy, MAX_WRITE_GAP_BYTES, type ApprovalRequest, type FilePolicy } from '@warren/protocol';
import type { CallContext } from '../dispatch.js';
import { pinFolder, withPinnedFolder, type PinnedFolder } from '../folder-pin.js';
import { checkSize, checkSuffix, openChecked, requireRegularFile, resolvePath, type Intent, type ResolvedPath, type ResolveOptions } from '../policy.js';
import { mapFsError } from '../fs-error.js';

/** What every file handler needs: the connection's policy, and who new files belong to. */
export interface FsContext {
  policy: FilePolicy;
  /**
   * The sandbox user. The daemon runs as root, so every file, folder and link it creates is handed
   * to this user (through the descriptor where there is one, never following a link), and a file
   * it replaces keeps its owner. Absent, new files keep the daemon's own identity.
   */
  owner?: { uid: number; gid: number } | undefined;
}

/** Hands a file the daemon just created, through its descriptor, to `owner` (or to the sandbox user). */
export async function ownHandle(fs: FsContext, handle: FileHandle, owner: { uid: number; gid: number } | undefined = fs.owner): Promise<void> {
  if (owner) await handle.chown(owner.uid, owner.gid);
}

/** Hands a folder or link the daemon just created to the sandbox user, without following a link. */
export async function ownPath(fs: FsContext, target: string): Promise<void> {
  if (fs.owner) await lchown(target, fs.owner.uid, fs.owner.gid);
}

/**
 * `mkdir -p` through descriptors ({@link pinFolder}): every folder it makes (not those that were
 * there) is made in its parent's descriptor and handed to the sandbox user; a link swapped in on
 * the way is refused (`PATH_NOT_IN_SANDBOX`), never followed. Resolves the folders made, parents
 * first.
 */
export async function makeFolders(fs: FsContext, folder: string, mode?: number, display: string = folder): Promise<string[]> {
  const made: string[] = [];
  const dir = await pinFolder(folder, display, { mode, owner: fs.owner, made });
  await dir.close();
  return made;
}

/** Pins `folder`, making it and its missing parents as {@link makeFolders} does, and runs `act` in it. */
export function inFolder<T>(fs: FsContext, folder: string, display: string, act: (dir: PinnedFolder) => Promise<T>, made?: string[]): Promise<T> {
  return withPinnedFolder(folder, display, { owner: fs.owner, made }, act);
}

/**
 * Resolves a path and asks for approval when its mount wants it (seed 001's `read_approval` /
 * `write_approval`). No approver on the connection, a deny, or no answer in time: `APPROVAL_DENIED`.
 */
export async function resolveFor(
  fs: FsContext,
  ctx: CallContext,
  input: string,
  intent: Intent,
  operation: string,
  options: ResolveOptions & { approval?: Omit<ApprovalRequest, 'operation' | 'path'> } = {},
): Promise<ResolvedPath> {
  const resolved = await resolvePath(fs.policy, input, intent, options);
  const needs = intent === 'write' ? resolved.mount.writeApproval : resolved.mount.readApproval;
  if (needs) await approve(ctx, { operation, path: resolved.display, ...options.approval });
  return resolved;
}

/** Asks the caller's `onApproval` handler; throws `APPROVAL_DENIED` unless it allows. */
export async function approve(ctx: CallContext, request: ApprovalRequest): Promise<void> {
  const allowed = ctx.requestApproval ? await ctx.requestApproval(request).catch(() => false) : false;
  if (!allowed) {
    throw new CodedError(
      'APPROVAL_DENIED',
      `${request.operation} of '${request.path}' needs approval and was not approved (no handler, a deny, or no answer in time).`,
      {
        operation: request.operation,
        path: request.path,
      },
    );
  }
}

export function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/**
 * A hard link is a second name of the same file, and it may sit outside the paths a narrowed
 * handle (a `derive()` allow-list, or one of several named paths on one file system) may read.
 * Such a handle does not read multiply-linked files. A plain root is the whole workspace volume,
 * so every name of its files is inside it, and it reads them. Whole-file writes never go through a
 * hard link (they replace the name); writes in place (append, offset) do, so they are checked too.
 */
export function checkHardLinks(fs: FsContext, info: Stats, display: string): void {
  if (info.isFile() && info.nlink > 1 && (fs.policy.restrict !== undefined || 'paths' in fs.policy)) {
    throw new CodedError(
      'PATH_NOT_IN_SANDBOX',
      `'${display}' has ${info.nlink} hard links; this handle only reads or changes in place files whose one name is inside its paths (another name may be outside them). ${describePolicy(fs.policy)}`,
      {
        path: display,
        nlink: info.nlink,
      },
    );
  }
}

/** Reads a whole regular file through {@link openChecked}, applying the mount's suffix and size rules. */
function tooLargeToRead(display: string, cap: number): CodedError {
  return new CodedError(
    'FILE_TOO_LARGE',
    `'${display}' holds more than ${cap} bytes; this call reads at most ${cap} bytes at once. Read a range instead (bytes, lines or chars).`,
    { path: display, limit: cap },
  );
}

export async function readWhole(fs: FsContext, resolved: ResolvedPath, display: string, cap: number): Promise<{ bytes: Buffer; info: Stats }> {
  requireRegularFile(resolved.stat, display);
  checkSuffix(fs.policy, resolved, display);
  checkSize(fs.policy, resolved, display, resolved.stat!.size);
  if (resolved.stat!.size > cap) {
    throw new CodedError(
      'FILE_TOO_LARGE',
      `'${display}' is ${resolved.stat!.size} bytes; this call reads at most ${cap} bytes at once. Read a range instead (bytes, lines or chars).`,
      {
        path: display,
        size: resolved.stat!.size,
        limit: cap,
      },
    );
  }
  const handle = await openChecked(resolved, display);
  try {
    const info = await handle.stat();
    requireRegularFile(info, display);
    checkHardLinks(fs, info, display);
    const bytes = await readBounded(handle, cap, () => tooLargeToRead(display, cap), info.size);
    return { bytes, info };
  } finally {
    await handle.close();
  }
}

/**
 * Reads an open file to its end, holding at most `limit` bytes: the count is of the bytes actually
 * read, since a file can hold more than its size said when it was looked at (it grew, or it is
 * sparse and its size was never checked). Past the limit, `tooLarge()` is thrown; nothing larger
 * than `limit + 1` bytes is ever allocated.
 */
export async function readBounded(handle: FileHandle, limit: number, tooLarge: () => CodedError, sizeHint = 0): Promise<Buffer> {
  // Sized by the hint, with room for an answer's header before it: a whole-file read is sent without a copy.
  let buffer = allocFramePayload(Math.min(limit + 1, Math.max(sizeHint + 1, 64 * 1024)));
  let total = 0;
  for (;;) {
    if (total === buffer.length) {
      if (total > limit) throw tooLarge();
      const grown = Buffer.allocUnsafe(Math.min(limit + 1, buffer.length * 2));
      buffer.copy(grown, 0, 0, total);
      buffer = grown;
    }
    const { bytesRead } = await handle.read(buffer, total, buffer.length - total, null);
    if (bytesRead === 0) break;
    total += bytesRead;
  }
  if (total > limit) throw tooLarge();
  return buffer.subarray(0, total);
}

/** The SHA-256 of an open file, read in pieces; past `limit` bytes actually read, `tooLarge()` is thrown. */
export async function hashBounded(handle: FileHandle, limit: number, tooLarge: () => CodedError): Promise<string> {
  const hash = createHash('sha256');
  const piece = Buffer.allocUnsafe(1024 * 1024);
  let total = 0;
  for (;;) {
    const { bytesRead } = await handle.read(piece, 0, piece.length, null);
    if (bytesRead === 0) return hash.digest('hex');
    total += bytesRead;
    if (total > limit) throw tooLarge();
    hash.update(piece.subarray(0, bytesRead));
  }
}

/** Decodes UTF-8 text, refusing bytes that would not survive a round trip (an edit must not corrupt them). */
export function decodeText(bytes: Buffer, display: string): string {
  try {
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new CodedError(
      'UNSUPPORTED_FILE_TYPE',
      `'${display}' is not UTF-8 text; line and text edits only change UTF-8 text files. Write the whole file instead.`,
      { path: display },
    );
  }
}

export interface AtomicWriteOptions {
  /** Permission bits for a new file. */
  mode?: number | undefined;
  /** false: `ALREADY_EXISTS` when the file exists (checked atomically with link(2)). */
  overwrite?: boolean;
  /** The file must still be this one (dev, ino, size, mtime), else `CONFLICT`: edits pass what they read. */
  unchangedSince?: Stats | undefined;
}

/**
 * Appends to a file in place (creating it with `mode` when missing): not atomic, so callers use it
 * on a name no reader expects yet. The size limit applies to the file's total.
 */
export async function appendWrite(fs: FsContext, resolved: ResolvedPath, display: string, content: Uint8Array, mode = 0o644): Promise<{ created: boolean }> {
  checkSuffix(fs.policy, resolved, display);
  checkSize(fs.policy, resolved, display, (resolved.stat?.size ?? 0) + content.length);
  if (resolved.stat) {
    requireRegularFile(resolved.stat, display);
    const handle = await openChecked(resolved, display, constants.O_WRONLY | constants.O_APPEND);
    try {
      checkHardLinks(fs, await handle.stat(), display);
      await writeAll(handle, content, null, display);
    } finally {
      await handle.close();
    }
    return { created: false };
  }
  // A new file: made in its folder pinned by a descriptor (missing folders made through descriptors too).
  await inFolder(fs, path.posix.dirname(resolved.absolute), display, async (dir) => {
    const handle = await open(
      dir.at(path.posix.basename(resolved.absolute)),
      constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      mode,
    ).catch((e: unknown) => {
      throw mapFsError(e, display);
    });
    try {
      await ownHandle(fs, handle);
      await writeAll(handle, content, null, display);
    } finally {
      await handle.close();
    }
  });
  return { created: true };
}

/**
 * Writes `content` at byte `offset` of an existing regular file, in place and without truncating
 * it (pwrite(2)); several such writes to one file may run at once. Not atomic, so callers use it on
 * a name no reader expects yet. The file is opened through {@link openChecked} (no link followed,
 * the file the walk saw); the size limit applies to where the content ends (or the file's current
 * size, if larger), and the offset may lie at most `MAX_WRITE_GAP_BYTES` past the current end. A
 * missing file is `NOT_FOUND`, never created: a piece that arrives after its temporary file was
 * removed must not bring it back.
 */
export async function offsetWrite(fs: FsContext, resolved: ResolvedPath, display: string, content: Uint8Array, offset: number): Promise<void> {
  checkSuffix(fs.policy, resolved, display);
  if (!resolved.stat) {
    throw new CodedError(
      'NOT_FOUND',
      `No such file: '${display}'. A write at an offset changes an existing file; create it first with a write without offset.`,
      { path: display },
    );
  }
  requireRegularFile(resolved.stat, display);
  const handle = await openChecked(resolved, display, constants.O_WRONLY);
  try {
    const info = await handle.stat();
    checkHardLinks(fs, info, display);
    const size = info.size;
    if (offset > size + MAX_WRITE_GAP_BYTES) {
      throw new CodedError(
        'INVALID_PARAMS',
        `offset ${offset} is ${offset - size} bytes past the end of '${display}' (${size} bytes); a write at an offset may start at most ${MAX_WRITE_GAP_BYTES} bytes past the end. Write the content before it first.`,
        {
          path: display,
          offset,
          size,
          maxGap: MAX_WRITE_GAP_BYTES,
        },
      );
    }
    checkSize(fs.policy, resolved, display, Math.max(size, offset + content.length));
    await writeAll(handle, content, offset, display);
  } finally {
    await handle.close();
  }
}

/** Writes all of `content` at `position` (null: the file's current position), however many write(2) calls it takes. */
async function writeAll(handle: FileHandle, content: Uint8Array, position: number | null, display: string): Promise<void> {
  try {
    for (let done = 0; done < content.length;) {
      const { bytesWritten } = await handle.write(content, done, content.length - done, position === null ? null : position + done);
      done += bytesWritten;
    }
  } catch (err) {
    // EFBIG: past the largest file this file system holds.
    if ((err as NodeJS.ErrnoException).code === 'EFBIG')
      throw new CodedError('FILE_TOO_LARGE', `Writing '${display}' there would make it larger than its file system allows.`, { path: display });
    throw mapFsError(err, display);
  }
}

/**
 * Writes a file atomically: a temporary file in the same folder (created O_EXCL|O_NOFOLLOW and
 * checked to be where it should be), then rename(2) over the target, so a reader sees the old or
 * the new content and a hard link to the old file is left untouched. An existing file keeps its
 * permission bits.
 */
export async function atomicWrite(
  fs: FsContext,
  resolved: ResolvedPath,
  display: string,
  content: Uint8Array,
  options: AtomicWriteOptions = {},
): Promise<{ created: boolean }> {
  checkSuffix(fs.policy, resolved, display);
  checkSize(fs.policy, resolved, display, content.length);
  if (resolved.stat) {
    if (resolved.stat.isDirectory()) throw new CodedError('IS_A_DIRECTORY', `'${display}' is a folder, not a file.`, { path: display });
    requireRegularFile(resolved.stat, display);
    if (options.overwrite === false)
      throw new CodedError('ALREADY_EXISTS', `'${display}' already exists; pass overwrite: true to replace it.`, { path: display });
  }
  const mode = resolved.stat ? resolved.stat.mode & 0o777 : (options.mode ?? 0o644);
  const name = path.posix.basename(resolved.absolute);
  const tempName = `.${name.slice(0, 180)}.warren-${randomBytes(6).toString('hex')}`;
  // Every step in the target's folder pinned by a descriptor (made through descriptors when
  // missing): a folder on the way swapped for a link meanwhile, by this sandbox or by another one
  // sharing a volume, can neither move the file elsewhere nor make anything there.
  await inFolder(fs, path.posix.dirname(resolved.absolute), display, async (dir) => {
    const handle = await open(dir.at(tempName), constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode).catch((e: unknown) => {
      throw mapFsError(e, display);
    });
    let renamed = false;
    try {
      // A replaced file keeps its owner; a new one is the sandbox user's.
      await ownHandle(fs, handle, fs.owner && resolved.stat ? { uid: resolved.stat.uid, gid: resolved.stat.gid } : fs.owner);
      await handle.writeFile(content);
      await handle.chmod(mode);
      await handle.close();
      if (options.unchangedSince) {
        const now = await lstat(dir.at(name)).catch(() => undefined);
        const was = options.unchangedSince;
        if (!now || now.ino !== was.ino || now.dev !== was.dev || now.size !== was.size || now.mtimeMs !== was.mtimeMs) {
          throw new CodedError('CONFLICT', `'${display}' changed while it was being edited; read it again and retry.`, { path: display });
        }
      }
      if (options.overwrite === false) {
        await link(dir.at(tempName), dir.at(name)).catch((e: unknown) => {
          throw (e as NodeJS.ErrnoException).code === 'EEXIST'
            ? new CodedError('ALREADY_EXISTS', `'${display}' already exists; pass overwrite: true to replace it.`, { path: display })
            : mapFsError(e, display);
        });
        await unlink(dir.at(tempName));
      } else {
        await rename(dir.at(tempName), dir.at(name));
      }
      renamed = true;
    } catch (err) {
      throw mapFsError(err, display);
    } finally {
      await handle.close().catch(() => undefined);
      if (!renamed) await unlink(dir.at(tempName)).catch(() => undefined);
    }
  });
  return { created: !resolved.stat };
}

/** The "what IS allowed" sentence for a policy. */
export function allowedText(fs: FsContext): string {
  return describePolicy(fs.policy);
}
