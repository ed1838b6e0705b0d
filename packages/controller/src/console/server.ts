import { listedTenant } from '../tenancy/reach.js';
import type { Caller } from '../grants.js';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import path from 'node:path';
import { CodedError } from '@warren/protocol';
import type { ControllerConfig } from '../config.js';
import type { SandboxService } from '../sandboxes.js';
import type { MetricsHistory } from './history.js';
import { ConsoleSessions, sessionCookie } from './session.js';

/** Where the built console is: the controller package's `dist/ui` (Vite writes it there in `pnpm build`), from `src/` and `dist/` alike. */
export const CONSOLE_DIST = new URL('../../dist/ui/', import.meta.url).pathname;

/**
 * The console's Content-Security-Policy: scripts and connections from this origin only, no inline
 * script, no eval, no frames, no plugins. Inline styles stay allowed because xterm.js's renderer
 * writes its own style element; nothing the sandbox writes is ever put into HTML or CSS.
 */
export const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

/** Headers on every answer under the console's path. */
const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy': CONSOLE_CSP,
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  // A page opened from the console (or one that opens it) never gets a handle on its window.
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
};

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
  '.json': 'application/json',
};

/** What the console's server needs from the controller. */
export interface ConsoleServerDeps {
  config: ControllerConfig;
  sessions: ConsoleSessions;
  sandboxes: SandboxService;
  history: MetricsHistory;
  /** Answers a request under the console's API with the rest of the controller's checks (authenticate, then the JSON body reader). */
  readJson(req: IncomingMessage): Promise<unknown>;
  sendJson(res: ServerResponse, status: number, body: unknown): void;
  /** The caller of a request by the one authentication (API key header or console session). */
  operator(req: IncomingMessage): Caller;
  /** Where the built files are; the package's `dist/ui` by default. */
  dist?: string;
}

/**
 * The web console at `config.console.path` (`/ui`): its static files, read once from the package's
 * build output and served only by their exact names, and its small API (`api/login`,
 * `api/logout`, `api/controller`). Every other call the pages make goes to the REST routes and the
 * WebSocket relay with the session cookie, which {@link ConsoleSessions} maps to the operator.
 */
export class ConsoleServer {
  private readonly files = new Map<string, { body: Buffer; type: string }>();
  private readonly base: string;

  constructor(private readonly deps: ConsoleServerDeps) {
    this.base = deps.config.console.path;
    const dist = deps.dist ?? CONSOLE_DIST;
    for (const file of listFiles(dist)) {
      const type = TYPES[path.extname(file)];
      if (type) this.files.set(`/${path.relative(dist, file).split(path.sep).join('/')}`, { body: readFileSync(file), type });
    }
  }

  /** True when `pathname` is the console's (its path or below). */
  owns(pathname: string): boolean {
    return pathname === this.base || pathname.startsWith(`${this.base}/`);
  }

  async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    for (const [name, value] of Object.entries(SECURITY_HEADERS)) res.setHeader(name, value);
    const url = new URL(req.url ?? '/', 'http://controller');
    const rest = url.pathname.slice(this.base.length);
    if (rest === '') return void res.writeHead(308, { location: `${this.base}/` }).end();
    if (rest.startsWith('/api/')) return this.api(rest.slice('/api/'.length), req, res);
    if (req.method !== 'GET' && req.method !== 'HEAD')
      throw new CodedError('METHOD_NOT_ALLOWED', `${req.method} is not supported on ${url.pathname}; use GET.`);
    if (rest === '/' || rest === '/index.html') return this.index(req, res);
    const file = this.files.get(rest);
    if (!file) throw new CodedError('NOT_FOUND', `No console file ${url.pathname}.`);
    // Vite names assets by their content hash, so they never change under one name.
    res.writeHead(200, { 'content-type': file.type, 'content-length': file.body.length, 'cache-control': 'public, max-age=31536000, immutable' });
    res.end(req.method === 'HEAD' ? undefined : file.body);
  }

  private index(req: IncomingMessage, res: ServerResponse): void {
    const page = this.files.get('/index.html');
    if (!page)
      throw new CodedError(
        'NOT_SUPPORTED',
        `The console is not built into this controller package (no ${CONSOLE_DIST}index.html); run 'pnpm build' at the repository root, or turn it off with console.enabled: false.`,
      );
    // The same page for everyone, with or without a cookie: a session's token is never put into it
    // (only the login's answer carries one), so a cookie planted by a port's page gets no session.
    res.writeHead(200, { 'content-type': page.type, 'cache-control': 'no-store', 'content-length': page.body.length });
    res.end(req.method === 'HEAD' ? undefined : page.body);
  }

  private async api(name: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    res.setHeader('cache-control', 'no-store');
    const method = req.method ?? 'GET';
    const want = { login: 'POST', logout: 'POST', controller: 'GET' }[name];
    if (!want) throw new CodedError('NOT_FOUND', `No console API ${name}; there are login, logout and controller.`);
    if (method !== want) throw new CodedError('METHOD_NOT_ALLOWED', `${method} is not supported on ${this.base}/api/${name}; use ${want}.`, { allowed: want });
    const secure = req.headers['x-forwarded-proto'] === 'https' || (req.socket as { encrypted?: boolean }).encrypted === true;
    if (name === 'login') {
      // Login CSRF: a cross-site page may not log the browser in to a session of its choosing.
      const site = req.headers['sec-fetch-site'];
      if (
        (site !== undefined && site !== 'same-origin') ||
        (req.headers.origin !== undefined && new URL(req.headers.origin, 'http://x').host !== req.headers.host)
      )
        throw new CodedError('FORBIDDEN', 'Console logins are accepted only from the console page itself (same origin).');
      const body = (await this.deps.readJson(req)) as { apiKey?: unknown } | null;
      const session = this.deps.sessions.login(body?.apiKey, req);
      res.setHeader('set-cookie', sessionCookie(session.id, session.maxAgeSeconds, secure));
      return this.deps.sendJson(res, 200, { csrfToken: session.csrfToken, expiresInSeconds: session.maxAgeSeconds });
    }
    const caller = this.deps.operator(req);
    if (name === 'logout') {
      await this.deps.sessions.logout(req);
      res.setHeader('set-cookie', sessionCookie('', 0, secure));
      return void res.writeHead(204).end();
    }
    const { config, sandboxes, history } = this.deps;
    // A member key sees its own tenant's sandboxes; the controller's history spans every tenant, so only an admin sees it.
    const tenant = listedTenant(caller);
    if (tenant !== undefined)
      return this.deps.sendJson(res, 200, {
        provider: config.provider,
        defaultImage: config.defaultImage,
        limits: config.limits,
        maxLimits: config.maxLimits,
        tenant,
        sandboxes: sandboxes.countByState(tenant),
        history: [],
      });
    this.deps.sendJson(res, 200, {
      provider: config.provider,
      defaultImage: config.defaultImage,
      limits: config.limits,
      maxLimits: config.maxLimits,
      caps: { maxSandboxes: config.maxSandboxes, maxConcurrentCreates: config.maxConcurrentCreates, maxConnections: config.maxConnections },
      pool: { size: config.poolSize, ready: sandboxes.countByState().pooled ?? 0 },
      sandboxes: sandboxes.countByState(),
      history: history.list(),
    });
  }
}

function listFiles(dir: string): string[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  return names.flatMap((name) => {
    const full = path.join(dir, name);
    return statSync(full).isDirectory() ? listFiles(full) : [full];
  });
}
