import { closeSync, constants, fstatSync, lstatSync, opendirSync, openSync, watch, type Dir, type Dirent, type FSWatcher } from 'node:fs';
import path from 'node:path';
import {
  CodedError,
  MAX_PENDING_WATCH_EVENTS,
  MAX_WATCHED_FOLDERS,
  MAX_WATCHES,
  type FilePolicy,
  type WatchChange,
  type WatchChangeType,
} from '@warren/protocol';
import type { CallContext, Handler } from '../dispatch.js';
import { MAX_DIR_SCAN } from './fs-walk.js';
import { displayPhysical, mayReadFound, reservedPlace, resolvePath, type ResolvedPath } from '../policy.js';

/** The most inotify watches all of this daemon's watches hold together (the kernel's own budget is per user and shared). */
export const MAX_DAEMON_WATCHED_FOLDERS = 32_768;
/** The most changes one `changes` event carries; a larger batch goes out as several events. */
const CHANGES_PER_EVENT = 512;
/** The most names a folder added during a watch reports as created (the rest is an overflow). */
const MAX_SCAN_NAMES = 10_000;

let activeWatches = 0;
let watchedFolders = 0;

/**
 * What this daemon's watches hold now: running watches and the kernel watches (folders) behind
 * them. Both return to zero when every watch has ended, which is how tests see nothing leaks.
 */
export function watchCounts(): { watches: number; folders: number } {
  return { watches: activeWatches, folders: watchedFolders };
}

/** Limits of one {@link TreeWatcher}, overridable for tests. */
export interface WatchLimits {
  maxFolders: number;
  maxPending: number;
}

interface Folder {
  watcher: FSWatcher;
  dev: number;
  ino: number;
}

/**
 * Watches one folder tree with inotify, one kernel watch per folder, and turns what the kernel
 * reports into coalesced, policy-filtered changes.
 *
 * - **No link is followed.** Each folder is opened `O_DIRECTORY|O_NOFOLLOW` and watched through
 *   its descriptor (`/proc/self/fd/N`), so a folder swapped for a link between the check and the
 *   watch is refused, not followed to wherever it points. A folder that moves or vanishes is
 *   dropped with everything below it before its next event is read.
 * - **Bounded.** At most `maxFolders` folders, at most `maxPending` changes between two batches;
 *   past either, changes are dropped and counted, and an `overflow` event tells the client to
 *   rescan. A congested client connection holds batches back (the cap still applies).
 * - **Filtered.** Every change is checked against the caller's policy before it is sent.
 */
export class TreeWatcher {
  private readonly folders = new Map<string, Folder>();
  private pending = new Map<string, WatchChange>();
  private dropped = 0;
  private overflowReason: 'queue' | 'watch-limit' | undefined;
  private timer: NodeJS.Timeout | undefined;
  private flushing = false;
  private ended: ((why: 'removed') => void) | undefined;
  private closed = false;

  constructor(
    private readonly policy: FilePolicy,
    private readonly root: ResolvedPath,
    private readonly recursive: boolean,
    private readonly coalesceMs: number,
    private readonly ctx: Pick<CallContext<'fs.watch'>, 'emit' | 'congested' | 'drained'>,
    private readonly limits: WatchLimits = { maxFolders: MAX_WATCHED_FOLDERS, maxPending: MAX_PENDING_WATCH_EVENTS },
  ) {}

  /** Arms the watch on the root and (when recursive) every readable folder below it; returns how many folders are watched. */
  start(onEnd: (why: 'removed') => void): number {
    this.ended = onEnd;
    if (!this.add(this.root.absolute, false)) throw new CodedError('NOT_FOUND', `'${this.root.display}' could not be watched: it is gone or not a folder.`);
    return this.folders.size;
  }

  /** Removes every kernel watch and forgets what was pending. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.timer);
    for (const folder of this.folders.values()) folder.watcher.close();
    watchedFolders -= this.folders.size;
    this.folders.clear();
    this.pending.clear();
  }

  /** The number of folders watched now. */
  get size(): number {
    return this.folders.size;
  }

