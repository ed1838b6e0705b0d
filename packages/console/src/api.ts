/**
 * The console's one way to the controller's REST API: same-origin fetches with the session cookie
 * (sent by the browser, never readable here) and the session's CSRF token in a header. The token
 * lives in this page's memory only, from the login answer: nothing is kept in any storage or put
 * in a URL, and the controller never hands it out again. So a reload or a new tab logs in again,
 * and a session cookie that a port's page on this origin planted is never this page's session.
 */

let csrfToken = '';
const listeners = new Set<() => void>();

/** The console's own API, below the path the page was served from (`/ui/api/...`). */
const consoleBase = new URL('./api/', location.href).pathname;

/** A typed REST error: the controller's code, message and suggestion. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly suggestion?: string,
  ) {
    super(message);
  }
}

export function loggedIn(): boolean {
  return csrfToken !== '';
}

export function csrf(): string {
  return csrfToken;
}

/** Calls `fn` whenever the session starts or ends. */
export function onSessionChange(fn: () => void): () => void {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function setToken(token: string): void {
  csrfToken = token;
  for (const fn of listeners) fn();
}

export async function login(apiKey: string): Promise<void> {
  const answer = await request<{ csrfToken: string }>('POST', `${consoleBase}login`, { apiKey }, false);
  setToken(answer.csrfToken);
}

export async function logout(): Promise<void> {
  await request('POST', `${consoleBase}logout`).catch(() => undefined);
  setToken('');
}

/** GETs the console's controller summary (limits, pool, metric history). */
export function consoleApi<T>(name: string): Promise<T> {
  return request<T>('GET', `${consoleBase}${name}`);
}

/** One REST call; a 401 ends the session (the cookie expired or the controller restarted). */
export async function request<T = unknown>(method: string, path: string, body?: unknown, withToken = true): Promise<T> {
  const headers: Record<string, string> = {};
  if (withToken) headers['x-warren-csrf'] = csrfToken;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'same-origin',
    cache: 'no-store',
  });
  const text = await res.text();
  const data: unknown = text ? safeJson(text) : undefined;
  if (!res.ok) {
    const error = (data as { error?: { code?: string; message?: string; suggestion?: string } } | undefined)?.error;
    if (res.status === 401 && withToken) setToken('');
    throw new ApiError(res.status, error?.code ?? `HTTP_${res.status}`, error?.message ?? (text.slice(0, 200) || res.statusText), error?.suggestion);
  }
  return data as T;
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

// The wire's own types, from the protocol's schemas (type-only: nothing of zod reaches the page).
export type { SandboxInfo, SandboxMetrics, SnapshotInfo } from '@warren/protocol';
