import net from 'node:net';

/** A host as the gateway understands it after canonicalisation. */
export type CanonicalHost = { kind: 'name'; name: string } | { kind: 'ip'; ip: string; family: 4 | 6 } | { kind: 'invalid'; reason: string };

const DNS_NAME = /^([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/**
 * Canonicalises a host as a client wrote it (CONNECT target without port, absolute-form URL host,
 * `Host` header without port, TLS SNI) with the WHATWG URL parser, so every spelling of one host
 * compares equal: lower case, Unicode names to punycode, one trailing dot stripped, and the
 * numeric IPv4 forms (`2130706433`, `0x7f.1`, `127.1`) recognised as the IP literals they are.
 * Userinfo, ports, paths, percent-escapes and whitespace make the host invalid.
 *
 * @example
 * canonicalHost('Bücher.Example.');  // { kind: 'name', name: 'xn--bcher-kva.example' }
 * canonicalHost('0x7f.1');           // { kind: 'ip', ip: '127.0.0.1', family: 4 }
 */
export function canonicalHost(raw: string): CanonicalHost {
  if (raw.length === 0) return { kind: 'invalid', reason: 'empty host' };
  if (raw.length > 260) return { kind: 'invalid', reason: 'host longer than 253 characters' };
  if (/[\s@/\\?#%]/.test(raw) || [...raw].some((c) => c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f))
    return { kind: 'invalid', reason: 'userinfo, path, escapes or spaces in the host' };
  if (raw.startsWith('[') !== raw.endsWith(']')) return { kind: 'invalid', reason: 'unbalanced IPv6 brackets' };
  const bare = raw.startsWith('[') ? raw.slice(1, -1) : raw;
  if (net.isIPv6(bare)) return { kind: 'ip', ip: new URL(`http://[${bare}]/`).hostname.slice(1, -1), family: 6 };
  if (raw.includes(':')) return { kind: 'invalid', reason: 'a port or colon in the host' };
  let hostname: string;
  try {
    hostname = new URL(`http://${raw}/`).hostname;
  } catch {
    return { kind: 'invalid', reason: 'not a valid host name' };
  }
  if (net.isIPv4(hostname)) return { kind: 'ip', ip: hostname, family: 4 };
  const name = hostname.endsWith('.') ? hostname.slice(0, -1) : hostname;
  if (name.length === 0 || name.length > 253 || !DNS_NAME.test(name)) return { kind: 'invalid', reason: 'not a valid DNS name' };
  return { kind: 'name', name };
}

/**
 * Whether a canonical name matches a rule's host pattern: equal to an exact pattern, or a strict
 * subdomain of a `*.` pattern (`*.example.com` matches `a.example.com` and `a.b.example.com`, not
 * `example.com`, `evilexample.com` or `example.com.evil.net`). Both sides must be canonical.
 *
 * @example
 * hostMatches('*.example.com', 'a.example.com'); // true
 */
export function hostMatches(pattern: string, name: string): boolean {
  if (!pattern.startsWith('*.')) return pattern === name;
  const suffix = pattern.slice(1); // ".example.com"
  return name.length > suffix.length && name.endsWith(suffix);
}

/**
 * Splits an authority (`host:port`, `[v6]:port`) into host and port; the port must be 1-65535.
 *
 * @example
 * splitAuthority('example.com:443'); // { host: 'example.com', port: 443 }
 */
export function splitAuthority(authority: string, defaultPort?: number): { host: string; port: number } | undefined {
  const m = /^(\[[^\]]*\]|[^:[\]]*)(?::(\d{1,5}))?$/.exec(authority);
  if (!m) return undefined;
  const port = m[2] === undefined ? defaultPort : Number(m[2]);
  if (port === undefined || !Number.isInteger(port) || port < 1 || port > 65535) return undefined;
  return { host: m[1] as string, port };
}

/**
 * Normalises a request path for prefix rules, or says why it is ambiguous: the query is dropped,
 * and dot segments, empty segments (`//`), backslashes and percent-escaped `.`, `/` or `\` are
 * refused rather than guessed at, so `/v1/../admin` cannot pass a `/v1/` rule.
 *
 * @example
 * normalisePath('/v1/items?x=1'); // { path: '/v1/items' }
 */
export function normalisePath(target: string): { path: string } | { error: string } {
  const path = target.split('?', 1)[0] as string;
  if (!path.startsWith('/')) return { error: 'the path does not start with /' };
  if (/%(2e|2f|5c|00)/i.test(path)) return { error: 'percent-escaped dot, slash, backslash or NUL in the path' };
  if (path.includes('\\')) return { error: 'a backslash in the path' };
  const segments = path.slice(1).split('/');
  for (let i = 0; i < segments.length; i++) {
    const s = segments[i];
    if (s === '.' || s === '..') return { error: 'a dot segment in the path' };
    if (s === '' && i < segments.length - 1) return { error: 'an empty segment (//) in the path' };
  }
  return { path };
}