  // Watches `absolute` and, when recursive, the folders below it (breadth first). With `report`,
  // what is found is also reported as created: it appeared after the watch was armed.
  private add(absolute: string, report: boolean): boolean {
    const queue = [absolute];
    let names = 0;
    let first = true;
    while (queue.length > 0 && !this.closed) {
      const folder = queue.shift()!;
      const entries = this.watchFolder(folder, this.recursive || report);
      if (!entries) {
        if (first) return false;
        continue;
      }
      first = false;
      for (const entry of entries) {
        const child = path.posix.join(folder, entry.name);
        if (report) {
          if (names++ < MAX_SCAN_NAMES) this.queue(child, 'create', entry.isDirectory());
          else this.overflow('queue');
        }
        // d_type says what the entry is without following it: a link is never entered.
        if (entry.isDirectory() && this.recursive) queue.push(child);
      }
    }
    return true;
  }

  // A folder's entries, read through a descriptor that refuses a link, at most MAX_DIR_SCAN of them
  // (a folder of a million names costs a bounded read and an overflow, not the daemon's memory).
  private entriesOf(descriptorPath: string): Dirent[] {
    const entries: Dirent[] = [];
    let dir: Dir;
    try {
      dir = opendirSync(descriptorPath);
    } catch {
      return entries;
    }
    try {
      for (let entry = dir.readSync(); entry !== null; entry = dir.readSync()) {
        if (entries.length >= MAX_DIR_SCAN) {
          this.overflow('queue');
          break;
        }
        entries.push(entry);
      }
    } catch {
      // a folder removed while read: what was read is enough
    } finally {
      dir.closeSync();
    }
    return entries;
  }

