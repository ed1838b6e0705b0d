import { lookup as dnsLookup } from 'node:dns/promises';
import net from 'node:net';
import { CodedError } from '@warren/protocol';
import { AddressFloor, hostAddresses, type FloorClass } from '../egress/address-floor.js';

/** An address a delivery connects to: the one that was checked, never a second lookup's. */
export interface CheckedAddress {
  address: string;
  family: 4 | 6;
}

/** Resolves a host name to every address it has (injected so tests never ask a DNS server). */
export type HostLookup = (hostname: string) => Promise<CheckedAddress[]>;

/** What the operator opened for webhook targets (`webhooks.*` in the configuration). */
export interface TargetRules {
  /**
   * Addresses or CIDRs (`127.0.0.1/32`, `10.20.0.0/16`, `fd12::/64`) webhooks may reach although
   * the guard refuses them otherwise: loopback, private ranges, this host's own addresses. Link-local
   * (cloud metadata), the metadata addresses, the unspecified address and multicast can never be opened.
   */
  allowedCidrs: readonly string[];
  /** Open the private ranges (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7) to webhooks. */
  allowPrivateTargets: boolean;
}

/** Never a webhook target, whatever the operator opened. */
const NEVER: ReadonlySet<FloorClass> = new Set(['unspecified', 'link-local', 'metadata', 'multicast', 'invalid']);
/** Opened by `allowPrivateTargets`. */
const PRIVATE: ReadonlySet<FloorClass> = new Set(['private', 'cgnat', 'unique-local']);
/** The metadata addresses by name, refused before any other rule. */
const METADATA = new Set(['169.254.169.254', 'fd00:ec2::254', '168.63.129.16', '100.100.100.200']);

const WHAT: Partial<Record<FloorClass, string>> = {
  unspecified: 'the unspecified address',
  loopback: 'a loopback address',
  'link-local': 'a link-local address (cloud metadata lives there)',
  metadata: 'a cloud metadata address',
  multicast: 'a multicast address',
  self: "one of this host's own addresses",
  private: 'a private-network address',
  cgnat: 'a carrier-grade NAT address',
  'unique-local': 'an IPv6 unique-local address',
};

/**
 * The SSRF guard of webhook deliveries: a webhook URL must be `http:` or `https:` without
 * credentials in it, and every address its host resolves to must be one a webhook may reach.
 * Refused always: link-local (169.254.0.0/16, fe80::/10, so 169.254.169.254), the cloud metadata
 * addresses (fd00:ec2::254 among them), the unspecified address, multicast, and the controller's
 * own listener. Refused unless the operator opens them: loopback, this host's addresses, private
 * ranges (`allowedCidrs`, `allowPrivateTargets`). The host is resolved at each delivery and the
 * delivery connects to the address checked, so a name that resolves elsewhere later (DNS
 * rebinding) is checked again.
 *
 * @example
 * const guard = new TargetGuard({ allowedCidrs: [], allowPrivateTargets: false }, () => ({ address: '127.0.0.1', port: 7420 }));
 * await guard.resolve(new URL('http://169.254.169.254/')); // throws FORBIDDEN
 */
export class TargetGuard {
  private readonly allowed = new net.BlockList();
  private readonly floor: AddressFloor;

  constructor(
    private readonly rules: TargetRules,
    /** Where the controller listens, once it does. */
    private readonly self: () => { address: string; port: number } | undefined,
    private readonly lookup: HostLookup = systemLookup,
    private readonly selfAddresses: () => string[] = hostAddresses,
  ) {
    for (const cidr of rules.allowedCidrs) {
      const parsed = parseCidr(cidr);
      if (!parsed) throw new Error(`webhooks.allowedCidrs: '${cidr}' is not an address or CIDR such as 10.20.0.0/16.`);
      this.allowed.addSubnet(parsed.address, parsed.prefix, parsed.type);
    }
    this.floor = new AddressFloor({ selfAddresses });
  }

  /**
   * Why a delivery may not connect to `address` on `port`, or undefined when it may.
   *
   * @example
   * guard.refusal('127.0.0.1', 8080); // 'a loopback address'
   */
  refusal(address: string, port: number): string | undefined {
    const bare = unmap(address.split('%')[0] as string);
    if (METADATA.has(bare)) return WHAT.metadata;
    if (this.isController(bare, port)) return "the controller's own listener";
    const cls = this.floor.classify(bare);
    if (cls === undefined) return undefined;
    if (NEVER.has(cls)) return WHAT[cls] ?? cls;
    if (PRIVATE.has(cls) && this.rules.allowPrivateTargets) return undefined;
    if (this.allowed.check(bare, net.isIPv6(bare) ? 'ipv6' : 'ipv4')) return undefined;
    return WHAT[cls] ?? `a reserved address (${cls})`;
  }

