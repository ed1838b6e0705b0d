import type { ConnectionGrant } from '@warren/protocol';
import { DaemonSession } from './daemon-session.js';
import type { DaemonDoor } from './daemon-session.js';
import type { Caller } from './grants.js';
import type { Metrics } from './metrics.js';
import type { Closable, SandboxOwner } from './tenancy/live-credentials.js';

/** Where sessions are registered under the credentials they were opened with (`LiveCredentials`). */
export interface CredentialWatch {
  track(connection: Closable, caller: Caller, record: SandboxOwner): () => void;
}

/** What the pool reads of a sandbox: its state (a paused one's sessions are not reused) and its creator. */
type PooledSandboxes = DaemonDoor & { record(id: string): { state: string } & SandboxOwner };

/** A session lent by a {@link DaemonSessionPool} until `release()`. */
export interface DaemonLease {
  session: DaemonSession;
  /** Whether the session was kept from an earlier user rather than opened now. */
  reused: boolean;
  /** Hands the session back: kept for the next user if it is idle and there is room, closed otherwise. Once only. */
  release: () => void;
}

/** Options of a {@link DaemonSessionPool}. */
export interface DaemonSessionPoolOptions {
  /** An idle session is closed after this long unused (ms). */
  idleMs?: number;
  /** Idle sessions kept per sandbox, caller and grant. */
  maxIdlePerKey?: number;
  /**
   * Ends every session, leased or idle, whose credential ends (a key revoked or rotated, a token
   * revoked), so the port tunnels and E2B streams riding one stop within a second, not at their next request.
   */
  credentials?: CredentialWatch;
}

/**
 * The controller's idle daemon connections, kept between uses so each short call (an E2B RPC, a
 * `/files` transfer, a port tunnel: a browser loading a page opens one per request) does not pay
 * for a new connection and handshake (on the exec channel, a `docker exec` of tens of
 * milliseconds). A session is shared only by users of the same sandbox, the same caller and the
 * same grant, so a reused one carries exactly the authority a new one would (the daemon enforces
 * the grant it was opened with); the caller is authenticated anew on every request before it
 * gets one. Only a session that comes back idle (open, nothing in flight, reading) is kept, and
 * only a running sandbox's: a paused one's daemon is frozen.
 *
 * @example
 * const pool = new DaemonSessionPool({ idleMs: 10_000 });
 * const lease = await pool.lease(sandboxes, id, caller, grant);
 * try { await lease.session.call('fs.stat', { path: 'a' }); } finally { lease.release(); }
 */
export class DaemonSessionPool {
  private readonly idle = new Map<string, { session: DaemonSession; timer: ReturnType<typeof setTimeout> }[]>();
  private readonly idleMs: number;
  private readonly maxIdlePerKey: number;
  private readonly credentials: CredentialWatch | undefined;

  constructor(options: DaemonSessionPoolOptions = {}) {
    this.idleMs = options.idleMs ?? 10_000;
    this.maxIdlePerKey = options.maxIdlePerKey ?? 4;
    this.credentials = options.credentials;
  }

  /** Lends a session of sandbox `id` for `caller` with `grant`: an idle one kept for the same three, or a new one. */
  async lease(sandboxes: PooledSandboxes, id: string, caller: Caller, grant: ConnectionGrant, metrics?: Metrics): Promise<DaemonLease> {
    const key = JSON.stringify([id, caller, grant]);
    const kept = sandboxes.record(id).state === 'running' ? this.take(key) : undefined;
    const session = kept ?? (await this.open(sandboxes, id, caller, grant, metrics));
    let released = false;
    return {
      session,
      reused: kept !== undefined,
      release: () => {
        if (released) return;
        released = true;
        this.give(key, session);
      },
    };
  }

  /**
   * Opens a session that is not lent and never kept: for what holds one for its whole life (an
   * E2B terminal, watch or command stream). Like a lent one, it ends with its credential.
   */
  async open(sandboxes: PooledSandboxes, id: string, caller: Caller, grant: ConnectionGrant, metrics?: Metrics): Promise<DaemonSession> {
    const record = sandboxes.record(id);
    const session = await DaemonSession.open(sandboxes, id, caller, grant, metrics);
    if (this.credentials) session.onClose(this.credentials.track({ close: (_code, reason) => session.end(reason) }, caller, record));
    return session;
  }

  /** Runs `fn` with a leased session and hands it back when `fn` settles. */
  async run<T>(
    sandboxes: PooledSandboxes,
    id: string,
    caller: Caller,
    grant: ConnectionGrant,
    fn: (session: DaemonSession) => Promise<T>,
    metrics?: Metrics,
  ): Promise<T> {
    const lease = await this.lease(sandboxes, id, caller, grant, metrics);
    try {
      return await fn(lease.session);
    } finally {
      lease.release();
    }
  }

  private take(key: string): DaemonSession | undefined {
    const list = this.idle.get(key);
    while (list && list.length > 0) {
      const { session, timer } = list.pop()!;
      clearTimeout(timer);
      if (list.length === 0) this.idle.delete(key);
      if (session.idle) return session;
      session.close();
    }
    return undefined;
  }

  private give(key: string, session: DaemonSession): void {
    const list = this.idle.get(key) ?? [];
    if (!session.idle || list.length >= this.maxIdlePerKey) return session.close();
    const entry = {
      session,
      timer: setTimeout(() => {
        const at = list.indexOf(entry);
        if (at >= 0) list.splice(at, 1);
        if (list.length === 0 && this.idle.get(key) === list) this.idle.delete(key);
        session.close();
      }, this.idleMs),
    };
    // An idle session must not keep a stopping controller alive.
    (entry.timer as { unref?: () => void }).unref?.();
    list.push(entry);
    this.idle.set(key, list);
  }

  /** How many idle sessions are kept (for tests and metrics). */
  get size(): number {
    let n = 0;
    for (const list of this.idle.values()) n += list.length;
    return n;
  }

  /** Closes every idle session (the controller is stopping). */
  close(): void {
    for (const list of this.idle.values()) {
      for (const { session, timer } of list) {
        clearTimeout(timer);
        session.close();
      }
    }
    this.idle.clear();
  }
}
