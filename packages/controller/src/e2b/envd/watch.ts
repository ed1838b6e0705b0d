import type { MessageInitShape } from '@bufbuild/protobuf';
import { Code, ConnectError } from '@connectrpc/connect';
import type { WatchChange } from '@warren/protocol';
import { randomUUID } from 'node:crypto';
import { posix } from 'node:path';
import { toConnectError } from '../errors.js';
import type { DaemonSessionPool } from '../../daemon-pool.js';
import type { DaemonSession } from '../../daemon-session.js';
import { openSession, type EnvdScope } from './scope.js';
import { EventType, type FilesystemEventSchema } from '../gen/filesystem/filesystem_pb.js';

/** One envd filesystem event, as WatchDir streams it and GetWatcherEvents answers it. */
export type FsEventInit = MessageInitShape<typeof FilesystemEventSchema>;

/** How a running watch reports: each event, and its end (undefined when the watched folder went away). */
export interface WatchSink {
  event(event: FsEventInit): void;
  end(err?: Error): void;
}

/** The most `fs.stat` calls waiting for `includeEntry` before the watch counts as overflowed (bounded memory). */
const MAX_PENDING_ENTRIES = 1024;

/**
 * The daemon's own staging names (`.<name>.warren-<hex>`, where a whole-file write is put together
 * before rename(2) moves it into place): not the program's files, so watchers never see them.
 */
const STAGING = /^\..*\.warren-(?:[a-z]+-)?[0-9a-f]{12}$/;

const TYPES: Record<WatchChange['type'], EventType> = {
  create: EventType.CREATE,
  write: EventType.WRITE,
  remove: EventType.REMOVE,
  rename: EventType.RENAME,
};

/**
 * Runs Warren's `fs.watch` (inotify in the sandbox's daemon, with the caller's grant, so only what
 * the caller may read is reported) on `path` and reports its changes as envd's filesystem events,
 * names relative to the watched folder. A `rename` that names its old path gives envd's pair:
 * RENAME of the old name, CREATE of the new one. An `overflow` (the daemon dropped changes) ends
 * the watch with `resource_exhausted`, because envd's wire has no event that says "rescan".
 * Resolves once the daemon has armed the watch; rejects (not_found, permission_denied, ...) when it
 * cannot. `signal` ends the watch.
 */
export async function runWatch(
  session: DaemonSession,
  path: string,
  options: {
    recursive: boolean;
    /** Given: each CREATE and WRITE event carries the entry this returns (undefined when the path is gone). */
    entryOf?: ((path: string) => Promise<FsEventInit['entry'] | undefined>) | undefined;
    signal: AbortSignal;
  },
  sink: WatchSink,
): Promise<void> {
  const { result } = await session.call('fs.stat', { path });
  if (result.type !== 'directory') throw new ConnectError(`'${path}' is not a folder; watch a folder.`, Code.InvalidArgument);
  let root: string | undefined;
  let armed: () => void = () => undefined;
  const ready = new Promise<void>((resolve) => (armed = resolve));
  let ended = false;
  const end = (err?: Error) => {
    if (ended) return;
    ended = true;
    sink.end(err);
  };
  // includeEntry needs a stat per change; they run one after another so events keep their order.
  let chain = Promise.resolve();
  let waiting = 0;
  const nameOf = (display: string) => {
    const relative = root === undefined ? display : posix.relative(root, display);
    return relative === '' || relative.startsWith('..') ? display : relative;
  };
  const report = (type: EventType, display: string) => {
    const name = nameOf(display);
    const entryOf = options.entryOf;
    if (!entryOf || type === EventType.REMOVE || type === EventType.RENAME) {
      chain = chain.then(() => (ended ? undefined : sink.event({ name, type })));
      return;
    }
    if (++waiting > MAX_PENDING_ENTRIES) return end(lost('the entries of changes could not be read fast enough'));
    chain = chain.then(async () => {
      waiting--;
      if (ended) return;
      const found = await entryOf(display).catch(() => undefined);
      // envd's entry names the path as the watch was asked (absolute), not as the daemon displays it.
      const entry = found && name !== display ? { ...found, path: posix.join(path, name) } : found;
      if (!ended) sink.event({ name, type, ...(entry && { entry }) });
    });
  };
  const call = session.call(
    'fs.watch',
    { path, recursive: options.recursive, coalesceMs: 20 },
    {
      signal: options.signal,
      onEvent: (event, data) => {
        if (ended) return;
        if (event === 'ready') {
          root = (data as { path: string }).path;
          return armed();
        }
        if (event === 'overflow') {
          const { reason, dropped } = data as { reason: string; dropped: number };
          return end(lost(`${dropped} changes were dropped (${reason})`));
        }
        if (event !== 'changes') return;
        for (const change of (data as { changes: WatchChange[] }).changes) {
          if (STAGING.test(posix.basename(change.path))) continue;
          if (change.type === 'rename' && change.from !== undefined) {
            report(EventType.RENAME, change.from);
            report(EventType.CREATE, change.path);
          } else report(TYPES[change.type] ?? EventType.UNSPECIFIED, change.path);
          // The daemon folds a new file's writes into its create; envd reports both, and programs wait for the WRITE.
          if (change.type === 'create' && change.directory !== true) report(EventType.WRITE, change.path);
        }
      },
    },
  );
  const settled = call.then(
    () => chain.then(() => end()),
    (err: unknown) => chain.then(() => end(toConnectError(err))),
  );
  await Promise.race([ready, settled]);
  if (root === undefined) {
    // The call ended before the watch was armed: its error is the answer.
    await call;
    throw new ConnectError(`The watch on '${path}' ended before the sandbox armed it.`, Code.Unavailable);
  }
}

