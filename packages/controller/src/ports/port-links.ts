import { narrowPolicy, type FilePolicy, type PortUrlResponse } from '@warren/protocol';
import type { ControllerConfig } from '../config.js';
import type { Credentials } from '../credentials.js';
import { DEFAULT_POLICY, mintedExpiry, mintedFrom, mintedStands, type Caller, type MintedFrom } from '../grants.js';
import type { SandboxRecord } from '../sandboxes.js';

/** The query parameters of a signed URL. */
export const PORT_SIGNATURE_PARAM = 'warren_sig';
export const PORT_EXPIRY_PARAM = 'warren_exp';
/** The query parameter naming the credentials a signed URL was minted from (signed with it). */
export const PORT_MINTED_PARAM = 'warren_by';
/** The cookie a browser keeps a signed URL's signature in, for the page's other requests. */
export const PORT_COOKIE = 'warren_port';
/** A signed URL's lifetime when the request names none. */
const DEFAULT_TTL_SECONDS = 3600;

/**
 * `POST /v1/sandboxes/:id/port-urls`: a signed URL for one port of one sandbox. It never outlives
 * the credential that asked for it: a derived token with a lifetime gets a URL that ends when the
 * token does, whatever `ttlSeconds` said (the answer's `expiresAt` is the real end); and the URL
 * names (signed) the key and tokens it was minted from ({@link mintedFrom}), so it stops opening
 * anything once that key is revoked or that token rotated or revoked.
 *
 * @example
 * mintPortUrl({ credentials, config }, caller, record, 3000, 600); // { path: '/v1/sandboxes/abc/ports/3000/?warren_sig=...', expiresAt }
 */
export function mintPortUrl(
  deps: { credentials: Credentials; config: Pick<ControllerConfig, 'portDomain' | 'portDomainScheme'> },
  caller: Caller,
  record: Pick<SandboxRecord, 'id' | 'creatorKeyId'>,
  port: number,
  ttlSeconds: number | undefined,
  now = Date.now(),
): PortUrlResponse {
  const id = record.id;
  const expiresAt = mintedExpiry(caller, now + (ttlSeconds ?? DEFAULT_TTL_SECONDS) * 1000)!;
  const by = encodeMintedFrom(mintedFrom(deps.credentials.keys, record, caller));
  const sig = deps.credentials.portSignature(id, port, expiresAt, by);
  const query = `?${PORT_SIGNATURE_PARAM}=${sig}&${PORT_EXPIRY_PARAM}=${expiresAt}&${PORT_MINTED_PARAM}=${by}`;
  const { portDomain, portDomainScheme } = deps.config;
  return {
    path: `/v1/sandboxes/${id}/ports/${port}/${query}`,
    ...(portDomain ? { url: `${portDomainScheme}://${port}-${id}.${portDomain}/${query}` } : {}),
    expiresAt: new Date(expiresAt).toISOString(),
  };
}

/** What a signed URL (or its cookie) carries: its signature, its expiry and the credentials it was minted from, as presented. */
export interface PresentedLink {
  sig: string | null | undefined;
  exp: string | null | undefined;
  by: string | null | undefined;
}

/** A signed URL that checks out: when it ends, and the credentials it lives no longer than. */
export interface PortLink {
  expiresAt: number;
  from: MintedFrom;
}

/**
 * The signed URL presented for this sandbox and port when its signature checks out, it has not
 * expired, and none of the credentials it was minted from has ended (a revoked or expired key, a
 * rotated sandbox token, a revoked derived token); else undefined.
 */
export function signedLink(credentials: Credentials, id: string, port: number, link: PresentedLink, now = Date.now()): PortLink | undefined {
  const expiresAt = Number(link.exp);
  const { sig, by } = link;
  if (typeof sig !== 'string' || typeof by !== 'string' || !Number.isSafeInteger(expiresAt) || expiresAt <= now) return undefined;
  if (!credentials.isPortSignature(id, port, expiresAt, by, sig)) return undefined;
  const from = decodeMintedFrom(by);
  return from !== undefined && mintedStands(credentials.keys, from) ? { expiresAt, from } : undefined;
}

/** The credentials a URL was minted from, as its query and cookie carry them: base64url JSON (no `.`, so the cookie can join parts with it). */
function encodeMintedFrom(from: MintedFrom): string {
  return Buffer.from(JSON.stringify({ k: from.keyId, a: from.ancestors })).toString('base64url');
}

function decodeMintedFrom(text: string): MintedFrom | undefined {
  try {
    const data = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as { k?: unknown; a?: unknown };
    if (!Array.isArray(data.a) || !data.a.every((id) => typeof id === 'string') || !(data.k === undefined || typeof data.k === 'string')) return undefined;
    return { keyId: data.k, ancestors: data.a };
  } catch {
    return undefined;
  }
}

/**
 * Who the holder of a port link is (a signed URL, its cookie, or nobody at all on a public port):
 * a derived caller that may open tunnels to the sandbox's ports (exec, which a port needs) and
 * reaches no file (its policy is the sandbox's own narrowed to nothing), until the link expires,
 * depending on the credentials the link was minted from. So a link never carries more than the
 * narrowest handle that may mint it, and a tunnel it opened is cut when it expires or when the
 * key or token it was minted from is revoked or rotated (the daemon session pool ends sessions by
 * the caller's `keyId` and `ancestors`).
 */
export function portLinkCaller(record: SandboxRecord, link: PortLink | undefined): Caller {
  const policy = narrowPolicy((record.policy as FilePolicy | undefined) ?? DEFAULT_POLICY, { readonly: true });
  return {
    kind: 'derived',
    sandboxId: record.id,
    grant: { policy, allowExec: true },
    expiresAt: link?.expiresAt,
    ...(link?.from.keyId === undefined ? {} : { keyId: link.from.keyId }),
    ...(link?.from.ancestors.length ? { ancestors: link.from.ancestors } : {}),
  };
}
