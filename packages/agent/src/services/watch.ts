import { closeSync, constants, fstatSync, lstatSync, opendirSync, openSync, readlinkSync, type BigIntStats, type Dir } from 'node:fs';
import path from 'node:path';
import { CodedError, MAX_PENDING_WATCH_EVENTS, MAX_WATCHED_FOLDERS, type FilePolicy, type WatchChange, type WatchChangeType } from '@warren/protocol';
import type { CallContext, Handler } from '../dispatch.js';
import { MAX_DIR_SCAN } from './fs-walk.js';
import { displayPhysical, mayReadFound, reservedPlace, resolvePath, type ResolvedPath } from '../policy.js';
import { IN, Inotify, type KernelListener } from './inotify.js';
import { WatchBudget, type WatchAccount } from './watch-budget.js';

/** The most changes one `changes` event carries; a larger batch goes out as several events. */
const CHANGES_PER_EVENT = 512;
/** Folders armed per trip to the watch thread. */
const ARM_BATCH = 128;
/** Names looked up, or read from a folder, before the rest of the daemon gets a turn of the event loop. */
const TURN_WORK = 256;
/** What the kernel says when a watched folder itself went away (or its file system did). */
const SELF_GONE = IN.DELETE_SELF | IN.MOVE_SELF | IN.UNMOUNT | IN.IGNORED;

let activeWatches = 0;
let watchedFolders = 0;

/**
 * What this process's watches hold now: running watches, the folders they watch, and the kernel
 * side (watches held by the watch thread, and whether its one inotify instance exists). Watches
 * and folders return to zero when every watch has ended, which is how tests see nothing leaks.
 */
export function watchCounts(): { watches: number; folders: number } {
  return { watches: activeWatches, folders: watchedFolders };
}

/** The kernel side of {@link watchCounts}: inotify watches held, and inotify instances (0 or 1). */
export function inotifyCounts(): { handles: number; instances: number } {
  return Inotify.shared().counts();
}

/** Limits of one {@link TreeWatcher}, overridable for tests. */
export interface WatchLimits {
  maxFolders: number;
  maxPending: number;
}

interface Folder {
  handle: number;
  wd: number;
  dev: bigint;
  ino: bigint;
  parent: string | undefined;
  children: Set<string>;
}

interface WalkItem {
  absolute: string;
  parent: string | undefined;
  /** Report what the folder holds as created: it appeared after the watch was armed. */
  report: boolean;
}

type OverflowReason = 'queue' | 'watch-limit' | 'kernel';
const OVERFLOW_RANK: Record<OverflowReason, number> = { queue: 0, kernel: 1, 'watch-limit': 2 };

const yieldTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

const change = (type: WatchChangeType, absolute: string, directory: boolean): WatchChange => ({
  type,
  path: absolute,
  ...(directory ? { directory: true } : {}),
});

/** `ino:sdev` in hex, as /proc's fdinfo prints a kernel watch (sdev in the kernel's own encoding of a device number). */
function kernelKey(info: BigIntStats): string {
  const major = ((info.dev >> 8n) & 0xfffn) | ((info.dev >> 32n) & ~0xfffn);
  const minor = (info.dev & 0xffn) | ((info.dev >> 12n) & ~0xffn);
  return `${info.ino.toString(16)}:${((major << 20n) | minor).toString(16)}`;
}

/**
 * Opens a folder by its physical path without passing through a link anywhere on the way: the
 * last name is opened O_NOFOLLOW, and the kernel's own name for what was opened must be the path
 * itself (a link on the way, or a folder moved, gives another name).
 */
