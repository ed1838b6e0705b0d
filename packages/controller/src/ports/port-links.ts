import { narrowPolicy, type FilePolicy, type PortUrlResponse } from '@warren/protocol';
import type { ControllerConfig } from '../config.js';
import type { Credentials } from '../credentials.js';
import { DEFAULT_POLICY, mintedExpiry, type Caller } from '../grants.js';
import type { SandboxRecord } from '../sandboxes.js';

/** The query parameters of a signed URL. */
export const PORT_SIGNATURE_PARAM = 'warren_sig';
export const PORT_EXPIRY_PARAM = 'warren_exp';
/** The cookie a browser keeps a signed URL's signature in, for the page's other requests. */
export const PORT_COOKIE = 'warren_port';
/** A signed URL's lifetime when the request names none. */
const DEFAULT_TTL_SECONDS = 3600;

/**
 * `POST /v1/sandboxes/:id/port-urls`: a signed URL for one port of one sandbox. It never outlives
 * the credential that asked for it: a derived token with a lifetime gets a URL that ends when the
 * token does, whatever `ttlSeconds` said (the answer's `expiresAt` is the real end).
 *
 * @example
 * mintPortUrl({ credentials, config }, caller, 'abc', 3000, 600); // { path: '/v1/sandboxes/abc/ports/3000/?warren_sig=...', expiresAt }
 */
export function mintPortUrl(
  deps: { credentials: Credentials; config: Pick<ControllerConfig, 'portDomain' | 'portDomainScheme'> },
  caller: Caller,
  id: string,
  port: number,
  ttlSeconds: number | undefined,
  now = Date.now(),
): PortUrlResponse {
  const expiresAt = mintedExpiry(caller, now + (ttlSeconds ?? DEFAULT_TTL_SECONDS) * 1000)!;
  const sig = deps.credentials.portSignature(id, port, expiresAt);
  const query = `?${PORT_SIGNATURE_PARAM}=${sig}&${PORT_EXPIRY_PARAM}=${expiresAt}`;
  const { portDomain, portDomainScheme } = deps.config;
  return {
    path: `/v1/sandboxes/${id}/ports/${port}/${query}`,
    ...(portDomain ? { url: `${portDomainScheme}://${port}-${id}.${portDomain}/${query}` } : {}),
    expiresAt: new Date(expiresAt).toISOString(),
  };
}

/** The end (ms since the epoch) of a signed URL's signature and expiry when they check out for this sandbox and port, else undefined. */
export function signedUntil(
  credentials: Credentials,
  id: string,
  port: number,
  sig: string | null | undefined,
  exp: string | null | undefined,
): number | undefined {
  const expiresAt = Number(exp);
  return typeof sig === 'string' && Number.isSafeInteger(expiresAt) && expiresAt > Date.now() && credentials.isPortSignature(id, port, expiresAt, sig)
    ? expiresAt
    : undefined;
}

/**
 * Who the holder of a port link is (a signed URL, its cookie, or nobody at all on a public port):
 * a derived caller that may open tunnels to the sandbox's ports (exec, which a port needs) and
 * reaches no file (its policy is the sandbox's own narrowed to nothing), until `expiresAt`. So a
 * link never carries more than the narrowest handle that may mint it, and a tunnel it opened is
 * cut when it ends.
 */
export function portLinkCaller(record: SandboxRecord, expiresAt: number | undefined): Caller {
  const policy = narrowPolicy((record.policy as FilePolicy | undefined) ?? DEFAULT_POLICY, { readonly: true });
  return { kind: 'derived', sandboxId: record.id, grant: { policy, allowExec: true }, expiresAt };
}
