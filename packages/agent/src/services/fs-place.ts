import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { link, open, rename, rmdir, symlink, unlink, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { withPinnedFolder } from '../folder-pin.js';
import type { ResolvedPath } from '../policy.js';
import { makeFolders, ownHandle, ownPath, type FsContext } from './fs-common.js';

/** A file or link written under a hidden temporary name beside its target, moved into place by {@link Placement.place}. */
export interface Staged {
  /** The target's folder (walked, physical). */
  folder: string;
  /** The target's name in it. */
  name: string;
  /** The temporary name in the same folder. */
  temp: string;
  target: ResolvedPath;
}

/** A hidden name for a temporary (`new`) or set-aside (`old`) copy of the entry `name`. */
export function hiddenName(name: string, kind: 'new' | 'old'): string {
  return `.${name.slice(0, 180)}.warren-${kind}-${randomBytes(6).toString('hex')}`;
}

/**
 * The steps of an upload, each done in its folder pinned by a descriptor and each with its undo:
 * folders made through descriptors ({@link makeFolders}), files and links written under hidden
 * temporary names, then moved into place (a file they replace set aside until {@link finish}).
 * A folder on the way swapped for a link after the checks (by this sandbox's code, or by another
 * sandbox sharing a volume) makes a step fail with `PATH_NOT_IN_SANDBOX`; {@link rollback} then
 * undoes every step, each again in its pinned folder, so nothing is made, moved or removed
 * anywhere else.
 *
 * @example
 * const placement = new Placement(fs);
 * try {
 *   await placement.makeFolders(dest.absolute, 'up');
 *   const { staged, handle } = await placement.stageFile(target, 'up/a.txt', 0o644);
 *   await handle.writeFile(bytes);
 *   await handle.close();
 *   await placement.place(staged, 'up/a.txt');
 *   await placement.finish();
 * } catch (err) {
 *   await placement.rollback();
 *   throw err;
 * }
 */
export class Placement {
  private readonly undo: (() => Promise<unknown>)[] = [];
  private readonly replaced: { folder: string; name: string; display: string }[] = [];

  constructor(private readonly fs: FsContext) {}

  /** Makes `folder` and its missing parents (undone in reverse by rollback). */
  async makeFolders(folder: string, display: string, mode?: number): Promise<void> {
    for (const dir of await makeFolders(this.fs, folder, mode, display)) {
      this.undo.push(() => inFolderOf(dir, display, (at) => rmdir(at)));
    }
  }

  /** Creates the temporary file of `target` (O_EXCL, O_NOFOLLOW, in its pinned folder), handed to the sandbox user. */
  async stageFile(target: ResolvedPath, display: string, mode: number): Promise<{ staged: Staged; handle: FileHandle }> {
    const staged = this.staged(target);
    return withPinnedFolder(staged.folder, display, undefined, async (dir) => {
      const handle = await open(dir.at(staged.temp), constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
      this.undo.push(() => inFolderOf(path.posix.join(staged.folder, staged.temp), display, (at) => unlink(at)));
      try {
        await ownHandle(this.fs, handle);
      } catch (err) {
        await handle.close().catch(() => undefined);
        throw err;
      }
      return { staged, handle };
    });
  }

  /** Creates the temporary link of `target` in its pinned folder, handed to the sandbox user. */
  async stageLink(target: ResolvedPath, display: string, linkname: string): Promise<Staged> {
    const staged = this.staged(target);
    await withPinnedFolder(staged.folder, display, undefined, async (dir) => {
      await symlink(linkname, dir.at(staged.temp));
      this.undo.push(() => inFolderOf(path.posix.join(staged.folder, staged.temp), display, (at) => unlink(at)));
      await ownPath(this.fs, dir.at(staged.temp));
    });
    return staged;
  }

  /**
   * Moves a staged entry into place in its pinned folder: a file there is set aside first (put
   * back by rollback); a new name is taken with link(2), which fails when something appeared at
   * it since the checks, so nothing is replaced unseen.
   */
  async place(staged: Staged, display: string): Promise<void> {
    await withPinnedFolder(staged.folder, display, undefined, async (dir) => {
      if (staged.target.stat) {
        const aside = hiddenName(staged.name, 'old');
        await rename(dir.at(staged.name), dir.at(aside));
        this.undo.push(() => withPinnedFolder(staged.folder, display, undefined, (back) => rename(back.at(aside), back.at(staged.name))));
        this.replaced.push({ folder: staged.folder, name: aside, display });
        await rename(dir.at(staged.temp), dir.at(staged.name));
      } else {
        await link(dir.at(staged.temp), dir.at(staged.name));
        await unlink(dir.at(staged.temp));
      }
      this.undo.push(() => inFolderOf(path.posix.join(staged.folder, staged.name), display, (at) => unlink(at)));
    });
  }

  /** Undoes every step, newest first; a step that fails is skipped. */
  async rollback(): Promise<void> {
    for (const step of this.undo.reverse()) await step().catch(() => undefined);
    this.undo.length = 0;
  }

  /** Keeps every step: the replaced files set aside are removed. */
  async finish(): Promise<void> {
    this.undo.length = 0;
    for (const { folder, name, display } of this.replaced) await inFolderOf(path.posix.join(folder, name), display, (at) => unlink(at)).catch(() => undefined);
    this.replaced.length = 0;
  }

  private staged(target: ResolvedPath): Staged {
    const name = path.posix.basename(target.absolute);
    return { folder: path.posix.dirname(target.absolute), name, temp: hiddenName(name, 'new'), target };
  }
}

/** Runs `act` on the entry `absolute` inside its folder pinned by a descriptor. */
function inFolderOf<T>(absolute: string, display: string, act: (at: string) => Promise<T>): Promise<T> {
  return withPinnedFolder(path.posix.dirname(absolute), display, undefined, (dir) => act(dir.at(path.posix.basename(absolute))));
}
