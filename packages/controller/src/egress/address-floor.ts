import net from 'node:net';
import os from 'node:os';

/** Why an address is refused; a closed list, so it can label a metric. */
export type FloorClass =
  | 'unspecified'
  | 'loopback'
  | 'link-local'
  | 'metadata'
  | 'multicast'
  | 'reserved'
  | 'ipv6-transition'
  | 'self'
  | 'private'
  | 'cgnat'
  | 'unique-local'
  | 'invalid';

type Block = [FloorClass, string, number, 'ipv4' | 'ipv6'];

/** Never reachable, whatever a policy or the operator's lab ranges say. */
const ALWAYS: Block[] = [
  // Cloud metadata and host services outside link-local, refused even where a lab range covers them.
  ['metadata', '168.63.129.16', 32, 'ipv4'], // Azure WireServer (a public address)
  ['metadata', '100.100.100.200', 32, 'ipv4'], // Alibaba Cloud metadata (inside CGNAT space)
  ['metadata', 'fd00:ec2::254', 128, 'ipv6'], // AWS instance metadata over IPv6 (unique-local)
  ['unspecified', '0.0.0.0', 8, 'ipv4'],
  ['loopback', '127.0.0.0', 8, 'ipv4'],
  ['link-local', '169.254.0.0', 16, 'ipv4'], // cloud metadata 169.254.169.254 lives here
  ['reserved', '192.0.0.0', 24, 'ipv4'],
  ['multicast', '224.0.0.0', 4, 'ipv4'],
  ['reserved', '240.0.0.0', 4, 'ipv4'], // incl. 255.255.255.255
  ['loopback', '::1', 128, 'ipv6'],
  ['unspecified', '::', 96, 'ipv6'], // ::, ::1 and the deprecated IPv4-compatible ::a.b.c.d
  ['link-local', 'fe80::', 10, 'ipv6'],
  ['reserved', 'fec0::', 10, 'ipv6'],
  ['multicast', 'ff00::', 8, 'ipv6'],
  ['ipv6-transition', '64:ff9b::', 96, 'ipv6'], // NAT64 embeds any IPv4 address
  ['ipv6-transition', '64:ff9b:1::', 48, 'ipv6'],
  ['ipv6-transition', '2002::', 16, 'ipv6'], // 6to4
  ['ipv6-transition', '2001::', 32, 'ipv6'], // Teredo
  ['reserved', '100::', 64, 'ipv6'],
  ['reserved', '2001:db8::', 32, 'ipv6'],
];

/** Private ranges: refused unless the operator opens one with `egress.labCidrs`. */
const PRIVATE: Block[] = [
  ['private', '10.0.0.0', 8, 'ipv4'],
  ['private', '172.16.0.0', 12, 'ipv4'],
  ['private', '192.168.0.0', 16, 'ipv4'],
  ['cgnat', '100.64.0.0', 10, 'ipv4'],
  ['reserved', '198.18.0.0', 15, 'ipv4'],
  ['reserved', '192.0.2.0', 24, 'ipv4'],
  ['reserved', '198.51.100.0', 24, 'ipv4'],
  ['reserved', '203.0.113.0', 24, 'ipv4'],
  ['unique-local', 'fc00::', 7, 'ipv6'],
];

function blockList(blocks: Block[]): [FloorClass, net.BlockList][] {
  return blocks.map(([cls, address, prefix, type]) => {
    const list = new net.BlockList();
    list.addSubnet(address, prefix, type);
    return [cls, list];
  });
}
const ALWAYS_LISTS = blockList(ALWAYS);
const PRIVATE_LISTS = blockList(PRIVATE);

/** An IPv4 CIDR the operator opened for lab or LAN services, e.g. `10.77.0.0/24`. */
export interface LabCidr {
  address: string;
  prefix: number;
}

/**
 * Parses and checks `egress.labCidrs`: each must be an IPv4 CIDR lying wholly inside a private
 * range (10/8, 172.16/12, 192.168/16, 100.64/10, 198.18/15). Loopback, link-local, unspecified
 * and multicast can never be opened, so a CIDR touching them is refused with the reason.
 *
 * @example
 * parseLabCidrs(['10.77.0.0/24']); // [{ address: '10.77.0.0', prefix: 24 }]
 */
