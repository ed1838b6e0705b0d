import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { CodedError } from '@warren/protocol';
import { systemClock, type Clock } from '../clock.js';
import type { Credentials } from '../credentials.js';
import type { Caller } from '../grants.js';

/** The console's session cookie: HttpOnly, SameSite=Strict, never readable by the page's scripts. */
export const SESSION_COOKIE = 'warren_console';
/** The header every console REST request carries its session's CSRF token in. */
export const CSRF_HEADER = 'x-warren-csrf';
/** The WebSocket subprotocol the console offers and the controller echoes. */
export const CONSOLE_PROTOCOL = 'warren.console';
/** The console's WebSocket upgrades carry the CSRF token as a second offered subprotocol, `warren-csrf.<token>` (browsers cannot set headers there). */
export const CSRF_PROTOCOL_PREFIX = 'warren-csrf.';
/** How often the revoked sessions of other replicas are read again (when they are shared). */
const REVOKED_REFRESH_MS = 2000;
/** The most sessions one cookie keeps (one per console tab that logged in), newest first. */
const MAX_SESSIONS_PER_COOKIE = 8;
/** Between the sessions in one cookie value (not a character of base64url or of the `.` that joins a session's two parts). */
const SESSION_SEPARATOR = '~';

interface Session {
  id: string;
  csrf: string;
  expiresAt: number;
  /** Which API key logged in (it owns the snapshots made through the console). */
  keyId: string | undefined;
}

/** Where revoked sessions are shared between controller replicas (Kubernetes: a ConfigMap). */
export interface SessionRevocations {
  revokeSession(key: string, expiresAt: number): Promise<void>;
  revokedSessions(): Promise<Set<string>>;
}

/** What the console's session store needs. */
export interface ConsoleSessionsOptions {
  credentials: Credentials;
  /** How long a session lives after login, seconds. */
  ttlSeconds: number;
  clock?: Clock;
  /** Revocations shared with other replicas; absent, a logout is known to this controller alone (the only one). */
  revocations?: SessionRevocations | undefined;
}

/**
 * The console's sessions, and the one place a session cookie becomes a caller. A login with the API
 * key makes a session cookie and a CSRF token, which only the login's answer ever carries: the page
 * that logged in keeps it in memory, and nothing hands it out again (not a reload, not a cookie).
 * A request counts only with that token in the `x-warren-csrf` header (REST) or the offered
 * subprotocol (WebSocket), from the controller's own origin (`Origin` and `Sec-Fetch-Site`), and
 * the session is the one among the request's `warren_console` cookies that the token belongs to.
 *
 * So a session is bound to the page that made it. A page of a sandbox's port on the same origin
 * can set `warren_console` cookies (any path, any value: another API key's live session, even one
 * it logged in itself), but it never learns a token the console page holds, and the console never
 * adopts a session it did not log in: a planted cookie is never the operator's session. A
 * cross-site page cannot use the cookie either, the API-key routes stay header-authenticated for
 * everyone else, and nothing credential-like is ever in a URL.
 *
 * Sessions are stateless, so every controller replica with the same master key accepts them: the
 * cookie is `<payload>.<HMAC>` (a random session id, the expiry and the API key's id, signed with a
 * key derived from the master key), and the CSRF token is an HMAC of the session id. A logout
 * revokes the session id until it would have expired: in memory, and with {@link
 * ConsoleSessionsOptions.revocations} for every replica (which read the list again every 2 s).
 *
 * @example
 * const sessions = new ConsoleSessions({ credentials, ttlSeconds: 28800 });
 * const caller = sessions.callerOf(req, 'rest'); // { kind: 'operator' } or undefined (no cookie)
 */
export class ConsoleSessions {
  /** Revoked session ids and when they would have expired. */
  private readonly revoked = new Map<string, number>();
  /** The shared list as last read. */
  private sharedRevoked = new Set<string>();
  private readonly clock: Clock;
  private readonly refresher: NodeJS.Timeout | undefined;

  constructor(private readonly options: ConsoleSessionsOptions) {
    this.clock = options.clock ?? systemClock;
    const revocations = options.revocations;
    if (revocations) {
      const refresh = () =>
        void revocations.revokedSessions().then(
          (set) => (this.sharedRevoked = set),
          () => undefined, // kept as last read; logged nowhere (the API server being away is reported elsewhere)
        );
      refresh();
      this.refresher = setInterval(refresh, REVOKED_REFRESH_MS);
      this.refresher.unref();
    }
  }