  // Watches one folder; returns its entries (read through the same descriptor, never through a
  // name that may have become a link since), or undefined when it is not watched.
  private watchFolder(absolute: string, list: boolean): Dirent[] | undefined {
    if (this.folders.has(absolute)) return [];
    if (this.folders.size >= this.limits.maxFolders || watchedFolders >= MAX_DAEMON_WATCHED_FOLDERS) {
      this.overflow('watch-limit');
      return undefined;
    }
    if (absolute !== this.root.absolute && !mayReadFound(this.policy, this.root, absolute)) return undefined;
    let fd: number;
    try {
      fd = openSync(absolute, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    } catch {
      return undefined; // gone, a link, or not a folder
    }
    try {
      const info = fstatSync(fd);
      if (reservedPlace(absolute, absolute, info)) return undefined;
      // The watch is added to the folder the descriptor holds, whatever its name points at by now.
      const watcher = watch(`/proc/self/fd/${fd}`, { persistent: false }, (type, name) => this.onKernel(absolute, type, name));
      watcher.on('error', () => this.dropTree(absolute));
      this.folders.set(absolute, { watcher, dev: info.dev, ino: info.ino });
      watchedFolders++;
      return list ? this.entriesOf(`/proc/self/fd/${fd}`) : [];
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOSPC') this.overflow('watch-limit'); // the kernel's watch budget is spent
      return undefined;
    } finally {
      closeSync(fd);
    }
  }

  private onKernel(folderPath: string, type: string, name: string | Buffer | null): void {
    const folder = this.folders.get(folderPath);
    if (!folder || this.closed) return;
    // A folder that moved or vanished: its later events would name paths it no longer has.
    if (type === 'rename' && !this.stillThere(folderPath, folder)) {
      if (folderPath === this.root.absolute) return this.end();
      this.queue(folderPath, 'remove', true);
      return this.dropTree(folderPath);
    }
    if (name === null) return this.overflow('queue');
    const child = path.posix.join(folderPath, String(name));
    if (type === 'change') return this.queue(child, 'write', this.folders.has(child));
    let info;
    try {
      info = lstatSync(child);
    } catch {
      info = undefined;
    }
    if (!info) {
      const wasFolder = this.folders.has(child);
      this.queue(child, 'remove', wasFolder);
      if (wasFolder) this.dropTree(child);
      return;
    }
    const known = this.folders.get(child);
    if (known && (known.ino !== info.ino || known.dev !== info.dev)) this.dropTree(child); // replaced: watch the new one
    this.queue(child, 'create', info.isDirectory());
    if (info.isDirectory() && this.recursive && !this.folders.has(child)) this.add(child, true);
  }

  private stillThere(folderPath: string, folder: Folder): boolean {
    try {
      const info = lstatSync(folderPath);
      return info.isDirectory() && info.ino === folder.ino && info.dev === folder.dev;
    } catch {
      return false;
    }
  }

  private dropTree(absolute: string): void {
    if (absolute === this.root.absolute) return this.end();
    for (const [key, folder] of this.folders) {
      if (key === absolute || key.startsWith(`${absolute}/`)) {
        folder.watcher.close();
        this.folders.delete(key);
        watchedFolders--;
      }
    }
  }

  private end(): void {
    const ended = this.ended;
    this.ended = undefined;
    this.flushNow();
    this.close();
    ended?.('removed');
  }

  private queue(absolute: string, type: WatchChangeType, directory: boolean): void {
    const before = this.pending.get(absolute);
    if (!before && this.pending.size >= this.limits.maxPending) return this.overflow('queue');
    // Coalesced per path: a write after a create is still a create; otherwise the latest wins.
    const merged: WatchChangeType = before?.type === 'create' && type === 'write' ? 'create' : type;
    this.pending.delete(absolute); // re-inserted last, so the batch keeps the order of last change
    this.pending.set(absolute, { type: merged, path: absolute, ...(directory ? { directory: true } : {}) });
    this.schedule();
  }

  private overflow(reason: 'queue' | 'watch-limit'): void {
    this.dropped++;
    if (this.overflowReason !== 'watch-limit') this.overflowReason = reason;
    this.schedule();
  }

  private schedule(): void {
    if (this.timer || this.flushing || this.closed) return;
    this.timer = setTimeout(() => void this.flush(), this.coalesceMs);
  }

  private async flush(): Promise<void> {
    this.timer = undefined;
    if (this.flushing || this.closed) return;
    this.flushing = true;
    try {
      // A slow client holds the batch here: the pending map keeps coalescing under its cap meanwhile.
      while (this.ctx.congested() && !this.closed) await this.ctx.drained();
      this.flushNow();
    } finally {
      this.flushing = false;
    }
    if (this.pending.size > 0 || this.dropped > 0) this.schedule();
  }

  private flushNow(): void {
    const batch = this.pending;
    this.pending = new Map();
    const changes: WatchChange[] = [];
    for (const change of batch.values()) {
      if (!mayReadFound(this.policy, this.root, change.path)) continue;
      changes.push({ ...change, path: displayPhysical(this.policy, this.root, change.path) });
    }
    for (let i = 0; i < changes.length; i += CHANGES_PER_EVENT) this.ctx.emit('changes', { changes: changes.slice(i, i + CHANGES_PER_EVENT) });
    if (this.dropped > 0) {
      this.ctx.emit('overflow', { reason: this.overflowReason ?? 'queue', dropped: this.dropped });
      this.dropped = 0;
      this.overflowReason = undefined;
    }
  }
}

/**
 * The `fs.watch` handler for one connection's policy: resolves the folder through the policy,
 * arms a {@link TreeWatcher}, and holds the call open until it is cancelled or the folder goes.
 *
 * @example
 * const handlers = watchHandlers({ root: '/workspace', readOnly: false });
 */
export function watchHandlers(policy: FilePolicy, limits?: WatchLimits): { 'fs.watch': Handler<'fs.watch'> } {
  return {
    async 'fs.watch'(params, ctx) {
      const resolved = await resolvePath(policy, params.path, 'read');
      if (!resolved.stat) throw new CodedError('NOT_FOUND', `No such folder: '${params.path}'.`, { path: params.path });
      if (!resolved.stat.isDirectory())
        throw new CodedError('NOT_A_DIRECTORY', `'${params.path}' is a file; watch the folder that holds it.`, { path: params.path });
      if (activeWatches >= MAX_WATCHES) {
        throw new CodedError('RESOURCE_EXHAUSTED', `This sandbox already serves ${MAX_WATCHES} watches; close one (cancel its call) before starting another.`, {
          limit: MAX_WATCHES,
        });
      }
      activeWatches++;
      const watcher = new TreeWatcher(policy, resolved, params.recursive, params.coalesceMs, ctx, limits);
      try {
        return await new Promise((resolve, reject) => {
          const onAbort = () => reject(new CodedError('CANCELLED', `The watch on '${resolved.display}' was closed.`));
          if (ctx.signal.aborted) return onAbort();
          ctx.signal.addEventListener('abort', onAbort, { once: true });
          const count = watcher.start((ended) => {
            ctx.signal.removeEventListener('abort', onAbort);
            resolve({ result: { ended } });
          });
          ctx.emit('ready', { path: resolved.display, watchedFolders: count });
        });
      } finally {
        watcher.close();
        activeWatches--;
      }
    },
  };
}
