import type { ParamsIn, WatchChange } from '@warren/protocol';
import type { Channel } from './channel.js';
import { makeError, WarrenError } from './errors.js';
import { EventQueue } from './event-queue.js';

export type { WatchChange } from '@warren/protocol';

/**
 * One thing a watch reports: a change to a path (`create`, `write`, `remove`, `rename`), or
 * `overflow` when changes were dropped: `queue` (more paths changed between two batches than a
 * batch holds, or a slow reader), `watch-limit` (more folders than the watch, or this handle's
 * share of the sandbox's watches, may follow), `kernel` (changes came faster than the sandbox reads
 * the kernel's queue). The watch goes on; rescan the folder (`files.list`) to catch up. Nothing is
 * dropped without an `overflow`.
 */
export type WatchEvent = WatchChange | { type: 'overflow'; reason: 'queue' | 'watch-limit' | 'kernel'; dropped: number };

/** Options of {@link WatchFiles.watch}. */
export interface WatchOptions {
  /** Watch every folder below too (default true). */
  recursive?: boolean;
  /** How long the sandbox gathers changes before it sends them as one batch (default 50 ms); writes to one file within it are one event. */
  coalesceMs?: number;
  /** Called with each event instead of queueing it for iteration. */
  onEvent?: (event: WatchEvent) => void;
  /** Aborting closes the watch, as {@link Watcher.close} does. */
  signal?: AbortSignal;
}

/** How long a watch may stay open: a day. */
const WATCH_MAX_MS = 24 * 60 * 60 * 1000;

/**
 * A live watch on a folder in the sandbox. Iterate it for {@link WatchEvent}s (or pass `onEvent`);
 * the iteration ends when the watch is closed or the watched folder is removed. Paths are shown
 * the way the sandbox's policy names them, and only paths the handle may read are reported.
 *
 * @example
 * await using watcher = await sandbox.files.watch('src');
 * for await (const event of watcher) console.log(event.type, 'path' in event ? event.path : event.reason);
 */
export class Watcher implements AsyncIterable<WatchEvent>, AsyncDisposable {
  constructor(
    /** The watched folder as the policy names it. */
    readonly path: string,
    /** How many folders the sandbox watches for it (the recursive tree, up to its cap). */
    readonly watchedFolders: number,
    private readonly events: EventQueue<WatchEvent>,
    private readonly ended: Promise<'removed' | 'closed'>,
    private readonly stop: () => void,
  ) {}

  /** Resolves once the watch has ended: `removed` when the folder went, `closed` when it was closed. */
  done(): Promise<'removed' | 'closed'> {
    return this.ended;
  }

  /** Stops watching; the sandbox removes its kernel watches. */
  close(): void {
    this.stop();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.stop();
    await this.ended.catch(() => undefined);
  }

  [Symbol.asyncIterator](): AsyncIterator<WatchEvent> {
    return this.events;
  }
}

/**
 * Starts a watch over `connection`; resolves once the sandbox has armed it (changes after that
 * are reported). Used by `sandbox.files.watch`. Rejects with `ResourceExhaustedError` when the
 * sandbox runs all the watches it may (64; derived handles, all together, half of them).
 */
export async function startWatch(connection: Channel, path: string, options: WatchOptions = {}): Promise<Watcher> {
  const params: ParamsIn<'fs.watch'> = { path };
  if (options.recursive !== undefined) params.recursive = options.recursive;
  if (options.coalesceMs !== undefined) params.coalesceMs = options.coalesceMs;
  const abort = new AbortController();
  const signal = options.signal ? AbortSignal.any([options.signal, abort.signal]) : abort.signal;
  const queue = new EventQueue<WatchEvent>(connection, () => abort.abort());
  const deliver = (event: WatchEvent, bytes: number) => (options.onEvent ? options.onEvent(event) : queue.push(event, bytes));
  let ready: (value: { path: string; watchedFolders: number }) => void = () => undefined;
  const readyPromise = new Promise<{ path: string; watchedFolders: number }>((resolve) => (ready = resolve));
  const call = connection.call('fs.watch', params, {
    signal,
    timeoutMs: WATCH_MAX_MS,
    onEvent: (event) => {
      if (event.method !== 'fs.watch') return;
      if (event.event === 'ready') ready(event.data);
      else if (event.event === 'changes') for (const change of event.data.changes) deliver(change, 64 + change.path.length);
      else if (event.event === 'overflow') deliver({ type: 'overflow', ...event.data }, 64);
    },
  });
  const ended: Promise<'removed' | 'closed'> = call.then(
    (answer): 'removed' | 'closed' => answer.result.ended,
    (err: unknown) => {
      // Closing the watch cancels the call: that is its normal end, not an error.
      if (err instanceof WarrenError && err.code === 'CANCELLED' && abort.signal.aborted) return 'closed';
      throw err;
    },
  );
  ended.then(
    () => queue.end(),
    (err: unknown) => queue.fail(err),
  );
  ended.catch(() => undefined); // reported through done() and the iterator; never unhandled
  const info = await Promise.race([readyPromise, ended.then(() => Promise.reject(makeError('INTERNAL', 'The watch ended before the sandbox armed it.')))]);
  return new Watcher(info.path, info.watchedFolders, queue, ended, () => abort.abort());
}