  /** Stops reading shared revocations. */
  close(): void {
    clearInterval(this.refresher);
  }

  /**
   * Logs in with the API key: a new session, or UNAUTHORIZED (the same answer whatever was wrong).
   * `id` is the new cookie value: the new session first, then the live sessions of `req`'s cookies
   * (other console tabs of this browser, each holding its own token), at most 8. So another login
   * in the same browser, even one a port's page makes with a key of its own, does not end them.
   */
  login(apiKey: unknown, req?: IncomingMessage): { id: string; csrfToken: string; maxAgeSeconds: number } {
    if (typeof apiKey !== 'string' || apiKey.length === 0 || apiKey.length > 1024 || !this.options.credentials.isApiKey(apiKey))
      throw new CodedError('UNAUTHORIZED', 'Wrong API key: log in with the key the controller printed at its first start (or WARREN_API_KEY).');
    const sid = randomBytes(18).toString('base64url');
    const keyId = this.options.credentials.apiKeyId(apiKey);
    const payload = Buffer.from(
      JSON.stringify({ s: sid, e: this.clock.now() + this.options.ttlSeconds * 1000, ...(keyId === undefined ? {} : { k: keyId }) }),
    ).toString('base64url');
    const value = `${payload}.${this.options.credentials.consoleSignature(payload)}`;
    const others = req ? this.liveValues(req).slice(0, MAX_SESSIONS_PER_COOKIE - 1) : [];
    return {
      id: [value, ...others].join(SESSION_SEPARATOR),
      csrfToken: this.options.credentials.consoleCsrf(sid),
      maxAgeSeconds: this.options.ttlSeconds,
    };
  }

  /**
   * Logs this browser out: ends every live session in the request's cookies (the caller's own and
   * those of its other tabs, at most 8 more), on this controller and (when shared) every replica.
   * The caller then clears the cookie.
   */
  async logout(req: IncomingMessage): Promise<void> {
    const now = this.clock.now();
    for (const [id, until] of this.revoked) if (until <= now) this.revoked.delete(id);
    for (const value of this.liveValues(req).slice(0, MAX_SESSIONS_PER_COOKIE + 1)) {
      const session = this.live(value)!;
      this.revoked.set(session.id, session.expiresAt);
      await this.options.revocations?.revokeSession(session.id, session.expiresAt);
    }
  }

  /** The request's cookie values that are live sessions, once each, in the order the browser sent them. */
  private liveValues(req: IncomingMessage): string[] {
    return [...new Set(cookiesOf(req))].filter((value) => this.live(value) !== undefined);
  }

  /**
   * Who a request with the console's cookie is: the operator, when it is same-origin and carries the
   * CSRF token of a live session in its `warren_console` cookies; FORBIDDEN when a cookie is there
   * but the request is cross-site or carries no token of a session in its cookies (a forged
   * request, or a session eight later logins in this browser pushed out); UNAUTHORIZED when no
   * cookie holds a session this controller signed, or the token's session has ended; undefined
   * when there is no cookie at all.
   */
  callerOf(req: IncomingMessage, kind: 'rest' | 'upgrade'): Caller | undefined {
    if (cookiesOf(req).length === 0) return undefined;
    const origin = req.headers.origin;
    if (kind === 'upgrade' && origin === undefined) throw crossSite('a WebSocket upgrade without an Origin');
    if (origin !== undefined && !sameOrigin(origin, req.headers.host)) throw crossSite(`Origin '${origin}'`);
    const site = req.headers['sec-fetch-site'];
    if (site !== undefined && site !== 'same-origin') throw crossSite(`Sec-Fetch-Site '${String(site)}'`);
    const presented =
      kind === 'rest'
        ? headerValue(req, CSRF_HEADER)
        : offeredProtocols(req)
            .find((p) => p.startsWith(CSRF_PROTOCOL_PREFIX))
            ?.slice(CSRF_PROTOCOL_PREFIX.length);
    const session = presented === undefined || presented === '' ? undefined : this.sessionFor(req, presented);
    if (!session && !cookiesOf(req).some((value) => this.signed(value) !== undefined)) throw new CodedError('UNAUTHORIZED', 'No console session; log in.');
    if (!session) throw crossSite('a request without the CSRF token of a session in its cookie');
    if (this.ended(session)) throw new CodedError('UNAUTHORIZED', 'The console session has ended; log in again.');
    // The session lives no longer than its key: a revoked, expired or rotated-away key ends it.
    const principal = session.keyId === undefined ? undefined : this.options.credentials.keys.byId(session.keyId);
    if (principal === undefined) throw new CodedError('UNAUTHORIZED', 'The console session has ended; log in again.');
    return { kind: 'operator', ...principal };
  }

