import { EgressHostPattern, type EgressPolicy, type EgressRule } from '@warren/protocol';
import { z } from 'zod';
import { E2bHttpError } from '../errors.js';

/** E2B's "all traffic" CIDR (`ALL_TRAFFIC` in the SDK). */
export const ALL_TRAFFIC = '0.0.0.0/0';
/** The ports an E2B domain entry opens: E2B filters domains on HTTP (Host) and HTTPS (SNI). */
const DOMAIN_PORTS = [80, 443];

/**
 * E2B's `SandboxNetworkConfig` (create) and `SandboxNetworkUpdateConfig` (`PUT .../network`): the
 * fields Warren maps onto its egress policy, and those it refuses by name (docs/e2b.md#network).
 */
export const E2bNetwork = z.looseObject({
  allowOut: z.array(z.string().max(256)).max(256).optional(),
  denyOut: z.array(z.string().max(256)).max(256).optional(),
  rules: z.record(z.string(), z.unknown()).optional(),
  egressProxy: z.unknown().optional(),
  allowPublicTraffic: z.boolean().optional(),
  maskRequestHost: z.string().optional(),
  httpsPorts: z.array(z.number()).optional(),
  allow_internet_access: z.boolean().optional(),
});
export type E2bNetwork = z.infer<typeof E2bNetwork>;

/** Whether an entry is an address or a CIDR block rather than a host name (IPv4, IPv6, with or without a prefix). */
function isAddress(entry: string): boolean {
  return /^[0-9.]+(\/\d{1,2})?$/.test(entry) || entry.includes(':');
}

/**
 * E2B's network settings as Warren's egress policy. E2B allows all traffic unless `denyOut` (or
 * `allow_internet_access: false`) denies it, and `allowOut` wins over `denyOut`; Warren's policy is
 * `none`, `allow` with host rules, or `open`. So: nothing denied is `open`; everything denied is
 * `none`, or `allow` with a rule (ports 80 and 443) per `allowOut` host name, or `open` when
 * `allowOut` lists all traffic. What Warren cannot enforce is refused with a 400 naming it, never
 * dropped: addresses and CIDR blocks in `allowOut` (Warren's rules name hosts), `denyOut` other
 * than all traffic (Warren always refuses private, loopback and metadata addresses, and the
 * operator's deny list; it has no per-sandbox deny list), transform `rules`, `egressProxy`,
 * `maskRequestHost`, `httpsPorts` and `allowPublicTraffic: true`.
 *
 * @example
 * egressFromE2b({ allowOut: ['pypi.org'], denyOut: ['0.0.0.0/0'] }); // { mode: 'allow', rules: [{ host: 'pypi.org', ports: [80, 443] }] }
 * egressFromE2b({}, false); // { mode: 'none' }
 */
export function egressFromE2b(network: E2bNetwork, allowInternetAccess?: boolean): EgressPolicy {
  const refuse = (what: string, instead: string) => new E2bHttpError(400, `${what} is not supported by Warren's E2B gateway (docs/e2b.md#network). ${instead}`);
  if (network.rules !== undefined && Object.keys(network.rules).length > 0)
    throw refuse('network.rules (request transforms)', "Use Warren's brokered secrets (POST /v1/sandboxes with secrets) to put credentials into requests.");
  if (network.egressProxy !== undefined && network.egressProxy !== null)
    throw refuse('network.egressProxy', "Warren's egress gateway dials allowed hosts itself; leave egressProxy out.");
  if (network.maskRequestHost !== undefined) throw refuse('network.maskRequestHost', 'Leave it out.');
  if (network.httpsPorts !== undefined && network.httpsPorts.length > 0)
    throw refuse('network.httpsPorts', "Warren's port proxy speaks HTTP to the sandbox; leave it out.");
  if (network.allowPublicTraffic === true)
    throw refuse(
      'network.allowPublicTraffic: true',
      "A Warren sandbox's ports need a credential; open one port to anyone with POST /v1/sandboxes/{id}/public-ports, or leave allowPublicTraffic out.",
    );
  const denyOut = network.denyOut ?? [];
  const others = denyOut.filter((entry) => entry !== ALL_TRAFFIC);
  if (others.length > 0)
    throw refuse(
      `denyOut '${others[0]!.slice(0, 64)}'`,
      `Warren denies everything but its allowed hosts, and always refuses private, loopback and metadata addresses; deny all with denyOut: ['${ALL_TRAFFIC}'] and list the hosts to allow in allowOut.`,
    );
  const allowOut = network.allowOut ?? [];
  const allowAll = allowOut.includes(ALL_TRAFFIC);
  const rules: EgressRule[] = [];
  for (const entry of allowOut) {
    if (entry === ALL_TRAFFIC) continue;
    if (isAddress(entry))
      throw refuse(
        `allowOut '${entry.slice(0, 64)}' (an address or CIDR block)`,
        'Warren egress rules name hosts, never addresses: list host names such as pypi.org or *.github.com.',
      );
    const host = EgressHostPattern.safeParse(entry);
    if (!host.success) throw new E2bHttpError(400, `allowOut '${entry.slice(0, 64)}' is not a host name: ${host.error.issues[0]?.message ?? 'invalid'}.`);
    if (!rules.some((rule) => rule.host === host.data)) rules.push({ host: host.data, ports: DOMAIN_PORTS });
  }
  const denyAll = denyOut.includes(ALL_TRAFFIC) || allowInternetAccess === false || network.allow_internet_access === false;
  if (!denyAll || allowAll) return { mode: 'open' };
  return rules.length > 0 ? { mode: 'allow', rules } : { mode: 'none' };
}

/** Warren's egress policy as E2B's network settings, for the sandbox detail (`network`, `allowInternetAccess`). */
export function e2bFromEgress(policy: EgressPolicy | undefined): { network: { allowOut?: string[]; denyOut?: string[] }; allowInternetAccess: boolean } {
  if (policy === undefined || policy.mode === 'none') return { network: { denyOut: [ALL_TRAFFIC] }, allowInternetAccess: false };
  if (policy.mode === 'open') return { network: {}, allowInternetAccess: true };
  return { network: { allowOut: [...new Set(policy.rules.map((rule) => rule.host))], denyOut: [ALL_TRAFFIC] }, allowInternetAccess: false };
}