  /** The address a delivery to `url` connects to: resolved now, every answer checked; FORBIDDEN when any is refused. */
  async resolve(url: URL): Promise<CheckedAddress> {
    const host = hostOf(url);
    const port = portOf(url);
    const family = net.isIP(host);
    let addresses: CheckedAddress[];
    if (family !== 0) addresses = [{ address: host, family: family as 4 | 6 }];
    else {
      try {
        addresses = await this.lookup(host);
      } catch (err) {
        throw new CodedError('INVALID_PARAMS', `The webhook's host '${host}' does not resolve (${(err as Error).message}); give a host name that resolves.`, {
          field: 'url',
        });
      }
      if (addresses.length === 0) throw new CodedError('INVALID_PARAMS', `The webhook's host '${host}' has no address.`, { field: 'url' });
    }
    for (const { address } of addresses) {
      const why = this.refusal(address, port);
      if (why !== undefined)
        throw new CodedError(
          'FORBIDDEN',
          `Webhook URL ${url.origin} reaches ${address}, ${why}; webhooks may not target it. Use a public address${NEVER_OPENABLE.has(why) ? '' : ', or ask the operator to open it (webhooks.allowedCidrs, webhooks.allowPrivateTargets)'}.`,
          { field: 'url', address },
        );
    }
    return addresses[0] as CheckedAddress;
  }

  /** Whether `address:port` is the controller's own listener (any of this host's addresses when it listens on all). */
  private isController(address: string, port: number): boolean {
    const self = this.self();
    if (!self || self.port !== port) return false;
    const listen = unmap(self.address);
    if (listen === address) return true;
    const all = listen === '0.0.0.0' || listen === '::';
    const local = this.floor.classify(address) === 'loopback' || this.selfAddresses().some((own) => unmap(own.split('%')[0] as string) === address);
    return local && (all || this.floor.classify(listen) === 'loopback');
  }
}

const NEVER_OPENABLE = new Set([WHAT.metadata, WHAT['link-local'], WHAT.unspecified, WHAT.multicast, "the controller's own listener"]);

/**
 * A webhook URL as registered: `http:` or `https:`, no user or password, no fragment; INVALID_PARAMS
 * otherwise. The addresses are checked by {@link TargetGuard.resolve}.
 *
 * @example
 * webhookUrl('https://hooks.example.com/warren'); // URL
 */
export function webhookUrl(raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new CodedError('INVALID_PARAMS', `The webhook URL '${raw.slice(0, 200)}' is not a URL; give an absolute http:// or https:// URL.`, { field: 'url' });
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new CodedError('INVALID_PARAMS', `A webhook URL is http:// or https://, not ${url.protocol}//.`, { field: 'url' });
  if (url.username !== '' || url.password !== '')
    throw new CodedError('INVALID_PARAMS', 'A webhook URL carries no user or password; verify deliveries by their signature instead.', { field: 'url' });
  if (url.hash !== '') throw new CodedError('INVALID_PARAMS', 'A webhook URL has no #fragment.', { field: 'url' });
  return url;
}

/** The URL's host as an address or name (an IPv6 literal without its brackets). */
export function hostOf(url: URL): string {
  return url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
}

/** The URL's port, its scheme's default when it names none. */
export function portOf(url: URL): number {
  return url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : Number(url.port);
}

async function systemLookup(hostname: string): Promise<CheckedAddress[]> {
  const answers = await dnsLookup(hostname, { all: true, verbatim: true });
  return answers.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
}

/** An IPv4-mapped IPv6 address as the IPv4 address it stands for; anything else as it is. */
function unmap(address: string): string {
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  return m ? (m[1] as string) : address.toLowerCase();
}

/** Whether `value` is an address or a CIDR `webhooks.allowedCidrs` takes. */
export function isAddressOrCidr(value: string): boolean {
  return parseCidr(value) !== undefined;
}

function parseCidr(cidr: string): { address: string; prefix: number; type: 'ipv4' | 'ipv6' } | undefined {
  const [address = '', prefixText] = cidr.split('/');
  const family = net.isIP(address);
  if (family === 0) return undefined;
  const max = family === 4 ? 32 : 128;
  const prefix = prefixText === undefined ? max : Number(prefixText);
  if (!Number.isInteger(prefix) || prefix < 0 || prefix > max || (prefixText !== undefined && !/^\d+$/.test(prefixText))) return undefined;
  return { address, prefix, type: family === 4 ? 'ipv4' : 'ipv6' };
}
