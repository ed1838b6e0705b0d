import { grantFor } from '../grants.js';
import type { DaemonSession } from './daemon-session.js';
import { openSession, type EnvdScope } from './envd-scope.js';

/** Idle connections kept per sandbox and grant. */
const MAX_IDLE_PER_KEY = 4;
/** An idle connection is closed after this long unused. */
const IDLE_MS = 30_000;

/**
 * Daemon connections for the gateway's short calls (unary RPCs, `/files`), kept open between
 * calls so each E2B call does not pay for a new connection and handshake. A connection is shared
 * only by calls of the same sandbox with the same kind of caller and the same grant, so a reused
 * connection carries exactly the authority a new one would; the caller is authenticated anew on
 * every request before it gets one. Streams borrow one for as long as they last ({@link SessionPool.lease}).
 */
export class SessionPool {
  private readonly idle = new Map<string, { session: DaemonSession; timer: NodeJS.Timeout }[]>();

  /** Runs `fn` with a connection for `scope`'s caller: an idle one of the same sandbox and grant, or a new one. */
  async run<T>(scope: EnvdScope, fn: (session: DaemonSession) => Promise<T>): Promise<T> {
    const lease = await this.lease(scope);
    try {
      return await fn(lease.session);
    } finally {
      lease.release();
    }
  }

  /**
   * Lends a connection for `scope`'s caller until `release()`: for streams, which hold one for as
   * long as they last. A stream's own call is cancelled by its signal when its client goes away,
   * so the connection goes back to the pool clean.
   */
  async lease(scope: EnvdScope): Promise<{ session: DaemonSession; release(): void }> {
    const record = scope.deps.sandboxes.record(scope.sandboxId);
    const key = `${scope.sandboxId}\0${scope.caller.kind}\0${JSON.stringify(grantFor(record, scope.caller))}`;
    // A paused sandbox's daemon is frozen: openSession refuses it, so a kept connection must not be used either.
    const session = record.state === 'running' ? (this.take(key) ?? (await openSession(scope))) : await openSession(scope);
    let released = false;
    return {
      session,
      release: () => {
        if (released) return;
        released = true;
        this.give(key, session);
      },
    };
  }

  private take(key: string): DaemonSession | undefined {
    const list = this.idle.get(key);
    while (list && list.length > 0) {
      const { session, timer } = list.pop()!;
      clearTimeout(timer);
      if (session.open) return session;
    }
    this.idle.delete(key);
    return undefined;
  }

  private give(key: string, session: DaemonSession): void {
    const list = this.idle.get(key) ?? [];
    if (!session.open || list.length >= MAX_IDLE_PER_KEY) return session.close();
    const timer = setTimeout(() => {
      session.close();
      const left = this.idle.get(key)?.filter((entry) => entry.session !== session) ?? [];
      if (left.length > 0) this.idle.set(key, left);
      else this.idle.delete(key);
    }, IDLE_MS);
    timer.unref();
    list.push({ session, timer });
    this.idle.set(key, list);
  }

  /** Closes every idle connection (the server is closing). */
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
