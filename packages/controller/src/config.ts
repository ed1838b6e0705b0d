import os from 'node:os';
import path from 'node:path';

/** Everything the controller can be told; {@link loadConfig} fills it from the environment. */
export interface ControllerConfig {
  /** Address to bind; loopback unless told otherwise. */
  host: string;
  /** Port to listen on; 0 picks a free one. */
  port: number;
  /** Where the controller keeps its keys and the sandboxes' socket folders. */
  stateDir: string;
  /** Used when the environment sets WARREN_API_KEY; otherwise one is generated on first start. */
  apiKey?: string | undefined;
  /** The image a create without `image` gets. */
  defaultImage: string;
  /** The bundled daemon that goes into the runtime volume. */
  agentBundlePath: string;
  /** Default sandbox limits. */
  limits: { memoryMb: number; cpus: number; pidsLimit: number; ttlSeconds: number };
  /** How long a create waits for the daemon's first answer. */
  readyTimeoutMs: number;
  /** How often the reaper looks for expired sandboxes. */
  reapIntervalMs: number;
}

/** The default state folder: /var/lib/warren for root, the XDG state folder otherwise. */
export function defaultStateDir(): string {
  if (process.getuid?.() === 0) return '/var/lib/warren';
  return path.join(process.env.XDG_STATE_HOME ?? path.join(os.homedir(), '.local', 'state'), 'warren');
}

/**
 * Reads the configuration from `WARREN_*` environment variables over the defaults.
 *
 * @example
 * const config = loadConfig({ ...process.env, WARREN_PORT: '0' });
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, overrides: Partial<ControllerConfig> = {}): ControllerConfig {
  const int = (name: string, fallback: number) => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw);
    if (!Number.isFinite(value) || value < 0) throw new Error(`${name} must be a non-negative number, got '${raw}'`);
    return value;
  };
  return {
    host: env.WARREN_HOST ?? '127.0.0.1',
    port: int('WARREN_PORT', 7420),
    stateDir: env.WARREN_STATE_DIR ?? defaultStateDir(),
    apiKey: env.WARREN_API_KEY || undefined,
    defaultImage: env.WARREN_DEFAULT_IMAGE ?? 'warren/sandbox:latest',
    agentBundlePath: env.WARREN_AGENT_BUNDLE ?? new URL('../../agent/dist/warren-agent.mjs', import.meta.url).pathname,
    limits: {
      memoryMb: int('WARREN_MEMORY_MB', 1024),
      cpus: int('WARREN_CPUS', 1),
      pidsLimit: int('WARREN_PIDS_LIMIT', 512),
      ttlSeconds: int('WARREN_TTL_SECONDS', 3600),
    },
    readyTimeoutMs: int('WARREN_READY_TIMEOUT_MS', 30_000),
    reapIntervalMs: int('WARREN_REAP_INTERVAL_MS', 10_000),
    ...overrides,
  };
}
