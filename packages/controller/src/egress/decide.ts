import { CodedError, EGRESS_MODES, type EgressMode, type EgressPolicy } from '@warren/protocol';
import { canonicalHost, hostMatches, normalisePath } from './host-name.js';

/** The operator's side of egress, from the controller configuration (`egress`). */
export interface EgressOperatorConfig {
  /** The policy a create that names none gets. */
  defaultPolicy: EgressPolicy;
  /** The most open mode a create (or a live update) may ask for. */
  maxMode: EgressMode;
  /** Host patterns no policy can open (`*.` wildcards allowed); checked before any rule. */
  deny: string[];
  /** Private IPv4 CIDRs sandboxes may reach (lab and LAN services); never loopback or link-local. */
  labCidrs: string[];
  /** DNS servers the gateway resolves with (`ip` or `ip:port`); empty uses the host's configured servers. */
  resolvers: string[];
  /** Open connections one sandbox may hold through the gateway; more are refused (429). */
  maxConnectionsPerSandbox: number;
  /**
   * With several controller replicas (Kubernetes): how often each replica looks for egress
   * sandboxes whose relay no replica serves (the one that served it died) and takes them over, and
   * for policies other replicas stored; also the most a live update made on another replica waits.
   */
  followIntervalMs?: number | undefined;
  /** Operator-side secrets a create may name by `ref`; never shown by `--print-config`. */
  secrets: Record<string, string>;
}

/** Why a request was refused; a closed list, so it can label a metric. */
export type EgressDenyReason =
  | 'invalid-host'
  | 'ip-literal'
  | 'operator-deny'
  | 'policy-none'
  | 'no-matching-rule'
  | 'ambiguous-path'
  | 'address-floor'
  | 'resolve-failed'
  | 'host-mismatch'
  | 'too-many-connections'
  | 'not-tls';

/** What {@link decideEgress} is asked about. */
export interface EgressQuery {
  /** The host as the client wrote it (canonicalised here). */
  host: string;
  port: number;
  /** Present when the gateway sees the request (plain HTTP); absent for a tunnel. */
  method?: string | undefined;
  /** The request target's path (query included or not); only with `method`. */
  path?: string | undefined;
  /**
   * A tunnel the gateway can decrypt: a rule with methods or a path prefix admits it for now
   * (`inspect: true` in the answer), and each request inside is decided again.
   */
  inspectable?: boolean | undefined;
}

/** The verdict, with the rule that decided it (`rules[0]:*.example.com`, `deny[1]:evil.com`, `policy:none`, ...). */
export type EgressDecision =
  { allowed: true; host: string; rule: string; inspect?: true } | { allowed: false; host: string; rule: string; reason: EgressDenyReason; message: string };

function deny(host: string, rule: string, reason: EgressDenyReason, message: string): EgressDecision {
  return { allowed: false, host, rule, reason, message };
}

/**
 * Decides one request against a sandbox's policy and the operator's configuration, purely (no
 * DNS, no clock): the host is canonicalised, IP literals are refused (rules name hosts), the
 * operator's deny list wins over everything, then `none` refuses, `open` allows, and `allow`
 * takes the first rule whose host, port, method and path prefix all match. A rule with a method
 * or path prefix never matches a tunnel, whose requests the gateway cannot see. Resolved
 * addresses are checked separately, by the {@link AddressFloor}.
 *
 * @example
 * decideEgress({ mode: 'allow', rules: [{ host: '*.example.com' }] }, operator, { host: 'a.example.com', port: 443 });
 * // { allowed: true, host: 'a.example.com', rule: 'rules[0]:*.example.com' }
 */
