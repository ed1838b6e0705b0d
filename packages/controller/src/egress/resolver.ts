import { promises as dns } from 'node:dns';

/** Resolves a name to its A and AAAA addresses for the gateway; injectable, so tests bring their own DNS server. */
export interface EgressResolver {
  /** Every address the name has, IPv4 first; an empty list when it has none. Rejects on a failed lookup. */
  resolve(name: string): Promise<string[]>;
}

/**
 * Resolves with DNS queries to the given servers (or the host's configured ones), never with
 * `getaddrinfo`, which would read /etc/hosts and accept numeric forms such as `2130706433`.
 *
 * @example
 * const resolver = new DnsResolver({ servers: ['127.0.0.1:5353'], timeoutMs: 2000 });
 * await resolver.resolve('registry.test'); // ['10.77.0.2']
 */
export class DnsResolver implements EgressResolver {
  readonly #resolver: dns.Resolver;

  constructor(options: { servers?: readonly string[]; timeoutMs?: number; tries?: number } = {}) {
    this.#resolver = new dns.Resolver({ timeout: options.timeoutMs ?? 3000, tries: options.tries ?? 2 });
    if (options.servers && options.servers.length > 0) this.#resolver.setServers([...options.servers]);
  }

  async resolve(name: string): Promise<string[]> {
    const [v4, v6] = await Promise.allSettled([this.#resolver.resolve4(name), this.#resolver.resolve6(name)]);
    const found = [...(v4.status === 'fulfilled' ? v4.value : []), ...(v6.status === 'fulfilled' ? v6.value : [])];
    if (found.length > 0) return found;
    const failure = [v4, v6].find((r): r is PromiseRejectedResult => r.status === 'rejected' && !isNoData(r.reason));
    if (failure) throw failure.reason instanceof Error ? failure.reason : new Error(String(failure.reason));
    return [];
  }
}

function isNoData(err: unknown): boolean {
  const code = (err as { code?: string }).code;
  return code === 'ENODATA' || code === 'ENOTFOUND';
}
