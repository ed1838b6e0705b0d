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
 * key makes a session cookie and a CSRF token (kept by the page in memory); a cookie counts only
 * with that token in the `x-warren-csrf` header (REST) or the offered subprotocol (WebSocket), and
 * only from the controller's own origin (`Origin` and `Sec-Fetch-Site`). So a cross-site page
 * cannot use the cookie, the API-key routes stay header-authenticated for everyone else, and
 * nothing credential-like is ever in a URL.
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

  /** Logs in with the API key: a new session, or UNAUTHORIZED (the same answer whatever was wrong). */
  login(apiKey: unknown): { id: string; csrfToken: string; maxAgeSeconds: number } {
    if (typeof apiKey !== 'string' || apiKey.length === 0 || apiKey.length > 1024 || !this.options.credentials.isApiKey(apiKey))
      throw new CodedError('UNAUTHORIZED', 'Wrong API key: log in with the key the controller printed at its first start (or WARREN_API_KEY).');
    const sid = randomBytes(18).toString('base64url');
    const keyId = this.options.credentials.apiKeyId(apiKey);
    const payload = Buffer.from(
      JSON.stringify({ s: sid, e: this.clock.now() + this.options.ttlSeconds * 1000, ...(keyId === undefined ? {} : { k: keyId }) }),
    ).toString('base64url');
    const id = `${payload}.${this.options.credentials.consoleSignature(payload)}`;
    return { id, csrfToken: this.options.credentials.consoleCsrf(sid), maxAgeSeconds: this.options.ttlSeconds };
  }

  /** Ends the session the request's cookie names, if any, on this controller and (when shared) every replica. */
  async logout(req: IncomingMessage): Promise<void> {
    const session = this.live(this.cookieOf(req));
    if (!session) return;
    const now = this.clock.now();
    for (const [id, until] of this.revoked) if (until <= now) this.revoked.delete(id);
    this.revoked.set(session.id, session.expiresAt);
    await this.options.revocations?.revokeSession(session.id, session.expiresAt);
  }

  /**
   * The CSRF token of the request's live session, for the console's page when the browser navigates
   * to it (a top-level navigation only: `Sec-Fetch-Mode: navigate`, so a script of this origin
   * that fetches the page, such as an app behind a port URL, never reads it).
   */
  csrfForNavigation(req: IncomingMessage): string | undefined {
    if (req.headers['sec-fetch-mode'] !== 'navigate' || req.headers['sec-fetch-dest'] !== 'document') return undefined;
    return this.live(this.cookieOf(req))?.csrf;
  }

  /**
   * Who a request with the console's cookie is: the operator, when the session lives and the
   * request is same-origin and carries the session's CSRF token; FORBIDDEN when a cookie is there
   * but any of that is missing (a cross-site request); undefined when there is no cookie at all.
   */
  callerOf(req: IncomingMessage, kind: 'rest' | 'upgrade'): Caller | undefined {
    const id = this.cookieOf(req);
    if (id === undefined) return undefined;
    const session = this.live(id);
    if (!session) throw new CodedError('UNAUTHORIZED', 'The console session has ended; log in again.');
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
    if (presented === undefined || !tokenMatches(presented, session.csrf)) throw crossSite('a request without the session CSRF token');
    return { kind: 'operator', keyId: session.keyId };
  }

  /**
   * The session cookie value the request names: the first `warren_console` value that is a live
   * session, else the first one (undefined when there is none). A browser sends every cookie of
   * that name that applies, the one with the longest path first, and a script of an app behind a
   * port URL (same origin) can set one on `/ui/`: taking the first alone would log the operator
   * out for good, since their own cookie (`Path=/`) would always come second.
   */
  private cookieOf(req: IncomingMessage): string | undefined {
    const all = cookiesOf(req);
    return all.find((value) => this.live(value) !== undefined) ?? all[0];
  }

  /** The session a cookie value names when its signature checks out, it has not expired and it was not revoked. */
  private live(cookie: string | undefined): Session | undefined {
    if (cookie === undefined || cookie.length > 1024) return undefined;
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
    if (d.e <= this.clock.now() || this.revoked.has(d.s) || this.sharedRevoked.has(d.s)) return undefined;
    return { id: d.s, csrf: this.options.credentials.consoleCsrf(d.s), expiresAt: d.e, keyId: d.k };
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

function cookiesOf(req: IncomingMessage): string[] {
  const out: string[] = [];
  for (const pair of (req.headers.cookie ?? '').split(';')) {
    const [name, ...rest] = pair.trim().split('=');
    if (name === SESSION_COOKIE && rest.length > 0) out.push(rest.join('='));
  }
  return out;
}
