import { AUDIT_RING_SIZE, MAX_PAGE_BYTES, type AuditEntry } from '@warren/protocol';

/** The fields a finished call reports; `seq` and the ring position are the log's. */
export type AuditRecord = Omit<AuditEntry, 'seq'>;

/**
 * The agent's audit log: every call it served, in a bounded in-memory ring (the oldest entries go
 * first), read back with `audit.list`. It lives as long as the daemon; the controller reads it
 * through `GET /v1/sandboxes/:id/audit`.
 *
 * @example
 * const audit = new AuditLog(100);
 * audit.add({ time: new Date().toISOString(), method: 'fs.read', paths: ['a.py'], outcome: 'ok', bytesIn: 0, bytesOut: 3, durationMs: 1 });
 * audit.list({ limit: 10 }).entries.length; // 1
 */
export class AuditLog {
  private readonly ring: AuditEntry[] = [];
  private next = 0;

  constructor(private readonly capacity: number = AUDIT_RING_SIZE) {}

  add(record: AuditRecord): void {
    const entry: AuditEntry = { seq: this.next++, ...record };
    if (this.ring.length < this.capacity) this.ring.push(entry);
    else this.ring[entry.seq % this.capacity] = entry;
  }

  /**
   * Entries with `seq > since` (all when absent), oldest first: at most `limit`, and no more than
   * `MAX_PAGE_BYTES` of JSON, so a page always fits in a frame. `nextCursor` is set when more follow.
   */
  list(options: { since?: number | undefined; limit: number }): { entries: AuditEntry[]; dropped: boolean; lastSeq: number; nextCursor?: number } {
    const oldest = Math.max(0, this.next - this.ring.length);
    const from = Math.max(oldest, options.since === undefined ? 0 : options.since + 1);
    const entries: AuditEntry[] = [];
    let bytes = 0;
    let seq = from;
    for (; seq < this.next && entries.length < options.limit; seq++) {
      const entry = this.ring.length < this.capacity ? this.ring[seq]! : this.ring[seq % this.capacity]!;
      // Entries are at most a few KiB (paths and commands are cut), so this rarely ends a page.
      bytes += Buffer.byteLength(JSON.stringify(entry)) + 1;
      if (bytes > MAX_PAGE_BYTES && entries.length > 0) break;
      entries.push(entry);
    }
    const wanted = options.since === undefined ? 0 : options.since + 1;
    const page = { entries, dropped: wanted < oldest, lastSeq: this.next - 1 };
    return seq < this.next ? { ...page, nextCursor: seq - 1 } : page;
  }
}
