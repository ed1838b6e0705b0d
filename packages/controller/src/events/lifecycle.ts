import { z } from 'zod';

/**
 * What can happen to a sandbox, as events name it: made, answering, paused on request or frozen
 * for being idle, running again, stopped to hibernate and started again, captured or forked, and
 * its end (killed, expired, the kernel's OOM killer, or a death the supervisor could not undo).
 */
export const LIFECYCLE_TYPES = [
  'created',
  'ready',
  'paused',
  'frozen',
  'resumed',
  'hibernated',
  'woken',
  'snapshotted',
  'forked',
  'killed',
  'expired',
  'oom-killed',
  'failed',
] as const;

export type LifecycleType = (typeof LIFECYCLE_TYPES)[number];

/** One lifecycle event's type, on the wire. */
export const LifecycleTypeSchema = z.enum(LIFECYCLE_TYPES);

/**
 * One event of the log, as `GET /v1/events` and webhooks carry it: its cursor (`id`, increasing by
 * one per event of the whole controller), when, what, whose and which sandbox; `details` hold
 * small facts (a snapshot's id, a fork's children, why a sandbox failed), never secrets or file
 * contents.
 */
export const SandboxEvent = z.object({
  id: z.number().int().positive(),
  time: z.string(),
  type: LifecycleTypeSchema,
  tenant: z.string(),
  sandboxId: z.string(),
  details: z.record(z.string(), z.union([z.string(), z.number(), z.boolean(), z.array(z.string())])).optional(),
});
export type SandboxEvent = z.infer<typeof SandboxEvent>;

/** What a place in the sandbox service reports; the log gives it its id and time. */
export type LifecycleReport = Omit<SandboxEvent, 'id' | 'time'>;

/**
 * The one hook the sandbox service's modules report lifecycle changes through: each place that
 * changes a sandbox's life calls {@link LifecycleHook.emit}; the controller subscribes its event
 * log. A listener that throws is ignored (a report never fails the change it reports).
 *
 * @example
 * const hook = new LifecycleHook();
 * hook.subscribe((report) => log.append(report));
 * hook.report(record, 'paused');
 */
export class LifecycleHook {
  private readonly listeners = new Set<(report: LifecycleReport) => void>();

  /** Tells every listener; never throws. */
  emit(report: LifecycleReport): void {
    for (const listener of this.listeners) {
      try {
        listener(report);
      } catch {
        // A listener's failure is its own (the event log logs its write errors); the change stands.
      }
    }
  }

  /** Reports `type` of a sandbox's record (its id and tenant), with small facts in `details`. */
  report(record: { id: string; tenant: string }, type: LifecycleType, details?: LifecycleReport['details']): void {
    this.emit({ type, tenant: record.tenant, sandboxId: record.id, ...(details === undefined ? {} : { details }) });
  }

  /** Adds a listener; returns what removes it. */
  subscribe(listener: (report: LifecycleReport) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}
