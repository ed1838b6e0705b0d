import type { Clock } from './clock.js';
import { LABELS } from './labels.js';
import type { SandboxProvider } from './provider.js';
import type { SandboxTable } from './sandbox-table.js';
import type { RestartSupervisor } from './supervisor.js';

export interface ReaperOptions {
  provider: SandboxProvider;
  table: SandboxTable;
  supervisor: RestartSupervisor;
  clock: Clock;
  /** How long past its labelled expiry another controller's sandbox is swept. */
  orphanGraceSeconds: number;
  /** True when labels say this controller made the sandbox. */
  isMine: (labels: Record<string, string>) => boolean;
  /** Kills one of this controller's sandboxes (container, workspace, channel, state file). */
  kill: (id: string) => Promise<void>;
  /** Hibernates a sandbox whose time ran out and that asked for it (`onTimeout: 'hibernate'`) instead of killing it. */
  hibernate?: ((id: string) => Promise<unknown>) | undefined;
}

/**
 * The reaper: kills this controller's sandboxes whose time is up, sweeps sandboxes of other
 * controllers sharing the backend once their labelled expiry plus the grace has passed, and
 * refreshes every record's state from one listing (forgetting sandboxes removed from outside).
 *
 * @example
 * const reaper = new Reaper({ provider, table, supervisor, clock, orphanGraceSeconds: 3600, isMine, kill });
 * await reaper.refreshStates();
 * const killed = await reaper.reapExpired();
 */
export class Reaper {
  constructor(private readonly options: ReaperOptions) {}

  /**
   * Kills what has expired; returns the ids killed. A sandbox created with `onTimeout: 'hibernate'`
   * is hibernated instead the first time (it is not in the answer), and killed when its retention
   * has passed too.
   */
  async reapExpired(now = this.options.clock.now()): Promise<string[]> {
    const { table, provider, kill, isMine, hibernate } = this.options;
    const killed: string[] = [];
    for (const record of table.list().filter((r) => r.expiresAt.getTime() <= now)) {
      if (hibernate && record.settings.onTimeout === 'hibernate' && !record.timedOut && record.state !== 'gone' && record.state !== 'exited') {
        // A sandbox that cannot hibernate (the provider refused) is killed as any other.
        if (
          await hibernate(record.id).then(
            () => true,
            () => false,
          )
        )
          continue;
      }
      await kill(record.id).then(
        () => killed.push(record.id),
        () => undefined,
      );
    }
    const graceMs = this.options.orphanGraceSeconds * 1000;
    for (const sandbox of await provider.list()) {
      if (isMine(sandbox.labels)) continue;
      const expiresAt = Date.parse(sandbox.labels[LABELS.expiresAt] ?? '');
      if (Number.isFinite(expiresAt) && expiresAt + graceMs <= now) {
        await provider.remove(sandbox.handle, sandbox.labels[LABELS.sandbox] ?? '').catch(() => undefined);
        killed.push(sandbox.labels[LABELS.sandbox] ?? sandbox.handle);
      }
    }
    return killed;
  }

  /**
   * Refreshes every record's state from one listing. A sandbox removed behind the controller's back
   * is forgotten, with its daemon channel and state file.
   */
  async refreshStates(): Promise<void> {
    const { table, provider, supervisor, kill } = this.options;
    // Only records that existed before the listing: one added meanwhile is not in it.
    const known = table.list().map((record) => ({ record, starts: supervisor.startsOf(record.id) }));
    const states = await provider.states();
    for (const { record, starts } of known) {
      supervisor.observe(record, states.get(record.containerId), starts);
      if (record.state === 'gone') await kill(record.id).catch(() => undefined);
    }
  }
}
