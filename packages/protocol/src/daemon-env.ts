/**
 * The sandbox's environment (the image's `ENV` and the create request's `env`) is the daemon's own
 * process environment too, since the daemon is the container's first process; and the daemon runs
 * as root with the controller's secret. Variables that the dynamic loader, glibc, Node or OpenSSL
 * read at start-up would run the sandbox's code inside it (`LD_PRELOAD`, `LD_AUDIT`, `GCONV_PATH`,
 * `GLIBC_TUNABLES`, `NODE_OPTIONS=--require`, `OPENSSL_CONF` engines, ...). So the container gets
 * each such variable empty, and the daemon is handed their real values to give back to the
 * commands it starts, which are the sandbox's own.
 */

/** Every name of these families is guarded: the loader's and glibc's, Node's and libuv's, OpenSSL's. */
const GUARDED_PATTERN =
  /^(LD_\w*|NODE_\w*|UV_\w*|OPENSSL_\w*|MALLOC_\w*|GLIBC_\w*|GCONV_PATH|LOCPATH|NLSPATH|HOSTALIASES|RES_OPTIONS|LOCALDOMAIN|TZDIR|SSL_CERT_FILE|SSL_CERT_DIR)$/;

/**
 * Guarded always, whether or not the controller saw them (an image's `ENV` is not always known:
 * on Kubernetes the kubelet merges it).
 */
export const DAEMON_GUARDED_VARIABLES: readonly string[] = [
  'LD_PRELOAD',
  'LD_AUDIT',
  'LD_LIBRARY_PATH',
  'LD_DEBUG',
  'LD_DEBUG_OUTPUT',
  'LD_PROFILE',
  'GLIBC_TUNABLES',
  'GCONV_PATH',
  'LOCPATH',
  'MALLOC_TRACE',
  'NODE_OPTIONS',
  'NODE_PATH',
  'NODE_EXTRA_CA_CERTS',
  'NODE_REDIRECT_WARNINGS',
  'NODE_V8_COVERAGE',
  'NODE_DEBUG',
  'NODE_DEBUG_NATIVE',
  'NODE_ICU_DATA',
  'NODE_COMPILE_CACHE',
  'NODE_REPL_EXTERNAL_MODULE',
  'NODE_TLS_REJECT_UNAUTHORIZED',
  'UV_THREADPOOL_SIZE',
  'OPENSSL_CONF',
  'OPENSSL_MODULES',
  'OPENSSL_ENGINES',
  'SSL_CERT_FILE',
  'SSL_CERT_DIR',
];

/** The variable that carries the guarded variables' real values to the daemon (it removes it). */
export const SANDBOX_ENV_VARIABLE = 'WARREN_SANDBOX_ENV';

/** Whether a variable of this name is kept from the daemon's own process. */
export function isDaemonGuarded(name: string): boolean {
  return GUARDED_PATTERN.test(name) || DAEMON_GUARDED_VARIABLES.includes(name);
}

/**
 * The container's environment entries (`KEY=value`) for a sandbox: `env` with every guarded name
 * set empty, and {@link SANDBOX_ENV_VARIABLE} holding the guarded names and the real values of
 * those the image (`imageEnv`, its `ENV` as `KEY=value`, when known) or `env` set.
 */
export function containerEnv(env: Readonly<Record<string, string>>, imageEnv: readonly string[] = []): string[] {
  const effective = new Map<string, string>();
  for (const entry of imageEnv) {
    const at = entry.indexOf('=');
    if (at > 0) effective.set(entry.slice(0, at), entry.slice(at + 1));
  }
  // An image committed from a sandbox (a snapshot) holds the blanked names and the hand-over: its real values count.
  const inherited = effective.get(SANDBOX_ENV_VARIABLE);
  effective.delete(SANDBOX_ENV_VARIABLE);
  if (inherited !== undefined) {
    const before = handedOver(inherited);
    for (const key of before.guarded) effective.delete(key);
    for (const [key, value] of Object.entries(before.restore)) effective.set(key, value);
  }
  // The request's own, except the hand-over's name (only the controller writes that).
  const requested = Object.entries(env).filter(([key]) => key !== SANDBOX_ENV_VARIABLE);
  for (const [key, value] of requested) effective.set(key, value);
  const guarded = new Set(DAEMON_GUARDED_VARIABLES);
  for (const key of effective.keys()) if (isDaemonGuarded(key)) guarded.add(key);
  const restore: Record<string, string> = {};
  for (const key of guarded) if (effective.has(key)) restore[key] = effective.get(key)!;
  const handed = Buffer.from(JSON.stringify({ guarded: [...guarded], restore })).toString('base64url');
  return [
    ...requested.filter(([key]) => !guarded.has(key)).map(([key, value]) => `${key}=${value}`),
    ...[...guarded].map((key) => `${key}=`),
    `${SANDBOX_ENV_VARIABLE}=${handed}`,
  ];
}

/**
 * The daemon's side: removes {@link SANDBOX_ENV_VARIABLE} from `processEnv` and returns the
 * commands' base environment, `processEnv` with the guarded names' real values put back (and the
 * guarded names the sandbox never set left out). A missing or malformed hand-over leaves
 * `processEnv` as it is, minus the guarded names.
 */
export function sandboxEnvFrom(processEnv: NodeJS.ProcessEnv): Record<string, string> {
  const { guarded, restore } = handedOver(processEnv[SANDBOX_ENV_VARIABLE] ?? '');
  delete processEnv[SANDBOX_ENV_VARIABLE];
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(processEnv)) if (value !== undefined && !guarded.includes(key)) out[key] = value;
  return { ...out, ...restore };
}

/** The hand-over's guarded names and real values; a missing or malformed one guards the fixed list and restores nothing. */
function handedOver(text: string): { guarded: string[]; restore: Record<string, string> } {
  let guarded: string[] = [...DAEMON_GUARDED_VARIABLES];
  let restore: Record<string, string> = {};
  try {
    const parsed = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as { guarded?: unknown; restore?: unknown };
    if (Array.isArray(parsed.guarded) && parsed.guarded.every((k) => typeof k === 'string')) guarded = parsed.guarded;
    if (parsed.restore && typeof parsed.restore === 'object' && Object.values(parsed.restore).every((v) => typeof v === 'string'))
      restore = parsed.restore as Record<string, string>;
  } catch {
    // nothing handed over (an older controller)
  }
  return { guarded, restore };
}
