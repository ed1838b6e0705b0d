import { execFile } from 'node:child_process';
import type { BigIntStats } from 'node:fs';
import { chmod, lchown, link, lstat, readdir, readlink, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { CodedError } from '@warren/protocol';
import { removeHostTree, REMOVE_TIMEOUT_MS } from './host-remove.js';

const run = promisify(execFile);

/**
 * Copies the contents of folder `from` into folder `to` (which exists) with GNU cp: owners, modes,
 * times, links and hard links kept, symbolic links copied as links and never followed, holes of
 * sparse files kept as holes, and blocks shared where the file system can (`--reflink=auto`).
 * Both folders are the controller's own (a sandbox's workspace as the host sees it, a snapshot's
 * copy); what lies inside is the sandbox's and is treated as data only. A full disk is
 * `RESOURCE_EXHAUSTED`.
 *
 * @example
 * await copyTree('/var/lib/docker/volumes/abc/_data', '/var/lib/warren/snapshots/.tmp-x/workspace');
 */
export async function copyTree(from: string, to: string, what: string): Promise<void> {
  try {
    await run('cp', ['-a', '--sparse=always', '--reflink=auto', '--no-target-directory', '--', `${from}/.`, to], { maxBuffer: 1024 * 1024 });
  } catch (err) {
    const stderr = hostless(errorText(err), from, to);
    if (/File name too long/.test(stderr)) throw pathTooLong(what);
    if (/No space left|Disk quota exceeded/i.test(stderr))
      throw new CodedError(
        'RESOURCE_EXHAUSTED',
        `No space left to ${what}: ${stderr.trim()}. Free disk space, delete snapshots (warren snapshot prune), or ask for a larger diskMb.`,
      );
    throw new CodedError('INTERNAL', `Could not ${what}: ${stderr.trim()}`);
  }
}

/**
 * Sandbox code can nest folders until a path is longer than the host's PATH_MAX (4096 bytes),
 * which GNU cp and a walk by path cannot copy: the capture is refused with this typed error
 * (no host path in it), and what was copied so far is removed with {@link removeTree}.
 */
function pathTooLong(what: string): CodedError {
  return new CodedError(
    'NOT_SUPPORTED',
    `Could not ${what}: it holds a path longer than the host's limit of 4096 bytes (folders nested too deep), which a snapshot cannot copy. Move or remove the deepest folders and try again.`,
  );
}

/** Empties folder `dir` (the folder itself stays), without following links, however deep it goes. */
export async function emptyTree(dir: string): Promise<void> {
  await run('find', ['-P', dir, '-xdev', '-mindepth', '1', '-delete'], { timeout: REMOVE_TIMEOUT_MS, killSignal: 'SIGKILL' }).catch((err: unknown) => {
    throw new CodedError('INTERNAL', `Could not empty a folder of the controller's: ${hostless(errorText(err), dir)}`);
  });
}

/**
 * Removes `target` and everything below it (nothing when it is absent) with {@link removeHostTree}
 * (GNU `rm -rf --one-file-system` in a child process, bounded in time), which never follows links
 * and walks by descriptor: a tree the sandbox nested deeper than PATH_MAX (4096 bytes of path)
 * goes too, where `fs.rm` fails with ENAMETOOLONG on it and would leave a snapshot's copy on the
 * host for good (and fail the next start's clean-up).
 */
export async function removeTree(target: string): Promise<void> {
  await removeHostTree(target).catch((err: unknown) => {
    throw new CodedError('INTERNAL', hostless(err instanceof Error ? err.message : String(err), target));
  });
}

/** Removes one entry of a copy: a file or link in place, a folder with {@link removeTree} (one process, whatever its depth). */
async function removeEntry(target: string): Promise<void> {
  const st = await lstat(target).catch(() => undefined);
  if (st === undefined) return;
  if (st.isDirectory()) await removeTree(target);
  else await unlink(target);
}

/** `text` with the controller's own folders replaced by `<folder>`: an error a client sees names no host path. */
function hostless(text: string, ...dirs: string[]): string {
  let out = text;
  for (const dir of dirs) if (dir !== '') out = out.split(dir).join('<folder>');
  return out;
}

/** Bytes a folder takes on disk (allocated blocks, so holes count as nothing), as `du` counts them. */
export async function diskBytes(dir: string): Promise<number> {
  const { stdout } = await run('du', ['-s', '--block-size=1', '-x', '--', dir]);
  return Number(stdout.split('\t')[0]) || 0;
}

/** What a failed command said (its stderr), or the error's message; its first and last 200 characters (the reason is at the end of a line naming a long path). */
function errorText(err: unknown): string {
  const stderr = (err as { stderr?: unknown }).stderr;
  const text = typeof stderr === 'string' && stderr !== '' ? stderr : err instanceof Error ? err.message : 'unknown error';
  return text.length > 400 ? `${text.slice(0, 200)}...${text.slice(-200)}` : text;
}

/**
 * A first copy of a sandbox's workspace made while the sandbox runs ({@link syncTree} then brings
 * it to the state at the pause). The sandbox can swap any folder for a symbolic link while `cp`
 * walks it, and `cp` walks by path, so on the host it could be led to copy host files into the
 * snapshot. `cp` therefore runs chrooted in a private mount namespace (`unshare`) whose root holds
 * only the workspace (read-only at `/from`), the destination (`/to`) and the host's `/usr`
 * (read-only, for `cp` itself): a link swapped in resolves there, never to the host's files.
 * Returns false when the namespace cannot be made (not root, no `unshare`): the caller then
 * copies everything while the sandbox is frozen, as safe, only slower. `scratch` is an empty
 * folder of the controller's that becomes the chroot's mount point (on the host it stays empty).
 */
export async function preCopyTree(from: string, to: string, scratch: string, what: string): Promise<boolean> {
  const script = [
    'set -e',
    'r="$1"; from="$2"; to="$3"',
    'mount -t tmpfs -o size=1m,mode=755 warren-precopy "$r"',
    'mkdir "$r/usr" "$r/from" "$r/to"',
    'mount --bind /usr "$r/usr"; mount -o remount,bind,ro "$r/usr"',
    'for d in bin lib lib32 lib64 sbin; do if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$r/$d"; elif [ -d "/$d" ]; then mkdir "$r/$d"; mount --bind "/$d" "$r/$d"; mount -o remount,bind,ro "$r/$d"; fi; done',
    'mount --bind "$from" "$r/from"; mount -o remount,bind,ro "$r/from"',
    'mount --bind "$to" "$r/to"',
    'echo ready >&2',
    'exec chroot "$r" /usr/bin/cp -a --sparse=always --reflink=auto --no-target-directory -- /from/. /to',
  ].join('\n');
  try {
    await run('unshare', ['--mount', '--propagation', 'private', '--', 'sh', '-c', script, 'precopy', scratch, from, to], { maxBuffer: 1024 * 1024 });
    return true;
  } catch (err) {
    const stderr = hostless(errorText(err), from, to, scratch);
    if (!/^ready$/m.test(stderr)) return false;
    if (/No space left|Disk quota exceeded/i.test(stderr))
      throw new CodedError(
        'RESOURCE_EXHAUSTED',
        `No space left to ${what}: ${stderr.trim()}. Free disk space, delete snapshots (warren snapshot prune), or ask for a larger diskMb.`,
      );
    // The sandbox changed its files under cp (a file gone between listing and reading): the pass under the freeze repairs it.
    return true;
  }
}

/** What {@link syncTree} changed in the copy. */
export interface SyncResult {
  /** Entries copied again (a changed folder counts once, with all it holds). */
  copied: number;
  /** Entries of the copy that the source no longer has, removed. */
  removed: number;
}

/**
 * Makes the copy `to` (made earlier by {@link preCopyTree}, possibly while the source changed)
 * equal to `from` now; the sandbox is frozen, so `from` holds still. Walks both trees with
 * `lstat`, never following a link: an entry whose type, size, modification time, mode or owner
 * differ, whose inode changed (ctime) since `sinceMs` less a second (timestamps are coarse: a file
 * rewritten within the same tick as the first pass keeps its size and mtime), or that the copy
 * lacks is copied again with `cp -a` (sparse-aware, hard links among the recopied kept); entries
 * only the copy has are removed; folders get back their own mode, owner and times. The copy's
 * entries are the sandbox's, so each folder of the copy is checked to be a real folder before
 * anything is done inside it.
 */
export async function syncTree(from: string, to: string, sinceMs: number, what: string): Promise<SyncResult> {
  const since = BigInt(Math.floor(sinceMs) - 1000) * 1_000_000n;
  const recopy: string[] = [];
  const linkTo = new Map<string, string>();
  const links: Array<[string, string]> = [];
  const folders: Array<{ rel: string; st: BigIntStats }> = [];
  let removed = 0;
  // False when a folder holds a name that is not UTF-8 (sandbox code may use any bytes but / and
  // NUL): such a name cannot be passed through Node's string paths or cp's arguments, so the
  // caller copies the whole folder again instead (cp handles the bytes itself).
  const walk = async (rel: string): Promise<boolean> => {
    const [raw, rawTheirs] = await Promise.all([readdir(join(from, rel), { encoding: 'buffer' }), readdir(join(to, rel), { encoding: 'buffer' })]);
    if (![...raw, ...rawTheirs].every(isUtf8Name)) return false;
    const names = raw.map((n) => n.toString('utf8'));
    const theirs = rawTheirs.map((n) => n.toString('utf8'));
    const present = new Set(names);
    for (const name of theirs)
      if (!present.has(name)) {
        await removeEntry(join(to, rel, name));
        removed++;
      }
    for (const name of names) {
      const path = rel === '' ? name : `${rel}/${name}`;
      const st = await lstat(join(from, path), { bigint: true });
      const copy = await lstat(join(to, path), { bigint: true }).catch(() => undefined);
      if (st.isDirectory() && copy?.isDirectory()) {
        const before = recopy.length + links.length + removed + folders.length;
        if (!(await walk(path))) {
          await removeTree(join(to, path));
          recopy.push(path);
          continue;
        }
        // Anything done inside moved the copy's times: they are set back from the source's.
        const touched = recopy.length + links.length + removed + folders.length !== before;
        if (touched || !sameAttributes(st, copy) || st.mtimeNs !== copy.mtimeNs || st.ctimeNs >= since) folders.push({ rel: path, st });
        continue;
      }
      const same =
        copy !== undefined &&
        sameType(st, copy) &&
        st.size === copy.size &&
        st.mtimeNs === copy.mtimeNs &&
        sameAttributes(st, copy) &&
        st.ctimeNs < since &&
        (!st.isSymbolicLink() || (await readlink(join(from, path), { encoding: 'buffer' })).equals(await readlink(join(to, path), { encoding: 'buffer' })));
      if (same) continue;
      if (copy !== undefined) await removeEntry(join(to, path));
      if (st.isFile() && st.nlink > 1n) {
        const inode = `${st.dev}:${st.ino}`;
        const first = linkTo.get(inode);
        if (first !== undefined) {
          links.push([first, path]);
          continue;
        }
        linkTo.set(inode, path);
      }
      recopy.push(path);
    }
    return true;
  };
  try {
    if (!(await walk(''))) {
      await emptyTree(to);
      await copyTree(from, to, what);
      return { copied: 1, removed: 0 };
    }
    // One cp per batch: --parents recreates each relative path under `to` (its folders exist).
    for (let i = 0; i < recopy.length; i += 500)
      await run(
        'cp',
        ['-a', '--sparse=always', '--reflink=auto', '--parents', '--target-directory', to, '--', ...recopy.slice(i, i + 500).map((p) => `./${p}`)],
        { cwd: from, maxBuffer: 1024 * 1024 },
      );
    for (const [first, other] of links) await link(join(to, first), join(to, other));
    // Deepest first, so setting a folder's times is not undone by a change inside it.
    folders.sort((a, b) => b.rel.split('/').length - a.rel.split('/').length);
    for (const { rel, st } of [...folders, { rel: '', st: await lstat(from, { bigint: true }) }]) {
      const target = join(to, rel);
      await lchown(target, Number(st.uid), Number(st.gid));
      await chmod(target, Number(st.mode & 0o7777n));
      await run('touch', ['-h', '-m', '-d', `@${st.mtimeNs / 1_000_000_000n}.${String(st.mtimeNs % 1_000_000_000n).padStart(9, '0')}`, '--', target]);
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENAMETOOLONG') throw pathTooLong(what);
    if (err instanceof CodedError) throw err;
    const stderr = hostless(errorText(err), from, to);
    if (/File name too long/.test(stderr)) throw pathTooLong(what);
    if (/No space left|Disk quota exceeded|ENOSPC|EDQUOT/i.test(stderr))
      throw new CodedError(
        'RESOURCE_EXHAUSTED',
        `No space left to ${what}: ${stderr.trim()}. Free disk space, delete snapshots (warren snapshot prune), or ask for a larger diskMb.`,
      );
    throw new CodedError('INTERNAL', `Could not ${what}: ${stderr.trim()}`);
  }
  return { copied: recopy.length + links.length, removed };
}

/** Whether a file name's bytes are valid UTF-8 (they decode and encode back unchanged). */
function isUtf8Name(name: Buffer): boolean {
  return Buffer.from(name.toString('utf8'), 'utf8').equals(name);
}

function sameType(a: BigIntStats, b: BigIntStats): boolean {
  return (a.mode & 0o170000n) === (b.mode & 0o170000n) && (!(a.isCharacterDevice() || a.isBlockDevice()) || a.rdev === b.rdev);
}

function sameAttributes(a: BigIntStats, b: BigIntStats): boolean {
  return a.mode === b.mode && a.uid === b.uid && a.gid === b.gid;
}