export function decideEgress(policy: EgressPolicy, operator: Pick<EgressOperatorConfig, 'deny'>, query: EgressQuery): EgressDecision {
  const canonical = canonicalHost(query.host);
  const shown = query.host.slice(0, 260);
  if (canonical.kind === 'invalid') return deny(shown, 'invalid-host', 'invalid-host', `'${shown}' is not a valid host: ${canonical.reason}.`);
  if (canonical.kind === 'ip') {
    return deny(canonical.ip, 'ip-literal', 'ip-literal', `${canonical.ip} is an IP address; egress goes to host names only, resolved by the gateway.`);
  }
  const host = canonical.name;
  if (!Number.isInteger(query.port) || query.port < 1 || query.port > 65535)
    return deny(host, 'invalid-port', 'invalid-host', `Port ${query.port} is not 1-65535.`);
  const denied = operator.deny.findIndex((pattern) => hostMatches(pattern, host));
  if (denied >= 0) return deny(host, `deny[${denied}]:${operator.deny[denied]}`, 'operator-deny', `${host} is on the operator's deny list.`);
  if (policy.mode === 'none')
    return deny(host, 'policy:none', 'policy-none', `This sandbox has no network egress (policy none); ask for an allow rule for ${host}.`);
  if (policy.mode === 'open') return { allowed: true, host, rule: 'policy:open' };
  let path: string | undefined;
  let pathError: string | undefined;
  if (query.path !== undefined) {
    const normal = normalisePath(query.path);
    if ('error' in normal) pathError = normal.error;
    else path = normal.path;
  }
  let hostMatched = false;
  for (const [index, rule] of policy.rules.entries()) {
    if (!hostMatches(rule.host, host)) continue;
    hostMatched = true;
    if (!(rule.ports ?? [443]).includes(query.port)) continue;
    const needsRequest = rule.methods !== undefined || rule.pathPrefix !== undefined;
    if (needsRequest && query.method === undefined) {
      if (query.inspectable) return { allowed: true, host, rule: `rules[${index}]:${rule.host}`, inspect: true };
      continue;
    }
    if (rule.methods !== undefined && !rule.methods.includes(query.method?.toUpperCase() as never)) continue;
    if (rule.pathPrefix !== undefined) {
      if (pathError !== undefined) return deny(host, `rules[${index}]:${rule.host}`, 'ambiguous-path', `The request path is refused: ${pathError}.`);
      if (path === undefined || !path.startsWith(rule.pathPrefix)) continue;
    }
    return { allowed: true, host, rule: `rules[${index}]:${rule.host}` };
  }
  const allowedHosts = policy.rules.map((r) => `${r.host}:${(r.ports ?? [443]).join('|')}`).join(', ');
  return deny(
    host,
    'no-matching-rule',
    'no-matching-rule',
    hostMatched
      ? `No rule allows ${query.method ?? 'a tunnel'} to ${host}:${query.port}${path ? path : ''}; the rules for this host name other ports, methods or paths.`
      : `No rule allows ${host}:${query.port}; this sandbox may reach ${allowedHosts}.`,
  );
}

/**
 * The policy a create or live update gets: the operator's default when none is asked for, and a
 * FORBIDDEN error naming the most the operator permits when the request is more open than that.
 *
 * @example
 * effectiveEgressPolicy(undefined, operator); // operator.defaultPolicy
 */
export function effectiveEgressPolicy(requested: EgressPolicy | undefined, operator: Pick<EgressOperatorConfig, 'defaultPolicy' | 'maxMode'>): EgressPolicy {
  const policy = requested ?? operator.defaultPolicy;
  if (EGRESS_MODES.indexOf(policy.mode) > EGRESS_MODES.indexOf(operator.maxMode)) {
    throw new CodedError('FORBIDDEN', `Egress mode '${policy.mode}' is not permitted here; this controller allows at most '${operator.maxMode}'.`, {
      mode: policy.mode,
      maxMode: operator.maxMode,
    });
  }
  return policy;
}

/**
 * Whether any port of a name is allowed: the question the DNS responder asks, since a DNS query
 * carries no port. Operator denials, `none` and IP literals refuse as in {@link decideEgress}.
 *
 * @example
 * decideEgressName(policy, operator, 'registry.npmjs.org').allowed;
 */
export function decideEgressName(policy: EgressPolicy, operator: Pick<EgressOperatorConfig, 'deny'>, name: string): EgressDecision {
  if (policy.mode !== 'allow') return decideEgress(policy, operator, { host: name, port: 443 });
  const verdict = decideEgress({ mode: 'open' }, operator, { host: name, port: 443 });
  if (!verdict.allowed) return verdict;
  const index = policy.rules.findIndex((rule) => hostMatches(rule.host, verdict.host));
  if (index < 0) return deny(verdict.host, 'no-matching-rule', 'no-matching-rule', `No rule names ${verdict.host}.`);
  return { allowed: true, host: verdict.host, rule: `rules[${index}]:${policy.rules[index]!.host}` };
}