export function parseLabCidrs(cidrs: readonly string[]): LabCidr[] {
  return cidrs.map((cidr) => {
    const m = /^(\d{1,3}(?:\.\d{1,3}){3})\/(\d{1,2})$/.exec(cidr);
    if (!m || !net.isIPv4(m[1] as string) || Number(m[2]) > 32) throw new Error(`egress.labCidrs: '${cidr}' is not an IPv4 CIDR such as 10.77.0.0/24.`);
    const address = m[1] as string;
    const prefix = Number(m[2]);
    const first = ipv4ToInt(address) & (prefix === 0 ? 0 : (~0 << (32 - prefix)) >>> 0);
    const last = (first | (prefix === 32 ? 0 : (1 << (32 - prefix)) - 1)) >>> 0;
    const inPrivate = PRIVATE_LISTS.some(([, list]) => list.check(intToIpv4(first >>> 0), 'ipv4') && list.check(intToIpv4(last), 'ipv4'));
    if (!inPrivate) {
      throw new Error(
        `egress.labCidrs: '${cidr}' is not wholly inside a private range (10/8, 172.16/12, 192.168/16, 100.64/10, 198.18/15); loopback, link-local, unspecified and multicast can never be opened.`,
      );
    }
    return { address: intToIpv4(first >>> 0), prefix };
  });
}

function ipv4ToInt(ip: string): number {
  return ip.split('.').reduce((acc, part) => ((acc << 8) | Number(part)) >>> 0, 0);
}
function intToIpv4(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

/** The IPv4 address an IPv4-mapped IPv6 address (`::ffff:127.0.0.1`, `::ffff:7f00:1`) stands for. */
function unmapIpv4(ip: string): string | undefined {
  const m = /^::ffff:(?:(\d+\.\d+\.\d+\.\d+)|([0-9a-f]{1,4}):([0-9a-f]{1,4}))$/i.exec(new URL(`http://[${ip}]/`).hostname.slice(1, -1));
  if (!m) return undefined;
  if (m[1]) return m[1];
  const hi = parseInt(m[2] as string, 16);
  const lo = parseInt(m[3] as string, 16);
  return intToIpv4(((hi << 16) | lo) >>> 0);
}

/**
 * The addresses no sandbox may reach: loopback, unspecified, link-local (cloud metadata at
 * 169.254.169.254), the cloud metadata addresses outside it (Azure, Alibaba, AWS over IPv6), multicast, reserved, IPv6 transition forms that embed an IPv4 address, IPv4-mapped forms of all
 * of these, every address of the host's own interfaces, and private ranges except the operator's
 * lab CIDRs.
 *
 * @example
 * const floor = new AddressFloor();
 * floor.classify('169.254.169.254'); // 'link-local'
 * floor.classify('93.184.216.34');   // undefined: reachable
 */
export class AddressFloor {
  readonly #lab = new net.BlockList();
  readonly #selfAddresses: () => string[];

  constructor(options: { labCidrs?: readonly LabCidr[]; selfAddresses?: () => string[] } = {}) {
    for (const { address, prefix } of options.labCidrs ?? []) this.#lab.addSubnet(address, prefix, 'ipv4');
    this.#selfAddresses = options.selfAddresses ?? hostAddresses;
  }

  /** Why `ip` is refused, or undefined when a sandbox may reach it. */
  classify(ip: string): FloorClass | undefined {
    let address = ip;
    let family = net.isIP(ip);
    if (family === 0) return 'invalid';
    if (family === 6) {
      const mapped = unmapIpv4(ip);
      if (mapped !== undefined) {
        address = mapped;
        family = 4;
      }
    }
    const type = family === 4 ? 'ipv4' : 'ipv6';
    for (const [cls, list] of ALWAYS_LISTS) if (list.check(address, type)) return cls;
    const self = new net.BlockList();
    for (const own of this.#selfAddresses()) {
      const bare = own.split('%')[0] as string;
      self.addAddress(bare, net.isIPv6(bare) ? 'ipv6' : 'ipv4');
    }
    if (self.check(address, type)) return 'self';
    for (const [cls, list] of PRIVATE_LISTS) if (list.check(address, type)) return type === 'ipv4' && this.#lab.check(address, 'ipv4') ? undefined : cls;
    return undefined;
  }
}

/** Every address on this host's interfaces, read fresh each time (bridges come and go). */
export function hostAddresses(): string[] {
  return Object.values(os.networkInterfaces())
    .flat()
    .map((i) => i?.address)
    .filter((a): a is string => typeof a === 'string');
}