function lost(what: string): ConnectError {
  return new ConnectError(`The watch lost changes: ${what}. List the folder again and start a new watch.`, Code.ResourceExhausted);
}

/** The most polling watchers (CreateWatcher) one sandbox may hold, and the events one holds between two polls. */
export const MAX_WATCHERS_PER_SANDBOX = 16;
/** The most of them derived tokens may hold together: half, so the sandbox token always has the rest. */
export const MAX_DERIVED_WATCHERS_PER_SANDBOX = MAX_WATCHERS_PER_SANDBOX / 2;
export const MAX_WATCHER_EVENTS = 4096;
/** A polling watcher not asked for its events this long is removed (a client that went away leaves no watch behind). */
export const WATCHER_IDLE_MS = 60_000;

interface Watcher {
  id: string;
  sandboxId: string;
  /** Who made it: the same credential must poll and remove it. */
  owner: string;
  /** Made with a derived token: counts against the derived share. */
  derived: boolean;
  session: DaemonSession;
  abort: AbortController;
  events: FsEventInit[];
  /** Why the watcher ended (overflow, sandbox gone, folder removed); the next poll answers it, then the watcher is gone. */
  ended?: Error | undefined;
  idle: NodeJS.Timeout;
}

/**
 * envd's polling watchers (`CreateWatcher`, `GetWatcherEvents`, `RemoveWatcher`, which E2B's
 * Python SDK uses): each is a Warren `fs.watch` on its own daemon connection with the creator's
 * grant. Events wait in a bounded buffer; past {@link MAX_WATCHER_EVENTS} the watcher ends and the
 * next poll says changes were lost. A watcher dies with its sandbox (its connection closes), when
 * it is removed, or after {@link WATCHER_IDLE_MS} without a poll. A sandbox holds at most
 * {@link MAX_WATCHERS_PER_SANDBOX}, of which derived tokens hold at most half together, so a narrowed
 * handle cannot take the watchers the sandbox's own token needs (the daemon's watch budget splits
 * the same way).
 */
export class WatcherRegistry {
  private readonly watchers = new Map<string, Watcher>();
  /** Watchers being made now, per sandbox: they count before they exist, so a burst of creates cannot pass the caps together. */
  private readonly making = new Map<string, { all: number; derived: number }>();

  constructor(private readonly pool: DaemonSessionPool) {}