  /**
   * The signed session among the request's `warren_console` cookies that `csrf` belongs to, live or
   * ended. A browser sends every cookie of that name that applies (the longest path first), and a
   * script of an app behind a port URL (same origin) can add its own: the token, which only the
   * page that logged in holds, picks the session, so an added cookie neither replaces the
   * operator's session nor logs them out.
   */
  private sessionFor(req: IncomingMessage, csrf: string): Session | undefined {
    for (const value of cookiesOf(req)) {
      const session = this.signed(value);
      if (session && tokenMatches(csrf, session.csrf)) return session;
    }
    return undefined;
  }

  /** The session a cookie value names when its signature checks out, it has not expired and it was not revoked. */
  private live(cookie: string | undefined): Session | undefined {
    const session = this.signed(cookie);
    return session && !this.ended(session) ? session : undefined;
  }

  /** The session a cookie value names when its signature checks out, live or not. */
  private signed(cookie: string | undefined): Session | undefined {
    if (cookie === undefined || !SESSION_SHAPE.test(cookie)) return undefined;
    const [payload, mac, ...rest] = cookie.split('.');
    if (!payload || !mac || rest.length > 0 || !tokenMatches(mac, this.options.credentials.consoleSignature(payload))) return undefined;
    let data: unknown;
    try {
      data = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
    } catch {
      return undefined;
    }
    const d = data as { s?: unknown; e?: unknown; k?: unknown };
    if (typeof d !== 'object' || d === null || typeof d.s !== 'string' || typeof d.e !== 'number' || (d.k !== undefined && typeof d.k !== 'string'))
      return undefined;
    return { id: d.s, csrf: this.options.credentials.consoleCsrf(d.s), expiresAt: d.e, keyId: d.k };
  }

  /** Whether a signed session has ended: expired, or revoked here or on another replica. */
  private ended(session: Session): boolean {
    return session.expiresAt <= this.clock.now() || this.revoked.has(session.id) || this.sharedRevoked.has(session.id);
  }
}

/** The `Set-Cookie` value of a session, or of its removal (`maxAgeSeconds` 0). `Secure` when the page came over TLS. */
export function sessionCookie(id: string, maxAgeSeconds: number, secure: boolean): string {
  return `${SESSION_COOKIE}=${id}; Path=/; Max-Age=${maxAgeSeconds}; HttpOnly; SameSite=Strict${secure ? '; Secure' : ''}`;
}

function crossSite(what: string): CodedError {
  return new CodedError(
    'FORBIDDEN',
    `Refused ${what}: the console's session works only from the console's own pages (same origin, with its CSRF token). Other clients send Authorization: Bearer <API key>.`,
  );
}

/** An Origin is this controller's own when its host (and port) is the one the request was sent to. */
function sameOrigin(origin: string, host: string | undefined): boolean {
  try {
    return host !== undefined && new URL(origin).host === host.toLowerCase();
  } catch {
    return false;
  }
}

function headerValue(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function offeredProtocols(req: IncomingMessage): string[] {
  return (headerValue(req, 'sec-websocket-protocol') ?? '').split(',').map((p) => p.trim());
}

function tokenMatches(presented: string, expected: string): boolean {
  const given = Buffer.from(presented);
  const wanted = Buffer.from(expected);
  return given.length === wanted.length && timingSafeEqual(given, wanted);
}

/** A session's shape (`<payload>.<HMAC>`), checked before any signature is computed. */
const SESSION_SHAPE = /^[A-Za-z0-9_-]{1,1024}\.[A-Za-z0-9_-]{43}$/;

/** Every value in the request's `warren_console` cookies (each may hold several sessions); the header's size bounds how many. */
function cookiesOf(req: IncomingMessage): string[] {
  const out: string[] = [];
  for (const pair of (req.headers.cookie ?? '').split(';')) {
    const [name, ...rest] = pair.trim().split('=');
    if (name === SESSION_COOKIE && rest.length > 0)
      out.push(
        ...rest
          .join('=')
          .split(SESSION_SEPARATOR)
          .filter((value) => value !== ''),
      );
  }
  return out;
}
