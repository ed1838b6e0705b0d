import { readFileSync } from 'node:fs';
import { CodedError, MAX_WATCHES } from '@warren/protocol';

/**
 * The most kernel watches (one per watched folder) all of a sandbox's watches hold together by
 * default. The kernel's own budget (`fs.inotify.max_user_watches`) is per user and shared by
 * every process of that user on the host, the daemons of other sandboxes and Docker included.
 */
export const DEFAULT_SANDBOX_WATCHED_FOLDERS = 8192;

/** How much a sandbox's watches may hold at once. */
export interface WatchQuota {
  /** Running `fs.watch` calls. */
  watches: number;
  /** Watched folders (kernel watches), across every watch. */
  folders: number;
}

/** The default quota: {@link MAX_WATCHES} watches and {@link DEFAULT_SANDBOX_WATCHED_FOLDERS} folders. */
export const DEFAULT_WATCH_QUOTA: WatchQuota = { watches: MAX_WATCHES, folders: DEFAULT_SANDBOX_WATCHED_FOLDERS };

/** The part of the host's `max_user_watches` one sandbox may hold at most, whatever the default says. */
const HOST_SHARE = 16;

/**
 * The quota a daemon takes when none is given: {@link DEFAULT_WATCH_QUOTA}, or a sixteenth of the
 * host's `fs.inotify.max_user_watches` where that is less (a host with the old default of 8,192
 * gives each sandbox 512), so raising the sysctl is how an operator gives sandboxes more.
 *
 * @example
 * new WatchBudget(hostWatchQuota()); // { watches: 64, folders: 8192 } with max_user_watches of 131,072 or more
 */
export function hostWatchQuota(read: () => string = () => readFileSync('/proc/sys/fs/inotify/max_user_watches', 'utf8')): WatchQuota {
  let host: number;
  try {
    host = Number.parseInt(read(), 10);
  } catch {
    return DEFAULT_WATCH_QUOTA;
  }
  if (!(host > 0)) return DEFAULT_WATCH_QUOTA;
  return { watches: MAX_WATCHES, folders: Math.max(2, Math.min(DEFAULT_SANDBOX_WATCHED_FOLDERS, Math.floor(host / HOST_SHARE))) };
}

interface Use {
  watches: number;
  folders: number;
}

/**
 * A sandbox's watch budget, shared by every connection to its daemon. Derived handles (a grant
 * without the audit log: what `deriveToken` makes) share at most half of it, whatever their
 * number; the other half is kept for the API key, the sandbox token and the controller, so a
 * narrowed handle can never take the watches its owner needs.
 *
 * @example
 * const budget = new WatchBudget({ watches: 64, folders: 8192 });
 * const account = budget.account(true); // a derived handle's
 * account.openWatch(); // throws RESOURCE_EXHAUSTED past 32
 */
export class WatchBudget {
  private readonly all: Use = { watches: 0, folders: 0 };
  private readonly derived: Use = { watches: 0, folders: 0 };

  constructor(readonly quota: WatchQuota = DEFAULT_WATCH_QUOTA) {
    if (!(quota.watches >= 2 && quota.folders >= 2)) throw new Error('a watch quota needs at least 2 watches and 2 folders');
  }

  /** The share of derived handles, all of them together: half. */
  get derivedQuota(): WatchQuota {
    return { watches: Math.floor(this.quota.watches / 2), folders: Math.floor(this.quota.folders / 2) };
  }

  /** What is held now, in all and by derived handles. */
  usage(): { all: Use; derived: Use } {
    return { all: { ...this.all }, derived: { ...this.derived } };
  }

  /** The account a connection's watches draw on: a derived handle's, or the owner's. */
  account(derived: boolean): WatchAccount {
    return new WatchAccount(this, derived);
  }

  /** @internal Takes `n` of `what` when both the sandbox's and (for a derived handle) the derived share allow it. */
  take(what: keyof Use, derived: boolean, n = 1): boolean {
    if (this.all[what] + n > this.quota[what]) return false;
    if (derived && this.derived[what] + n > this.derivedQuota[what]) return false;
    this.all[what] += n;
    if (derived) this.derived[what] += n;
    return true;
  }

  /** @internal Gives back what {@link WatchBudget.take} took. */
  give(what: keyof Use, derived: boolean, n = 1): void {
    this.all[what] = Math.max(0, this.all[what] - n);
    if (derived) this.derived[what] = Math.max(0, this.derived[what] - n);
  }
}

/** What one class of connection (derived or owner) draws from a {@link WatchBudget}. */
export class WatchAccount {
  constructor(
    private readonly budget: WatchBudget,
    /** True for a derived handle's connection. */
    readonly derived: boolean,
  ) {}

  /** Counts one more running watch; throws `RESOURCE_EXHAUSTED`, saying whose share is spent, when none is left. */
  openWatch(): void {
    if (this.budget.take('watches', this.derived)) return;
    const { quota, derivedQuota } = this.budget;
    if (this.derived && this.budget.usage().derived.watches >= derivedQuota.watches)
      throw new CodedError(
        'RESOURCE_EXHAUSTED',
        `Derived handles may run ${derivedQuota.watches} of this sandbox's ${quota.watches} watches together, and they run all of them (the rest is kept for the API key and the sandbox token); close one (cancel its call) before starting another.`,
        { limit: derivedQuota.watches, derived: true },
      );
    throw new CodedError('RESOURCE_EXHAUSTED', `This sandbox already serves ${quota.watches} watches; close one (cancel its call) before starting another.`, {
      limit: quota.watches,
    });
  }

  /** Gives back a watch counted by {@link WatchAccount.openWatch}. */
  closeWatch(): void {
    this.budget.give('watches', this.derived);
  }

  /** Takes one folder (kernel watch) from the budget; false when this account's share is spent. */
  takeFolder(): boolean {
    return this.budget.take('folders', this.derived);
  }

  /** Gives back `n` folders. */
  releaseFolders(n: number): void {
    if (n > 0) this.budget.give('folders', this.derived, n);
  }

  /** The error for a watch whose own folder finds the folder budget spent. */
  foldersSpent(display: string): CodedError {
    const { quota, derivedQuota } = this.budget;
    return this.derived
      ? new CodedError(
          'RESOURCE_EXHAUSTED',
          `'${display}' cannot be watched: derived handles may watch ${derivedQuota.folders} of this sandbox's ${quota.folders} folders together, and their watches hold all of them. Close a recursive watch, or watch a smaller folder.`,
          { limit: derivedQuota.folders, derived: true, path: display },
        )
      : new CodedError(
          'RESOURCE_EXHAUSTED',
          `'${display}' cannot be watched: this sandbox's watches already hold ${quota.folders} folders, its share of the host's inotify watches. Close a recursive watch, or watch a smaller folder.`,
          { limit: quota.folders, path: display },
        );
  }
}