  /** Starts a watcher for `scope`'s caller; refused with `resource_exhausted` past the sandbox's cap or the derived share. */
  async create(
    scope: EnvdScope,
    path: string,
    recursive: boolean,
    entryOf?: (session: DaemonSession, path: string) => Promise<FsEventInit['entry']>,
  ): Promise<string> {
    const derived = scope.caller.kind === 'derived';
    const making = this.making.get(scope.sandboxId) ?? { all: 0, derived: 0 };
    const mine = [...this.watchers.values()].filter((w) => w.sandboxId === scope.sandboxId);
    const held = mine.length + making.all;
    if (derived && mine.filter((w) => w.derived).length + making.derived >= MAX_DERIVED_WATCHERS_PER_SANDBOX)
      throw new ConnectError(
        `Derived tokens of sandbox '${scope.sandboxId}' may hold ${MAX_DERIVED_WATCHERS_PER_SANDBOX} of its ${MAX_WATCHERS_PER_SANDBOX} watchers together, and they hold all of them (the rest is kept for the sandbox's own token); remove some (RemoveWatcher).`,
        Code.ResourceExhausted,
      );
    if (held >= MAX_WATCHERS_PER_SANDBOX)
      throw new ConnectError(`Sandbox '${scope.sandboxId}' already has ${held} watchers; remove some (RemoveWatcher).`, Code.ResourceExhausted);
    making.all++;
    if (derived) making.derived++;
    this.making.set(scope.sandboxId, making);
    try {
      return await this.make(scope, path, recursive, derived, entryOf);
    } finally {
      making.all--;
      if (derived) making.derived--;
      if (making.all === 0) this.making.delete(scope.sandboxId);
    }
  }

  private async make(
    scope: EnvdScope,
    path: string,
    recursive: boolean,
    derived: boolean,
    entryOf?: (session: DaemonSession, path: string) => Promise<FsEventInit['entry']>,
  ): Promise<string> {
    const session = await openSession(this.pool, scope);
    const watcher: Watcher = {
      id: randomUUID(),
      sandboxId: scope.sandboxId,
      owner: ownerOf(scope),
      derived,
      session,
      abort: new AbortController(),
      events: [],
      idle: setTimeout(() => this.remove(watcher.id), WATCHER_IDLE_MS),
    };
    watcher.idle.unref();
    try {
      await runWatch(
        session,
        path,
        { recursive, entryOf: entryOf && ((p) => entryOf(session, p)), signal: watcher.abort.signal },
        {
          event: (event) => {
            if (watcher.ended) return;
            if (watcher.events.length >= MAX_WATCHER_EVENTS) return this.fail(watcher, lost(`more than ${MAX_WATCHER_EVENTS} events waited for a poll`));
            watcher.events.push(event);
          },
          end: (err) => this.fail(watcher, err ?? new ConnectError(`The watched folder '${path}' was removed.`, Code.NotFound)),
        },
      );
    } catch (err) {
      clearTimeout(watcher.idle);
      session.close();
      throw err;
    }
    this.watchers.set(watcher.id, watcher);
    return watcher.id;
  }

  /** The events since the last poll; the watcher's end (as an error) once they are all read. */
  poll(scope: EnvdScope, id: string): FsEventInit[] {
    const watcher = this.find(scope, id);
    watcher.idle.refresh();
    const events = watcher.events.splice(0);
    if (events.length === 0 && watcher.ended) {
      this.remove(id);
      throw watcher.ended;
    }
    return events;
  }

  delete(scope: EnvdScope, id: string): void {
    this.find(scope, id);
    this.remove(id);
  }

  /** Ends every watcher (the gateway is closing). */
  close(): void {
    for (const id of [...this.watchers.keys()]) this.remove(id);
  }

  private find(scope: EnvdScope, id: string): Watcher {
    const watcher = this.watchers.get(id);
    // Another sandbox's or another credential's watcher is answered as missing, never reached.
    if (!watcher || watcher.sandboxId !== scope.sandboxId || watcher.owner !== ownerOf(scope))
      throw new ConnectError(`Watcher '${id.slice(0, 64)}' not found (it may have been removed or ended).`, Code.NotFound);
    return watcher;
  }

  private fail(watcher: Watcher, err: Error): void {
    if (watcher.ended) return;
    watcher.ended = err;
    watcher.abort.abort();
    watcher.session.close();
  }

  private remove(id: string): void {
    const watcher = this.watchers.get(id);
    if (!watcher) return;
    this.watchers.delete(id);
    clearTimeout(watcher.idle);
    watcher.ended ??= new ConnectError('The watcher was removed.', Code.NotFound);
    watcher.abort.abort();
    watcher.session.close();
  }
}

/** A credential's identity for owning a watcher: its kind, sandbox and grant. */
function ownerOf(scope: EnvdScope): string {
  return JSON.stringify(scope.caller);
}
