import type { FloorClass } from './address-floor.js';
import type { EgressDenyReason } from './decide.js';

/** How a connection reached the gateway. */
export type EgressKind = 'http' | 'https' | 'connect' | 'sni' | 'dns';

/**
 * One connection attempt (or one plain-HTTP request, or one DNS question) through the gateway,
 * reported when it ends or is refused. It carries names of secrets used, never their values, and
 * paths without their query strings.
 */
export interface EgressEvent {
  sandboxId: string;
  kind: EgressKind;
  /** The canonical host (or the host as written, when it was not valid). */
  host: string;
  port: number;
  method?: string | undefined;
  /** The request path without its query. */
  path?: string | undefined;
  decision: 'allowed' | 'denied';
  /** The rule that decided: `rules[0]:*.example.com`, `deny[1]:evil.test`, `policy:none`, `floor:private`, ... */
  rule: string;
  reason?: EgressDenyReason | undefined;
  /** The address class that refused every answer, for `address-floor` denials. */
  floor?: FloorClass | undefined;
  /** Whether the gateway decrypted this tunnel (its requests are reported as `https` events of their own). */
  intercepted?: boolean | undefined;
  /** The address the gateway dialled. */
  address?: string | undefined;
  /** Bytes from the sandbox to the upstream, and back. */
  bytesOut: number;
  bytesIn: number;
  durationMs: number;
  /** The names of secrets written into this request. */
  secrets?: string[] | undefined;
  /** The sandbox's policy version the decision was made under. */
  policyVersion: number;
}
