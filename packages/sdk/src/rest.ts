import {
  CreateSandboxResponse,
  DeriveTokenResponse,
  ListSandboxesResponse,
  REST_PATHS,
  SandboxInfo,
  type CreateSandboxRequest,
  type DeriveTokenRequest,
  type SandboxState,
} from '@warren/protocol';
import { restError } from './connection.js';
import { makeError } from './errors.js';

/** Where the controller is and how to authenticate to it. */
export interface ControllerOptions {
  /** The controller's URL; `WARREN_URL` or http://127.0.0.1:7420 when absent. */
  baseUrl?: string | undefined;
  /** The API key; `WARREN_API_KEY` when absent. */
  apiKey?: string | undefined;
}

export const DEFAULT_BASE_URL = 'http://127.0.0.1:7420';

/** How many times a create refused for load is tried again. */
export const CREATE_RETRIES = 5;

/** Waits `ms`, or less when `signal` aborts (the caller then sees the abort on its next request). */
function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

export function resolveControllerOptions(options: ControllerOptions): { baseUrl: string; apiKey: string | undefined } {
  return { baseUrl: (options.baseUrl ?? process.env.WARREN_URL ?? DEFAULT_BASE_URL).replace(/\/+$/, ''), apiKey: options.apiKey ?? process.env.WARREN_API_KEY };
}

/** The controller's REST API, with its errors turned into SDK error classes. */
export class RestClient {
  constructor(
    readonly baseUrl: string,
    private readonly credential: string | undefined,
  ) {}

  /**
   * Creates a sandbox. A create the controller refused for load (its create queue was full or the
   * wait ran out: `RESOURCE_EXHAUSTED` with a retry time) is tried again after that time, with
   * jitter, up to {@link CREATE_RETRIES} times; any other failure is thrown at once.
   */
  async create(body: CreateSandboxRequest, signal?: AbortSignal): Promise<CreateSandboxResponse> {
    for (let attempt = 0; ; attempt++) {
      try {
        return CreateSandboxResponse.parse(await this.request('POST', REST_PATHS.sandboxes, body, signal));
      } catch (err) {
        const retryAfter = (err as { code?: string; details?: { retryAfterSeconds?: unknown } }).details?.retryAfterSeconds;
        if ((err as { code?: string }).code !== 'RESOURCE_EXHAUSTED' || typeof retryAfter !== 'number' || attempt >= CREATE_RETRIES || signal?.aborted)
          throw err;
        await sleep(Math.min(retryAfter, 30) * 1000 * (0.5 + Math.random()), signal);
      }
    }
  }

  async get(id: string, signal?: AbortSignal): Promise<SandboxInfo> {
    return SandboxInfo.parse(await this.request('GET', REST_PATHS.sandbox(id), undefined, signal));
  }

  async kill(id: string, signal?: AbortSignal): Promise<void> {
    await this.request('DELETE', REST_PATHS.sandbox(id), undefined, signal);
  }

  /** Sandboxes that carry every given label and are in the given state. */
  async list(filter: { labels?: Record<string, string>; state?: SandboxState } = {}, signal?: AbortSignal): Promise<SandboxInfo[]> {
    const query = new URLSearchParams();
    for (const [k, v] of Object.entries(filter.labels ?? {})) query.append('label', `${k}=${v}`);
    if (filter.state) query.set('state', filter.state);
    const qs = query.toString();
    return ListSandboxesResponse.parse(await this.request('GET', `${REST_PATHS.sandboxes}${qs ? `?${qs}` : ''}`, undefined, signal)).sandboxes;
  }

  /** `keepalive`, `pause`, `resume`: one POST on a sandbox, answered with its description. */
  async action(id: string, action: 'keepalive' | 'pause' | 'resume', signal?: AbortSignal): Promise<SandboxInfo> {
    return SandboxInfo.parse(await this.request('POST', REST_PATHS.action(id, action), undefined, signal));
  }

  async setTimeout(id: string, ttlSeconds: number, signal?: AbortSignal): Promise<SandboxInfo> {
    return SandboxInfo.parse(await this.request('POST', REST_PATHS.action(id, 'timeout'), { ttlSeconds }, signal));
  }

  async derive(id: string, body: DeriveTokenRequest, signal?: AbortSignal): Promise<DeriveTokenResponse> {
    return DeriveTokenResponse.parse(await this.request('POST', REST_PATHS.action(id, 'derive'), body, signal));
  }

  /**
   * `GET /readyz`: whether the controller can create sandboxes now, and what isolation its engine
   * gives them (user-namespace remap, gVisor, cgroup version, limits enforced, disk quota). A
   * controller that is not ready throws `SandboxNotReadyError` with the reason.
   */
  async readiness(signal?: AbortSignal): Promise<Record<string, unknown>> {
    return (await this.request('GET', REST_PATHS.readyz, undefined, signal)) as Record<string, unknown>;
  }

  /** The WebSocket URL of a sandbox's connection. */
  connectUrl(id: string): string {
    return `${this.baseUrl.replace(/^http/, 'ws')}${REST_PATHS.connect(id)}`;
  }

  private async request(method: string, path: string, body: unknown, signal: AbortSignal | undefined): Promise<unknown> {
    const headers: Record<string, string> = {};
    if (this.credential) headers.authorization = `Bearer ${this.credential}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    let res: Response;
    try {
      res = await fetch(`${this.baseUrl}${path}`, { method, headers, body: body === undefined ? null : JSON.stringify(body), signal: signal ?? null });
    } catch (err) {
      if (signal?.aborted) throw makeError('CANCELLED', `${method} ${path} was cancelled.`, { cause: err });
      throw makeError(
        'UPSTREAM_UNAVAILABLE',
        `Could not reach the Warren controller at ${this.baseUrl}: ${(err as Error).message}. Start it with scripts/start.`,
        { cause: err },
      );
    }
    const text = await res.text();
    if (!res.ok) throw restError(res.status, text);
    return text ? JSON.parse(text) : undefined;
  }
}
