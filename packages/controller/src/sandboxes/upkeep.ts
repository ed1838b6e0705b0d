import { CodedError } from '@warren/protocol';
import type { IdleFreezer } from '../idle-freezer.js';
import { LABELS } from '../labels.js';
import { Reaper } from '../reaper.js';
import { RestartSupervisor } from '../supervisor.js';
import type { UsageHistory } from '../usage-history.js';
import type { SandboxLauncher } from './launch.js';
import { recordOf, type SandboxLookup } from './lookup.js';
import type { SandboxNetwork } from './network.js';
import type { SandboxParts } from './parts.js';
import { bringBack } from './readiness.js';

/** An unclaimed warm-pool member found at recovery, for the pool to replace. */
export interface RecoveredPoolMember {
  agentId: string;
  containerId: string;
  labels: Record<string, string>;
}

/**
 * Recovery and supervision: the table rebuilt from the backend's sandboxes and the stored records
 * after a restart, the {@link RestartSupervisor} (sandboxes that died come back) and the
 * {@link Reaper} (expiry and orphans), and the kill that removes everything a sandbox had.
 *
 * @example
 * const upkeep = new SandboxUpkeep(parts, { lookup, launcher, network, freezer, usageHistory });
 * const { recovered, poolMembers } = await upkeep.recover();
 */
export class SandboxUpkeep {
  readonly supervisor: RestartSupervisor;
  readonly reaper: Reaper;

  constructor(
    private readonly parts: SandboxParts,
    private readonly peers: {
      lookup: SandboxLookup;
      launcher: SandboxLauncher;
      network: SandboxNetwork;
      freezer: IdleFreezer;
      usageHistory: UsageHistory;
      /** Told of each restart after a sandbox died: `error` null when it is back, else why an attempt failed. */
      onRestart?: ((id: string, error: string | null) => void) | undefined;
      /** Hibernates a sandbox whose time ran out, where it asked for that (`onTimeout: 'hibernate'`). */
      hibernateAtTimeout?: ((id: string) => Promise<unknown>) | undefined;
    },
  ) {
    this.supervisor = new RestartSupervisor({
      provider: parts.provider,
      table: parts.table,
      clock: parts.clock,
      bringBack: (record) => bringBack(parts, record),
      onRestart: this.peers.onRestart,
      lifecycle: parts.lifecycle,
    });
    this.reaper = new Reaper({
      provider: parts.provider,
      table: parts.table,
      supervisor: this.supervisor,
      clock: parts.clock,
      orphanGraceSeconds: parts.config.orphanGraceSeconds,
      isMine: (labels) => this.peers.lookup.isMine(labels),
      kill: (id) => this.reap(id),
      hibernate: this.peers.hibernateAtTimeout,
    });
  }

  /**
   * Rebuilds the table from this controller's sandboxes (owner label = its instance id) and the
   * stored records. Unclaimed warm-pool members are returned for the pool to replace; sandboxes of
   * other controllers are left to the reaper.
   */
  async recover(): Promise<{ recovered: number; poolMembers: RecoveredPoolMember[] }> {
    const { provider, store, table, frozenMarks } = this.parts;
    await this.peers.launcher.learnBackend();
    const stored = await store.readAll();
    const byAgent = new Map([...stored.values()].map((s) => [s.agentId, s]));
    const poolMembers: RecoveredPoolMember[] = [];
    for (const sandbox of await provider.list()) {
      const agentId = sandbox.labels[LABELS.sandbox];
      if (!agentId || !this.peers.lookup.isMine(sandbox.labels)) continue;
      const claim = byAgent.get(agentId);
      if (sandbox.labels[LABELS.pool] && !claim) {
        poolMembers.push({ agentId, containerId: sandbox.handle, labels: sandbox.labels });
        continue;
      }
      table.set(recordOf(agentId, sandbox, claim));
    }
    // A paused sandbox that the freezer had frozen (its mark says so) is running for the API again, and its next call thaws it.
    const marked = await frozenMarks.list();
    for (const record of table.list()) {
      if (!marked.delete(record.containerId)) continue;
      if (record.state === 'paused') {
        record.state = 'running';
        record.frozen = true;
      } else await frozenMarks.clear(record.containerId);
    }
    for (const handle of marked) await frozenMarks.clear(handle);
    // Stored records whose sandbox is gone belong to sandboxes killed while the controller was down.
    for (const [id, s] of stored) if (!table.has(id) && !poolMembers.some((m) => m.agentId === s.agentId)) await store.remove(id);
    await this.peers.network.restore();
    return { recovered: table.size, poolMembers };
  }

  /** Kills a sandbox: its container, workspace, daemon channel and stored record are gone afterwards. */
  kill(id: string): Promise<void> {
    return this.end(id, 'killed');
  }

  /** Removes everything a sandbox had, then reports its end as `type`. */
  private async end(id: string, type: 'killed' | 'expired' | 'failed', details?: Record<string, string>): Promise<void> {
    const { table, egress, provider, store, frozenMarks, lifecycle } = this.parts;
    const record = table.require(id);
    await this.supervisor.whileKilling(id, async () => {
      // The relay first, so its tunnel ends as closed on purpose rather than as a dropped channel.
      await egress?.remove(record.agentId);
      await provider.remove(record.containerId, record.agentId);
      await store.remove(id);
      await frozenMarks.clear(record.containerId);
      table.delete(id);
      this.supervisor.forget(id);
      this.peers.usageHistory.forget(id);
      this.peers.freezer.forget(id);
    });
    lifecycle.report(record, type, details);
  }

  /**
   * The reaper's kill: where other replicas may have moved the expiry, the shared record is read
   * first and a sandbox that is not expired after all is left (refused with CONFLICT, so the reaper
   * does not count it).
   */
  private async reap(id: string): Promise<void> {
    const { table, shared, clock, provider } = this.parts;
    const record = table.find(id);
    if (record && shared && record.state !== 'gone') {
      await this.peers.lookup.refreshShared(record);
      if (record.expiresAt.getTime() > clock.now()) throw new CodedError('CONFLICT', `Sandbox '${id}' had its expiry moved by another controller replica.`);
    }
    // A sandbox the backend lost (its node went away): calls to it say so after it is gone.
    const gone = record?.state === 'gone';
    const lost = gone ? provider.lostReason?.(record.containerId) : undefined;
    // Gone from the backend (removed from outside, its node lost) is a failure; anything else the reaper ends has expired.
    await (gone ? this.end(id, 'failed', { reason: lost ?? 'removed from the backend outside Warren' }) : this.end(id, 'expired'));
    if (lost !== undefined) table.markLost(id, lost);
  }
}
