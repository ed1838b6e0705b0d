import { closeSync, constants, lstatSync, openSync, readlinkSync } from 'node:fs';
import { lchown, mkdir, open, readlink, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { CodedError } from '@warren/protocol';
import { mapFsError } from './fs-error.js';

/** How many folders of one {@link FolderTree} stay open at once; the oldest is closed (and reopened when needed). */
const TREE_OPEN_FOLDERS = 32;

/** Who folders made on the way belong to, and their mode. */
export interface MakeOptions {
  /** Permission bits of each folder made (the umask applies, as with mkdir(2)). */
  mode?: number | undefined;
  /** Handed every folder made, through its descriptor. */
  owner?: { uid: number; gid: number } | undefined;
  /** Each folder made is pushed here (its walked path), parents first. */
  made?: string[] | undefined;
}

/**
 * A folder held open by a descriptor. {@link PinnedFolder.at} names an entry inside it as
 * `/proc/self/fd/<n>/<name>`: the kernel resolves that from the open folder, never by walking the
 * folder's path again, so a folder on the way swapped for a link after the policy check cannot
 * redirect what is made, opened, renamed or removed there. Without /proc, names are plain paths.
 */
export interface PinnedFolder {
  /** The folder's walked, physical path. */
  readonly path: string;
  /** True when entries are reached through the descriptor (the container has /proc). */
  readonly byDescriptor: boolean;
  /** The name to act on for the entry `name` (one segment) of this folder. */
  at(name: string): string;
  close(): Promise<void>;
}

/** The error for a folder on the way that is a link (swapped in since the policy check) or moved. */
export function swappedOnTheWay(display: string, folder: string): CodedError {
  return new CodedError(
    'PATH_NOT_IN_SANDBOX',
    `'${display}': the folder '${path.posix.basename(folder) || '/'}' on the way was replaced by a symbolic link or moved during the call; file calls make and enter folders only through real folders, never through a link. Nothing was done past it; try again.`,
    { path: display },
  );
}

function pinned(handle: FileHandle | undefined, folder: string): PinnedFolder {
  const byDescriptor = handle !== undefined;
  return {
    path: folder,
    byDescriptor,
    at: (name) => (byDescriptor ? `/proc/self/fd/${handle.fd}/${name}` : path.posix.join(folder, name)),
    close: async () => {
      await handle?.close().catch(() => undefined);
    },
  };
}

/**
 * Pins the folder `folder` (a physical path from `resolvePath`, with every link already replaced
 * by its target). It is opened and checked, by the kernel's own name for the descriptor, to be
 * the folder at that path. With `make`, missing folders are made on the way, one segment at a
 * time from `/` through descriptors: each segment is opened with O_NOFOLLOW (a link there is
 * refused, never followed), made with mkdir(2) in its parent's descriptor when missing, and
 * handed to `make.owner` through its own descriptor. So no folder is ever made, and no owner
 * changed, outside the path that passed the policy, whatever another process (this sandbox's
 * code, or another sandbox sharing a volume) swaps on the way meanwhile.
 *
 * @example
 * const dir = await pinFolder('/workspace/a/b', 'a/b', { owner: { uid: 1000, gid: 1000 } });
 * try {
 *   await writeFile(dir.at('c.txt'), 'made in the folder the policy checked');
 * } finally {
 *   await dir.close();
 * }
 */
export async function pinFolder(folder: string, display: string, make?: MakeOptions): Promise<PinnedFolder> {
  // The usual case, a folder that exists, synchronously as the policy walk does: each call takes
  // microseconds, a trip through the thread pool costs more than that.
  let fd: number;
  try {
    fd = openSync(folder, constants.O_RDONLY | constants.O_DIRECTORY);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' && make) return makeWalk(folder, display, make);
    throw mapFsError(err, display);
  }
  let actual: string | undefined;
  try {
    actual = readlinkSync(`/proc/self/fd/${fd}`);
  } catch {
    actual = undefined;
  }
  if (actual === undefined) {
    // No /proc: the plain paths stand alone, as they did before the descriptor checks.
    closeSync(fd);
    return pinned(undefined, folder);
  }
  if (actual !== folder) {
    closeSync(fd);
    throw swappedOnTheWay(display, folder);
  }
  return pinnedFd(fd, folder);
}

function pinnedFd(fd: number, folder: string): PinnedFolder {
  let held = true;
  return {
    path: folder,
    byDescriptor: true,
    at: (name) => `/proc/self/fd/${fd}/${name}`,
    close: () => {
      if (held) {
        held = false;
        try {
          closeSync(fd);
        } catch {
          // already closed
        }
      }
      return Promise.resolve();
    },
  };
}

/** Runs `act` with `folder` pinned (see {@link pinFolder}), and closes it after. */
export async function withPinnedFolder<T>(folder: string, display: string, make: MakeOptions | undefined, act: (dir: PinnedFolder) => Promise<T>): Promise<T> {
  const dir = await pinFolder(folder, display, make);
  try {
    return await act(dir);
  } finally {
    await dir.close();
  }
}

/**
 * Runs `act` on the name of `absolute` (a walked, physical path) inside its folder pinned by a
 * descriptor ({@link pinFolder}): `act` gets `/proc/self/fd/<n>/<name>`, which the kernel resolves
 * from that open folder, not by path again. So a `rename`, `unlink`, `rmdir` or `mkdir` cannot be
 * redirected by a folder on the way swapped for a link after the check: not by this sandbox's
 * code, and not by another sandbox that shares a named volume with it (whose links resolve here,
 * to files a narrowed handle of this sandbox was not given). Without /proc, `act` gets `absolute`.
 */
export function atPinnedFolder<T>(absolute: string, display: string, act: (name: string) => Promise<T>): Promise<T> {
  return withPinnedFolder(path.posix.dirname(absolute), display, undefined, (dir) => act(dir.at(path.posix.basename(absolute))));
}

/** Opens one segment below an open folder without following a link; a link there is a swap. */
async function openChild(parent: FileHandle, name: string, display: string, here: string): Promise<FileHandle> {
  const at = `/proc/self/fd/${parent.fd}/${name}`;
  try {
    return await open(at, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ELOOP') throw swappedOnTheWay(display, here);
    if (code === 'ENOTDIR') {
      let link: boolean;
      try {
        link = lstatSync(at).isSymbolicLink();
      } catch {
        link = false;
      }
      if (link) throw swappedOnTheWay(display, here);
    }
    throw err;
  }
}

async function makeWalk(folder: string, display: string, make: MakeOptions): Promise<PinnedFolder> {
  let current = await open('/', constants.O_RDONLY | constants.O_DIRECTORY);
  if ((await readlink(`/proc/self/fd/${current.fd}`).catch(() => undefined)) === undefined) {
    // No /proc: mkdir -p by path, as before the descriptor walk.
    await current.close();
    const first = await mkdir(folder, { recursive: true, ...(make.mode !== undefined && { mode: make.mode }) }).catch((e: unknown) => {
      throw mapFsError(e, display);
    });
    if (first !== undefined) {
      const below = path.posix
        .relative(first, folder)
        .split('/')
        .filter((s) => s !== '');
      const made = [first, ...below.map((_, i) => path.posix.join(first, ...below.slice(0, i + 1)))];
      if (make.owner) for (const dir of made) await lchown(dir, make.owner.uid, make.owner.gid);
      make.made?.push(...made);
    }
    return pinned(undefined, folder);
  }
  let here = '/';
  try {
    for (const part of folder.split('/')) {
      if (part === '' || part === '.') continue;
      if (part === '..') throw swappedOnTheWay(display, here);
      const next = here === '/' ? `/${part}` : `${here}/${part}`;
      let child: FileHandle | undefined;
      let madeIt = false;
      for (let attempt = 0; child === undefined; attempt++) {
        try {
          child = await openChild(current, part, display, next);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || attempt >= 3) throw err;
          try {
            await mkdir(`/proc/self/fd/${current.fd}/${part}`, make.mode === undefined ? undefined : { mode: make.mode });
            madeIt = true;
          } catch (made) {
            if ((made as NodeJS.ErrnoException).code !== 'EEXIST') throw made;
          }
        }
      }
      await current.close();
      current = child;
      here = next;
      if (madeIt) {
        if (make.owner) await current.chown(make.owner.uid, make.owner.gid);
        make.made?.push(here);
      }
    }
    return pinned(current, folder);
  } catch (err) {
    await current.close().catch(() => undefined);
    throw mapFsError(err, display);
  }
}

/**
 * A tree of folders below one pinned folder, reached segment by segment through descriptors
 * (O_NOFOLLOW at each step, so a folder inside swapped for a link is refused, never entered).
 * The few most recently used folders stay open. A copy builds its staging tree through it.
 *
 * @example
 * const tree = new FolderTree(staging, 'copy');
 * await mkdir(await tree.at('a'));
 * await writeFile(await tree.at('a/b.txt'), 'x'); // made in staging/a, whatever 'a' became meanwhile
 * await tree.close();
 */
export class FolderTree {
  private readonly folders = new Map<string, FileHandle>();

  constructor(
    private readonly root: PinnedFolder,
    private readonly display: string,
  ) {}

  /**
   * The name to act on for the entry `rel` ('/'-separated, below the root): valid until the next
   * call of this tree, so use it at once.
   */
  async at(rel: string): Promise<string> {
    const parent = path.posix.dirname(rel);
    const name = path.posix.basename(rel);
    if (!this.root.byDescriptor) return path.posix.join(this.root.path, rel);
    if (parent === '.') return this.root.at(name);
    return `/proc/self/fd/${(await this.folder(parent)).fd}/${name}`;
  }

  private async folder(rel: string): Promise<FileHandle> {
    const open = this.folders.get(rel);
    if (open) {
      // Most recently used last.
      this.folders.delete(rel);
      this.folders.set(rel, open);
      return open;
    }
    const parent = path.posix.dirname(rel);
    const name = path.posix.basename(rel);
    const at = parent === '.' ? this.root.at(name) : `/proc/self/fd/${(await this.folder(parent)).fd}/${name}`;
    let handle: FileHandle;
    try {
      handle = await openPlain(at);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ELOOP' || code === 'ENOTDIR') throw swappedOnTheWay(this.display, rel);
      throw mapFsError(err, this.display);
    }
    this.folders.set(rel, handle);
    if (this.folders.size > TREE_OPEN_FOLDERS) {
      const [oldest, oldHandle] = this.folders.entries().next().value!;
      this.folders.delete(oldest);
      await oldHandle.close().catch(() => undefined);
    }
    return handle;
  }

  async close(): Promise<void> {
    for (const handle of this.folders.values()) await handle.close().catch(() => undefined);
    this.folders.clear();
  }
}

function openPlain(at: string): Promise<FileHandle> {
  return open(at, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
}

/**
 * Pins the folder `name` inside a pinned folder, opened without following a link (a link there
 * is refused as a swap).
 *
 * @example
 * const staging = await pinChild(dir, '.copy.warren-1a2b', 'a/b');
 */
export async function pinChild(dir: PinnedFolder, name: string, display: string): Promise<PinnedFolder> {
  const folder = path.posix.join(dir.path, name);
  if (!dir.byDescriptor) return pinned(undefined, folder);
  try {
    return pinned(await openPlain(dir.at(name)), folder);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ELOOP' || code === 'ENOTDIR') throw swappedOnTheWay(display, folder);
    throw mapFsError(err, display);
  }
}
