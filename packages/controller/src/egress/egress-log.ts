import type { EgressEvent } from './events.js';

/** One gateway event as a sandbox's egress log keeps it, numbered. */
export type EgressLogEntry = EgressEvent & { seq: number; time: string };

/**
 * The recent gateway events of each sandbox (its egress log), a bounded ring per sandbox, for
 * `GET /v1/sandboxes/{id}/egress` and `warren logs --egress`. Events hold secret names, never values,
 * and paths without queries (the gateway makes them so).
 *
 * @example
 * const log = new EgressLog(1000);
 * log.add(event);
 * log.list(event.sandboxId, { since: -1 }); // { entries, lastSeq }
 */
export class EgressLog {
  readonly #rings = new Map<string, EgressLogEntry[]>();
  #seq = 0;

  constructor(
    readonly perSandbox = 1000,
    private readonly now: () => number = Date.now,
  ) {}

  add(event: EgressEvent): void {
    let ring = this.#rings.get(event.sandboxId);
    if (!ring) this.#rings.set(event.sandboxId, (ring = []));
    ring.push({ ...event, seq: this.#seq++, time: new Date(this.now()).toISOString() });
    if (ring.length > this.perSandbox) ring.splice(0, ring.length - this.perSandbox);
  }

  /** Entries of one sandbox with `seq` above `since`, oldest first, at most `limit`. */
  list(sandboxId: string, options: { since?: number; limit?: number } = {}): { entries: EgressLogEntry[]; lastSeq: number } {
    const ring = this.#rings.get(sandboxId) ?? [];
    const since = options.since ?? -1;
    const entries = ring.filter((e) => e.seq > since).slice(0, options.limit ?? this.perSandbox);
    return { entries, lastSeq: ring.at(-1)?.seq ?? -1 };
  }

  forget(sandboxId: string): void {
    this.#rings.delete(sandboxId);
  }
}