function openFolder(absolute: string): number | undefined {
  let fd: number;
  try {
    fd = openSync(absolute, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return undefined;
  }
  try {
    if (readlinkSync(`/proc/self/fd/${fd}`) === absolute) return fd;
  } catch {
    // no name: not the folder we meant
  }
  closeSync(fd);
  return undefined;
}

/**
 * Watches one folder tree with inotify, one kernel watch per folder, and turns what the kernel
 * reports into coalesced, policy-filtered changes.
 *
 * - **Never holds the daemon.** The kernel's events are read by {@link Inotify} a bounded piece
 *   per turn of the event loop and only gathered here (a mask per path); each batch is looked up
 *   and folders are read a few hundred names per turn, so a process making changes as fast as it
 *   can costs turns, and other calls keep answering.
 * - **No link is followed.** Each folder is opened `O_NOFOLLOW`, checked by the kernel's name for
 *   the descriptor, and watched through the descriptor; a batch's names are looked up inside the
 *   folder's descriptor after the folder is found again at its path with the same identity. A
 *   folder that moved, vanished or became a link is dropped with everything below it, and its
 *   names are not reported.
 * - **Bounded, and says so.** At most `maxFolders` folders (and the connection's share of the
 *   sandbox's {@link WatchBudget}), at most `maxPending` paths between two batches; past either,
 *   and when the kernel's own queue overflows, changes are dropped and counted, and an `overflow`
 *   event tells the client to rescan. A congested client connection holds batches back (the cap
 *   still applies).
 * - **Filtered.** Every change is checked against the caller's policy before it is sent.
 */
export class TreeWatcher implements KernelListener {
  private readonly folders = new Map<string, Folder>();
  private readonly byWd = new Map<number, Set<string>>();
  private pending = new Map<string, number>();
  private selves = new Set<string>();
  private readonly walkQueue: WalkItem[] = [];
  private dropped = 0;
  private overflowReason: OverflowReason | undefined;
  private timer: NodeJS.Timeout | undefined;
  private busy = false;
  private ready = false;
  private closed = false;
  private ended: ((end: 'removed' | Error) => void) | undefined;

  constructor(
    private readonly policy: FilePolicy,
    private readonly root: ResolvedPath,
    private readonly recursive: boolean,
    private readonly coalesceMs: number,
    private readonly ctx: Pick<CallContext<'fs.watch'>, 'emit' | 'congested' | 'drained'>,
    private readonly account: WatchAccount,
    private readonly limits: WatchLimits = { maxFolders: MAX_WATCHED_FOLDERS, maxPending: MAX_PENDING_WATCH_EVENTS },
    private readonly kernel: Inotify = Inotify.shared(),
  ) {}

  /**
   * Arms the watch on the root and (when recursive) every readable folder below it, read a piece
   * per turn; resolves with how many folders are watched. `onEnd` hears when the watch ends on its
   * own: the folder went (`removed`), or the watch service stopped (an error).
   */
  async start(onEnd: (end: 'removed' | Error) => void): Promise<number> {
    this.ended = onEnd;
    this.busy = true;
    try {
      const { armed, refused } = await this.armFolders([{ absolute: this.root.absolute, parent: undefined, report: false }]);
      if (armed.length === 0) {
        if (refused === 'budget') throw this.account.foldersSpent(this.root.display);
        if (refused === 'kernel')
          throw new CodedError(
            'RESOURCE_EXHAUSTED',
            `'${this.root.display}' cannot be watched: the host's inotify budget (fs.inotify.max_user_watches or max_user_instances) is spent. Close a watch, or ask the operator to raise it.`,
            { path: this.root.display },
          );
        if (refused === 'unsupported')
          throw new CodedError('NOT_SUPPORTED', `'${this.root.display}' cannot be watched: its file system's kernel watch could not be identified.`, {
            path: this.root.display,
          });
        throw new CodedError('NOT_FOUND', `'${this.root.display}' could not be watched: it is gone or not a folder.`, { path: this.root.display });
      }
      await this.list(armed[0]!.item, armed[0]!.fd, undefined).finally(() => closeSync(armed[0]!.fd));
      await this.walk(undefined);
    } finally {
      this.busy = false;
    }
    this.ready = true;
    if (this.hasWork()) this.schedule();
    return this.folders.size;
  }

  /** Removes every kernel watch and forgets what was pending. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.timer);
    const handles = [...this.folders.values()].map((folder) => folder.handle);
    watchedFolders -= handles.length;
    this.account.releaseFolders(handles.length);
    this.folders.clear();
    this.byWd.clear();
    this.pending.clear();
    this.selves.clear();
    this.walkQueue.length = 0;
    this.kernel.disarm(handles);
  }

  /** The number of folders watched now. */
  get size(): number {
    return this.folders.size;
  }

  kernelEvent(wd: number, mask: number, name: string): void {
    if (this.closed) return;
    const folders = this.byWd.get(wd);
    if (!folders) return;
    for (const folder of folders) {
      if (name === '') {
        if (mask & SELF_GONE) {
          this.selves.add(folder);
          this.schedule();
        }
        continue;
      }
      const child = folder === '/' ? `/${name}` : `${folder}/${name}`;
      const before = this.pending.get(child);
      if (before === undefined && this.pending.size >= this.limits.maxPending) {
        this.overflow('queue');
        continue;
      }
      this.pending.set(child, (before ?? 0) | mask);
      this.schedule();
    }
  }

  kernelOverflow(): void {
    if (!this.closed) this.overflow('kernel');
  }

  kernelLost(): void {
    this.finish(new CodedError('INTERNAL', `The watch on '${this.root.display}' stopped: the daemon's watch service ended. Start the watch again.`));
  }

  saturated(): boolean {
    return this.pending.size >= this.limits.maxPending;
  }

  // Opens the folders (refusing links, reserved places and what the policy hides), arms them in
  // one trip to the watch thread, and returns them with their descriptors still open for reading.
  private async armFolders(
    items: readonly WalkItem[],
  ): Promise<{ armed: { item: WalkItem; fd: number }[]; refused: 'budget' | 'kernel' | 'unsupported' | 'gone' | undefined }> {
    const opened: { item: WalkItem; fd: number; info: BigIntStats; key: string }[] = [];
    const seen = new Set<string>();
    let refused: 'budget' | 'kernel' | 'unsupported' | 'gone' | undefined;
    for (const item of items) {
      if (this.closed || this.folders.has(item.absolute) || seen.has(item.absolute)) continue;
      if (item.parent !== undefined && !this.folders.has(item.parent)) continue; // dropped meanwhile
      if (item.parent !== undefined && !mayReadFound(this.policy, this.root, item.absolute)) continue;
      if (this.folders.size + opened.length >= this.limits.maxFolders || !this.account.takeFolder()) {
        refused = 'budget';
        this.overflow('watch-limit');
        continue;
      }
      seen.add(item.absolute);
      const fd = openFolder(item.absolute);
      let info: BigIntStats | undefined;
      if (fd !== undefined) {
        try {
          if (!reservedPlace(item.absolute, item.absolute, fstatSync(fd))) info = fstatSync(fd, { bigint: true });
        } catch {
          info = undefined;
        }
        if (!info) closeSync(fd);
      }
      if (fd === undefined || !info) {
        this.account.releaseFolders(1);
        refused ??= 'gone';
        continue;
      }
      opened.push({ item, fd, info, key: kernelKey(info) });
    }
    const results = await this.kernel.arm(
      this,
      opened.map(({ fd, key }) => ({ fd, key })),
    );
    const armed: { item: WalkItem; fd: number }[] = [];
    for (const [i, { item, fd, info }] of opened.entries()) {
      const result = results[i] ?? { error: 'EIO' };
      const orphan = this.closed || (item.parent !== undefined && !this.folders.has(item.parent));
      if ('error' in result || orphan) {
        if (!('error' in result)) this.kernel.disarm([result.handle]);
        else if (result.error === 'ENOSPC' || result.error === 'EMFILE' || result.error === 'ENOTSUP') {
          // The host's budget is spent, or the kernel's watch could not be told apart: not watched, and said so.
          refused = result.error === 'ENOTSUP' ? 'unsupported' : 'kernel';
          this.overflow('watch-limit');
        }
        this.account.releaseFolders(1);
        closeSync(fd);
        continue;
      }
      this.folders.set(item.absolute, { handle: result.handle, wd: result.wd, dev: info.dev, ino: info.ino, parent: item.parent, children: new Set() });
      watchedFolders++;
      if (item.parent !== undefined) this.folders.get(item.parent)!.children.add(item.absolute);
      let paths = this.byWd.get(result.wd);
      if (!paths) this.byWd.set(result.wd, (paths = new Set()));
      paths.add(item.absolute);
      armed.push({ item, fd });
    }
    return { armed, refused };
  }

  // Arms the queued folders, a batch at a time, reading each (which queues the folders below it).
  private async walk(changes: WatchChange[] | undefined): Promise<void> {
    while (this.walkQueue.length > 0 && !this.closed) {
      const { armed } = await this.armFolders(this.walkQueue.splice(0, ARM_BATCH));
      for (const { item, fd } of armed) {
        try {
          if (!this.closed) await this.list(item, fd, changes);
        } finally {
          closeSync(fd);
        }
      }
    }
  }

  // Reads a folder through its descriptor, at most MAX_DIR_SCAN names, a piece per turn: the
  // folders in it are queued to be armed; with `report`, its names are reported as created, once
  // the folder is found again where it was (names read from a folder moved away are not shown).
  private async list(item: WalkItem, fd: number, changes: WatchChange[] | undefined): Promise<void> {
    if (!this.recursive && !item.report) return;
    let dir: Dir;
    try {
      dir = opendirSync(`/proc/self/fd/${fd}`, { bufferSize: 128 });
    } catch {
      return;
    }
    const found: WatchChange[] = [];
    try {
      let count = 0;
      for (let entry = dir.readSync(); entry !== null; entry = dir.readSync()) {
        if (++count > MAX_DIR_SCAN) {
          this.overflow('queue');
          break;
        }
        const child = item.absolute === '/' ? `/${entry.name}` : `${item.absolute}/${entry.name}`;
        // d_type says what the entry is without following it: a link is never entered.
        const directory = entry.isDirectory();
        if (item.report && changes) {
          if (changes.length + found.length < this.limits.maxPending) found.push(change('create', child, directory));
          else this.overflow('queue');
        }
        if (directory && this.recursive) this.queueWalk(child, item.absolute, item.report);
        if (count % TURN_WORK === 0) {
          await yieldTurn();
          if (this.closed || !this.folders.has(item.absolute)) return;
        }
      }
    } catch {
      // a folder removed while read: what was read is enough
    } finally {
      dir.closeSync();
    }
    if (found.length === 0 || !changes) return;
    const known = this.folders.get(item.absolute);
    const again = known && this.openKnown(item.absolute, known);
    if (again === undefined) return;
    closeSync(again);
    changes.push(...found);
  }

  private queueWalk(absolute: string, parent: string, report: boolean): void {
    if (this.folders.size + this.walkQueue.length >= this.limits.maxFolders) return this.overflow('watch-limit');
    this.walkQueue.push({ absolute, parent, report });
  }

  // The folder at its path, with the identity it had when armed; undefined when it moved, went,
  // or something else (a link, another folder) is there now.
  private openKnown(absolute: string, known: Folder): number | undefined {
    const fd = openFolder(absolute);
    if (fd === undefined) return undefined;
    try {
      const info = fstatSync(fd, { bigint: true });
      if (info.ino === known.ino && info.dev === known.dev) return fd;
    } catch {
      // unreadable: not the folder we know
    }
    closeSync(fd);
    return undefined;
  }

  private dropTree(absolute: string): void {
    const top = this.folders.get(absolute);
    if (!top) return;
    if (top.parent !== undefined) this.folders.get(top.parent)?.children.delete(absolute);
    const handles: number[] = [];
    const stack = [absolute];
    while (stack.length > 0) {
      const key = stack.pop()!;
      const folder = this.folders.get(key);
      if (!folder) continue;
      this.folders.delete(key);
      const paths = this.byWd.get(folder.wd);
      paths?.delete(key);
      if (paths?.size === 0) this.byWd.delete(folder.wd);
      handles.push(folder.handle);
      for (const child of folder.children) stack.push(child);
    }
    watchedFolders -= handles.length;
    this.account.releaseFolders(handles.length);
    this.kernel.disarm(handles);
  }

  private finish(end: 'removed' | Error): void {
    const ended = this.ended;
    this.ended = undefined;
    this.close();
    ended?.(end);
  }

  private overflow(reason: OverflowReason): void {
    this.dropped++;
    if (this.overflowReason === undefined || OVERFLOW_RANK[reason] > OVERFLOW_RANK[this.overflowReason]) this.overflowReason = reason;
    this.schedule();
  }

  private hasWork(): boolean {
    return this.pending.size > 0 || this.selves.size > 0 || this.dropped > 0 || this.walkQueue.length > 0;
  }

  private schedule(): void {
    if (this.timer || this.busy || this.closed || !this.ready) return;
    this.timer = setTimeout(() => void this.pump(), this.coalesceMs);
  }

  private async pump(): Promise<void> {
    this.timer = undefined;
    if (this.busy || this.closed) return;
    this.busy = true;
    let removed: boolean;
    try {
      // A slow client holds the batch here: the pending map keeps coalescing under its cap meanwhile.
      while (this.ctx.congested() && !this.closed) await this.ctx.drained();
      const changes: WatchChange[] = [];
      removed = await this.process(changes);
      if (!this.closed) await this.emit(changes);
    } finally {
      this.busy = false;
    }
    if (removed) return this.finish('removed');
    if (this.hasWork()) this.schedule();
  }

  // Turns what the kernel reported since the last batch into changes; true when the watched folder itself went.
  private async process(changes: WatchChange[]): Promise<boolean> {
    const selves = this.selves;
    this.selves = new Set();
    const batch = this.pending;
    this.pending = new Map();
    for (const folder of selves) {
      const known = this.folders.get(folder);
      if (!known) continue;
      const fd = this.openKnown(folder, known);
      if (fd !== undefined) {
        closeSync(fd);
        continue;
      }
      if (folder === this.root.absolute) return true;
      changes.push(change('remove', folder, true));
      this.dropTree(folder);
    }
    const byFolder = new Map<string, [string, number][]>();
    for (const [child, mask] of batch) {
      const folder = path.posix.dirname(child);
      let names = byFolder.get(folder);
      if (!names) byFolder.set(folder, (names = []));
      names.push([child, mask]);
    }
    let work = 0;
    for (const [folder, names] of byFolder) {
      let i = 0;
      while (i < names.length) {
        const known = this.folders.get(folder);
        if (!known) break;
        const fd = this.openKnown(folder, known);
        if (fd === undefined) {
          // Moved away, gone, or a link now: nothing more is reported from inside it.
          if (folder === this.root.absolute) return true;
          changes.push(change('remove', folder, true));
          this.dropTree(folder);
          break;
        }
        let turn = false;
        try {
          while (i < names.length && !turn) {
            const [child, mask] = names[i++]!;
            this.decide(changes, fd, child, mask);
            turn = ++work % TURN_WORK === 0;
          }
        } finally {
          closeSync(fd);
        }
        if (turn) {
          // Other calls get a turn; the folder is found again before its next name is looked up.
          await yieldTurn();
          if (this.closed) return false;
        }
      }
    }
    await this.walk(changes);
    return false;
  }

  // One path's change, from the kernel's mask and what is there now (looked up inside its folder's descriptor).
  private decide(changes: WatchChange[], fd: number, child: string, mask: number): void {
    let info: BigIntStats | undefined;
    try {
      info = lstatSync(`/proc/self/fd/${fd}/${path.posix.basename(child)}`, { bigint: true, throwIfNoEntry: false });
    } catch {
      info = undefined;
    }
    const known = this.folders.get(child);
    if (!info) {
      changes.push(change('remove', child, known !== undefined || (mask & IN.ISDIR) !== 0));
      if (known) this.dropTree(child);
      return;
    }
    if (known && (known.ino !== info.ino || known.dev !== info.dev)) this.dropTree(child); // replaced: watch the new one
    const directory = info.isDirectory();
    // Made, moved in, or gone and back: a create; otherwise (content, attributes) a write.
    const made = (mask & (IN.CREATE | IN.MOVED_TO | IN.DELETE | IN.MOVED_FROM)) !== 0;
    changes.push(change(made ? 'create' : 'write', child, directory));
    if (directory && this.recursive && !this.folders.has(child)) this.queueWalk(child, path.posix.dirname(child), true);
  }

  // Sends the batch, checked against the policy a piece per turn (each check walks the policy's mounts).
  private async emit(changes: WatchChange[]): Promise<void> {
    // One change per path: a create followed by writes stays a create; otherwise the latest wins.
    const byPath = new Map<string, WatchChange>();
    for (const c of changes) {
      const before = byPath.get(c.path);
      byPath.set(c.path, before?.type === 'create' && c.type === 'write' ? before : c);
    }
    let visible: WatchChange[] = [];
    let checked = 0;
    for (const c of byPath.values()) {
      if (mayReadFound(this.policy, this.root, c.path)) visible.push({ ...c, path: displayPhysical(this.policy, this.root, c.path) });
      if (visible.length === CHANGES_PER_EVENT) {
        this.ctx.emit('changes', { changes: visible });
        visible = [];
      }
      if (++checked % TURN_WORK === 0) {
        await yieldTurn();
        if (this.closed) return;
      }
    }
    if (visible.length > 0) this.ctx.emit('changes', { changes: visible });
    if (this.dropped > 0) {
      this.ctx.emit('overflow', { reason: this.overflowReason ?? 'queue', dropped: this.dropped });
      this.dropped = 0;
      this.overflowReason = undefined;
    }
  }
}

/** Options of {@link watchHandlers}. */
export interface WatchServiceOptions {
  /** The sandbox's watch budget, shared by every connection to the daemon (default: a budget of this table's own). */
  budget?: WatchBudget | undefined;
  /** The connection is a derived handle's: its watches draw on the derived share of the budget. */
  derived?: boolean | undefined;
  /** Per-watch limits (tests). */
  limits?: WatchLimits | undefined;
}

/**
 * The `fs.watch` handler for one connection's policy: resolves the folder through the policy,
 * arms a {@link TreeWatcher} on the connection's share of the sandbox's {@link WatchBudget}, and
 * holds the call open until it is cancelled or the folder goes.
 *
 * @example
 * const budget = new WatchBudget();
 * const handlers = watchHandlers({ root: '/workspace', readOnly: false }, { budget, derived: false });
 */
export function watchHandlers(policy: FilePolicy, options: WatchServiceOptions = {}): { 'fs.watch': Handler<'fs.watch'> } {
  const account = (options.budget ?? new WatchBudget()).account(options.derived === true);
  return {
    async 'fs.watch'(params, ctx) {
      const resolved = await resolvePath(policy, params.path, 'read');
      if (!resolved.stat) throw new CodedError('NOT_FOUND', `No such folder: '${params.path}'.`, { path: params.path });
      if (!resolved.stat.isDirectory())
        throw new CodedError('NOT_A_DIRECTORY', `'${params.path}' is a file; watch the folder that holds it.`, { path: params.path });
      account.openWatch();
      activeWatches++;
      const watcher = new TreeWatcher(policy, resolved, params.recursive, params.coalesceMs, ctx, account, options.limits);
      try {
        return await new Promise((resolve, reject) => {
          let settled = false;
          const settle = (act: () => void) => {
            if (settled) return;
            settled = true;
            ctx.signal.removeEventListener('abort', onAbort);
            act();
          };
          const onAbort = () => settle(() => reject(new CodedError('CANCELLED', `The watch on '${resolved.display}' was closed.`)));
          if (ctx.signal.aborted) return onAbort();
          ctx.signal.addEventListener('abort', onAbort, { once: true });
          watcher
            .start((end) => settle(() => (end === 'removed' ? resolve({ result: { ended: 'removed' } }) : reject(end))))
            .then(
              (count) => {
                if (!settled) ctx.emit('ready', { path: resolved.display, watchedFolders: count });
              },
              (err: unknown) => settle(() => reject(err instanceof Error ? err : new Error(String(err)))),
            );
        });
      } finally {
        watcher.close();
        activeWatches--;
        account.closeWatch();
      }
    },
  };
}
