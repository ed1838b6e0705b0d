import { CodedError, type EgressPolicy } from '@warren/protocol';
import { effectiveEgressPolicy } from '../egress/decide.js';
import type { SandboxLookup } from './lookup.js';
import type { SandboxParts } from './parts.js';

/** A sandbox's egress policy and the version it is enforced at. */
export interface PolicyVersion {
  policy: EgressPolicy;
  version: number;
}

/**
 * Each sandbox's way out through the egress gateway: its policy read and swapped, and the relays
 * given back after a controller restart or taken over from a replica that died.
 *
 * @example
 * const network = new SandboxNetwork(parts, { lookup });
 * await network.update(id, { mode: 'allow', allow: ['pypi.org'] });
 */
export class SandboxNetwork {
  constructor(
    private readonly parts: SandboxParts,
    private readonly peers: { lookup: SandboxLookup },
  ) {}

  /** Swaps a sandbox's egress policy at once (within the operator's maximum); see `SandboxEgress.update` (egress/sandbox-egress.ts). */
  async update(id: string, policy: EgressPolicy): Promise<PolicyVersion> {
    const { table, egress, config } = this.parts;
    await this.peers.lookup.ensureKnown(id);
    const record = table.require(id);
    if (!egress || !(await egress.known(record.agentId)))
      throw new CodedError(
        'INVALID_PARAMS',
        `Sandbox '${id}' was created without egress, so it has no relay to the gateway; create a sandbox with an egress policy (even { mode: 'none' } with secrets) to update it later.`,
        { field: 'egress' },
      );
    const effective = effectiveEgressPolicy(policy, { defaultPolicy: policy, maxMode: config.egress.maxMode });
    return await egress.update(record.agentId, effective);
  }

  /** A sandbox's egress policy and version as enforced now (with replicas: as stored for the one serving its relay), or undefined without egress. */
  async current(id: string): Promise<PolicyVersion | undefined> {
    await this.peers.lookup.ensureKnown(id);
    const record = this.parts.table.require(id);
    return this.parts.egress?.currentPolicy(record.agentId);
  }

  /** A sandbox's egress policy and version, or undefined when it has none through the gateway. */
  of(id: string): PolicyVersion | undefined {
    const { table, egress } = this.parts;
    const record = table.require(id);
    return egress?.has(record.agentId) ? egress.policyOf(record.agentId) : undefined;
  }

  /**
   * One round of following the egress other replicas share (see `SandboxEgress.follow`):
   * this replica takes over the relay of egress sandboxes no replica serves, and enforces policies
   * other replicas stored. Nothing without state shared by the provider.
   */
  async followShared(): Promise<void> {
    const { sharedState, egress, provider, credentials } = this.parts;
    if (!sharedState || !egress) return;
    await egress.follow((agentId) => ({ endpoint: provider.daemon(agentId), secret: credentials.agentSecret(agentId) }));
  }

  /**
   * Gives the recovered sandboxes their egress again: the stored policy, version and brokered
   * secrets go back to the gateway before this returns, and the relay of each running sandbox is
   * opened again in the background (retried for a few seconds, so a wedged daemon cannot hold up
   * the controller's start); a paused one gets it on resume, a stopped one when the supervisor
   * starts it. Until its relay is open a sandbox has no way out (egress fails closed). Stored
   * egress of sandboxes that are gone is deleted.
   */
  async restore(): Promise<void> {
    const { egress, sharedState, provider, credentials, table } = this.parts;
    if (!egress) return;
    const records = table.list();
    await egress.forgetStoredExcept(new Set(records.map((r) => r.agentId)));
    // Shared by replicas: another one may serve these relays now; the follower takes over those none serves.
    if (sharedState) return void this.followShared();
    for (const record of records) {
      if (!(await egress.restore(record.agentId)) || record.state !== 'running') continue;
      // Logged by connectWithRetry when it gives up.
      void egress.connectWithRetry(record.agentId, provider.daemon(record.agentId), credentials.agentSecret(record.agentId)).catch(() => undefined);
    }
  }
}
