import { createReadStream } from 'node:fs';
import { appendFile, chmod, mkdir, open, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { AuditEntry, MAX_PAGE_BYTES, type AuditExportLine } from '@warren/protocol';
import { systemClock, type Clock } from '../clock.js';

/** How long the controller keeps each sandbox's trail, and how large it may grow (`audit` in the configuration). */
export interface AuditSettings {
  /** Entries older than this many days are deleted (also after the sandbox is gone). */
  retentionDays: number;
  /** The most bytes of trail kept per sandbox; past it the oldest half is dropped. */
  maxBytesPerSandbox: number;
}

export const DEFAULT_AUDIT: AuditSettings = { retentionDays: 30, maxBytesPerSandbox: 64 * 1024 * 1024 };

/** What one call adds to a trail: an entry without its `seq`, which the trail gives. */
export type AuditRecord = Omit<AuditEntry, 'seq'>;

/** One page of a sandbox's trail, in the shape of `audit.list`'s result. */
export interface AuditPage {
  entries: AuditEntry[];
  /** True when entries after `since` were already deleted (retention or the size bound). */
  dropped: boolean;
  /** The newest `seq` so far (-1 when the sandbox has no entries). */
  lastSeq: number;
  /** Present when more entries follow: the next page's `since`. */
  nextCursor?: number;
}

/** What {@link AuditTrail.export} returns: entries of every sandbox, or those chosen. */
export interface AuditExportFilter {
  /** One sandbox only. */
  sandbox?: string | undefined;
  /** One tenant only (the entries' own `tenant`). */
  tenant?: string | undefined;
  /** Entries at or after this time (epoch ms). */
  since?: number | undefined;
  /** Entries before this time (epoch ms). */
  until?: number | undefined;
}

/** Options of an {@link AuditTrail}. */
export interface AuditTrailOptions extends Partial<AuditSettings> {
  /** The folder of the trail files (`<stateDir>/audit`). */
  dir: string;
  /** Entries are written at most this long after they are added (ms). */
  flushMs?: number | undefined;
  clock?: Clock | undefined;
  /** Told of a write that failed (the entries it carried are lost). */
  onError?: ((sandboxId: string, error: unknown) => void) | undefined;
}

/** The bytes of a segment's end read to find its last `seq` when a sandbox's trail is first written after a start. */
const TAIL_BYTES = 64 * 1024;
const SANDBOX_ID = /^[A-Za-z0-9]{1,128}$/;
const DAY_MS = 86_400_000;

interface SandboxTrail {
  /** Undefined until the segments were read after this start. */
  nextSeq: number | undefined;
  /** Bytes of the current segment. */
  size: number;
  pending: AuditRecord[];
  /** Each write, rotation and pruning of this sandbox's files, one after another. */
  chain: Promise<void>;
}

/**
 * The controller's durable audit trail: every call on a sandbox, one JSON line each, in the
 * controller's state folder on the host (`<dir>/<sandboxId>.jsonl`, folder 0700, files 0600).
 * Sandbox code never reaches it: nothing of it is mounted into a sandbox, and the controller
 * writes it from what it relays, never from what a daemon reports.
 *
 * Entries are buffered and appended within `flushMs` (100 ms by default), without fsync: a killed
 * controller loses at most the entries of that window, a host that loses power what its page cache
 * held. A line torn by a crash is skipped when read and closed with a newline before the next
 * append, so it never spoils the entry after it. Each sandbox's `seq` continues across restarts
 * (the last one is read back from the file's end).
 *
 * Bounds: when a sandbox's current file passes half of `maxBytesPerSandbox`, it becomes the
 * previous segment (`<id>.1.jsonl`, replacing the one before), so at most about
 * `maxBytesPerSandbox` is kept and the oldest entries go first. {@link prune} deletes entries older
 * than `retentionDays`, whether the sandbox still exists or not.
 *
 * @example
 * const trail = await AuditTrail.open({ dir: path.join(stateDir, 'audit') });
 * trail.append('sb1', { time: new Date().toISOString(), method: 'fs.read', paths: ['a'], outcome: 'ok', bytesIn: 0, bytesOut: 3, durationMs: 1 });
 * (await trail.list('sb1', { limit: 10 })).entries.length; // 1
 */
export class AuditTrail {
  readonly settings: AuditSettings;
  private readonly trails = new Map<string, SandboxTrail>();
  private readonly flushMs: number;
  private readonly clock: Clock;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private closed = false;

  private constructor(
    private readonly dir: string,
    private readonly options: AuditTrailOptions,
  ) {
    this.settings = {
      retentionDays: options.retentionDays ?? DEFAULT_AUDIT.retentionDays,
      maxBytesPerSandbox: options.maxBytesPerSandbox ?? DEFAULT_AUDIT.maxBytesPerSandbox,
    };
    this.flushMs = options.flushMs ?? 100;
    this.clock = options.clock ?? systemClock;
  }

  /** Makes the folder (0700, tightened if it was looser) and returns the trail over it. */
  static async open(options: AuditTrailOptions): Promise<AuditTrail> {
    await mkdir(options.dir, { recursive: true, mode: 0o700 });
    await chmod(options.dir, 0o700);
    return new AuditTrail(options.dir, options);
  }

  /** Adds one call to sandbox `sandboxId`'s trail; it is written within `flushMs`. A malformed id is ignored (it names no sandbox). */
  append(sandboxId: string, record: AuditRecord): void {
    if (this.closed || !SANDBOX_ID.test(sandboxId)) return;
    this.trailOf(sandboxId).pending.push(record);
    if (this.timer === undefined) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        void this.flush();
      }, this.flushMs);
      this.timer.unref();
    }
  }

  /** Writes every entry added so far (of one sandbox, or of all); resolves once they are in the files. */
  async flush(sandboxId?: string): Promise<void> {
    const ids = sandboxId === undefined ? [...this.trails.keys()] : [sandboxId];
    await Promise.all(ids.map((id) => this.enqueue(id, () => this.write(id))));
  }

  /**
   * Entries of one sandbox with `seq > since` (all when absent), oldest first: at most `limit`, and
   * no more than `MAX_PAGE_BYTES` of JSON. Entries not yet written are written first.
   */
  async list(sandboxId: string, options: { since?: number | undefined; limit: number }): Promise<AuditPage> {
    if (!SANDBOX_ID.test(sandboxId)) return { entries: [], dropped: false, lastSeq: -1 };
    await this.flush(sandboxId);
    const trail = this.trailOf(sandboxId);
    await this.enqueue(sandboxId, () => this.load(sandboxId, trail));
    const lastSeq = (trail.nextSeq ?? 0) - 1;
    const after = options.since ?? -1;
    const entries: AuditEntry[] = [];
    let oldest: number | undefined;
    let bytes = 0;
    let more = false;
    for (const file of this.segments(sandboxId)) {
      const first = await firstEntry(file);
      if (!first) continue;
      oldest ??= first.seq;
      // A segment whose last entry is at or before `since` is not read; in the others, reading starts near `since`.
      const last = (await lastLine(file)).seq;
      if (last !== undefined && last <= after) continue;
      for await (const entry of readEntries(file, await offsetAfter(file, after))) {
        if (entry.seq <= after) continue;
        const size = Buffer.byteLength(JSON.stringify(entry)) + 1;
        if (entries.length >= options.limit || (bytes + size > MAX_PAGE_BYTES && entries.length > 0)) {
          more = true;
          break;
        }
        bytes += size;
        entries.push(entry);
      }
      if (more) break;
    }
    const dropped = after + 1 < (oldest ?? lastSeq + 1);
    const page: AuditPage = { entries, dropped, lastSeq };
    return more ? { ...page, nextCursor: entries.at(-1)!.seq } : page;
  }

  /**
   * Every kept entry matching `filter`, with its sandbox's id: sandbox by sandbox (in the order of
   * their ids), each oldest first. Read from the files as it goes, so an export of any size costs
   * about one entry of memory.
   */
  async *export(filter: AuditExportFilter = {}): AsyncGenerator<AuditExportLine, void, undefined> {
    await this.flush();
    const ids = filter.sandbox === undefined ? await this.sandboxIds() : SANDBOX_ID.test(filter.sandbox) ? [filter.sandbox] : [];
    for (const sandboxId of ids) {
      for await (const entry of this.entriesOf(sandboxId)) {
        if (filter.tenant !== undefined && entry.tenant !== filter.tenant) continue;
        const time = Date.parse(entry.time);
        if (filter.since !== undefined && !(time >= filter.since)) continue;
        if (filter.until !== undefined && !(time < filter.until)) continue;
        yield { sandboxId, ...entry };
      }
    }
  }

  /**
   * Deletes what is older than `retentionDays`: a file last written before then goes whole; a file
   * that starts before then is rewritten (to a new file, then renamed) without those entries.
   * Returns how many files were deleted or rewritten.
   */
  async prune(): Promise<{ deleted: number; rewritten: number }> {
    const cutoff = this.clock.now() - this.settings.retentionDays * DAY_MS;
    let deleted = 0;
    let rewritten = 0;
    for (const sandboxId of await this.sandboxIds()) {
      await this.enqueue(sandboxId, async () => {
        for (const file of this.segments(sandboxId)) {
          const info = await stat(file).catch(() => undefined);
          if (!info) continue;
          if (info.mtimeMs < cutoff) {
            await rm(file, { force: true });
            deleted++;
          } else if (await this.keepSince(file, cutoff)) rewritten++;
        }
        // The current segment may have changed: its size is read again before the next write.
        const trail = this.trails.get(sandboxId);
        if (trail) trail.size = (await stat(this.current(sandboxId)).catch(() => undefined))?.size ?? 0;
      });
    }
    return { deleted, rewritten };
  }

  /** Writes what is pending and takes no more entries. */
  async close(): Promise<void> {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    await this.flush();
    this.closed = true;
  }

  private trailOf(sandboxId: string): SandboxTrail {
    let trail = this.trails.get(sandboxId);
    if (!trail) {
      trail = { nextSeq: undefined, size: 0, pending: [], chain: Promise.resolve() };
      this.trails.set(sandboxId, trail);
    }
    return trail;
  }

  /** Runs `job` after every earlier job on this sandbox's files; a failed job is reported and does not stop the next. */
  private enqueue(sandboxId: string, job: () => Promise<void>): Promise<void> {
    const trail = this.trailOf(sandboxId);
    const run = trail.chain.then(job).catch((error: unknown) => this.options.onError?.(sandboxId, error));
    trail.chain = run;
    return run;
  }

  private current(sandboxId: string): string {
    return path.join(this.dir, `${sandboxId}.jsonl`);
  }

  private previous(sandboxId: string): string {
    return path.join(this.dir, `${sandboxId}.1.jsonl`);
  }

  /** A sandbox's files, oldest first. */
  private segments(sandboxId: string): string[] {
    return [this.previous(sandboxId), this.current(sandboxId)];
  }

  private async sandboxIds(): Promise<string[]> {
    const names = await readdir(this.dir).catch(() => [] as string[]);
    const ids = new Set<string>();
    for (const name of names) {
      const id = /^([A-Za-z0-9]+)(?:\.1)?\.jsonl$/.exec(name)?.[1];
      if (id !== undefined) ids.add(id);
    }
    return [...ids].sort();
  }

  /** Learns, once per start, the sandbox's next `seq` and its current file's size, and closes a line a crash tore. */
  private async load(sandboxId: string, trail: SandboxTrail): Promise<void> {
    if (trail.nextSeq !== undefined) return;
    const current = await lastLine(this.current(sandboxId));
    if (current.torn) await appendFile(this.current(sandboxId), '\n', { mode: 0o600 });
    const last = current.seq ?? (await lastLine(this.previous(sandboxId))).seq;
    trail.size = current.size + (current.torn ? 1 : 0);
    trail.nextSeq = last === undefined ? 0 : last + 1;
  }

  /** Appends what is pending, turning the current file into the previous one each time it would pass half the bound. */
  private async write(sandboxId: string): Promise<void> {
    const trail = this.trailOf(sandboxId);
    if (trail.pending.length === 0) return;
    await this.load(sandboxId, trail);
    const half = this.settings.maxBytesPerSandbox / 2;
    let chunk: string[] = [];
    let chunkBytes = 0;
    const append = async () => {
      if (chunk.length === 0) return;
      await appendFile(this.current(sandboxId), chunk.join(''), { mode: 0o600 });
      trail.size += chunkBytes;
      chunk = [];
      chunkBytes = 0;
    };
    for (const record of trail.pending.splice(0)) {
      const line = `${JSON.stringify({ seq: trail.nextSeq!, ...record })}\n`;
      trail.nextSeq! += 1;
      const bytes = Buffer.byteLength(line);
      if (trail.size + chunkBytes + bytes > half && trail.size + chunkBytes > 0) {
        await append();
        await rename(this.current(sandboxId), this.previous(sandboxId));
        trail.size = 0;
      }
      chunk.push(line);
      chunkBytes += bytes;
    }
    await append();
  }

  /** Rewrites `file` without its entries older than `cutoff`; false when none were (its first entry is not). */
  private async keepSince(file: string, cutoff: number): Promise<boolean> {
    const first = await firstEntry(file);
    if (!first || Date.parse(first.time) >= cutoff) return false;
    const kept: string[] = [];
    let dropped = false;
    for await (const entry of readEntries(file)) {
      if (Date.parse(entry.time) < cutoff) dropped = true;
      else kept.push(`${JSON.stringify(entry)}\n`);
    }
    if (!dropped) return false;
    const temp = `${file}.${process.pid}.tmp`;
    await writeFile(temp, kept.join(''), { mode: 0o600 });
    await rename(temp, file);
    return true;
  }

  private async *entriesOf(sandboxId: string): AsyncGenerator<AuditEntry, void, undefined> {
    for (const file of this.segments(sandboxId)) yield* readEntries(file);
  }
}

/**
 * The entries of one file from byte `start` (a line's start), skipping any line that is not a
 * whole entry (a torn write, foreign bytes); none for a missing file.
 */
async function* readEntries(file: string, start = 0): AsyncGenerator<AuditEntry, void, undefined> {
  const stream = createReadStream(file, { encoding: 'utf8', start });
  const missing = new Promise<boolean>((resolve) => {
    stream.once('open', () => resolve(false));
    stream.once('error', () => resolve(true));
  });
  if (await missing) return;
  const lines = createInterface({ input: stream, crlfDelay: Infinity });
  try {
    for await (const line of lines) {
      const entry = parseLine(line);
      if (entry) yield entry;
    }
  } finally {
    lines.close();
    stream.destroy();
  }
}

function parseLine(line: string): AuditEntry | undefined {
  if (line.length === 0) return undefined;
  try {
    const parsed = AuditEntry.safeParse(JSON.parse(line));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** The first whole entry of a file (within its first {@link TAIL_BYTES}), or undefined. */
async function firstEntry(file: string): Promise<AuditEntry | undefined> {
  const handle = await open(file, 'r').catch(() => undefined);
  if (!handle) return undefined;
  try {
    const buffer = Buffer.alloc(TAIL_BYTES);
    const { bytesRead } = await handle.read(buffer, 0, TAIL_BYTES, 0);
    for (const line of buffer.subarray(0, bytesRead).toString('utf8').split('\n').slice(0, -1)) {
      const entry = parseLine(line);
      if (entry) return entry;
    }
    return undefined;
  } finally {
    await handle.close();
  }
}

/**
 * A line start in `file` before which every entry has `seq <= after` (0 when none is known), found
 * by bisecting the file's bytes (its entries are in `seq` order): a page after a recent `since`
 * reads the end of a large file, not all of it.
 */
async function offsetAfter(file: string, after: number): Promise<number> {
  if (after < 0) return 0;
  const handle = await open(file, 'r').catch(() => undefined);
  if (!handle) return 0;
  try {
    const { size } = await handle.stat();
    const buffer = Buffer.alloc(TAIL_BYTES);
    let low = 0;
    let high = size;
    while (high - low > TAIL_BYTES) {
      const middle = Math.floor((low + high) / 2);
      const { bytesRead } = await handle.read(buffer, 0, TAIL_BYTES, middle);
      const text = buffer.subarray(0, bytesRead).toString('utf8');
      const newline = text.indexOf('\n');
      const next = text.indexOf('\n', newline + 1);
      // No whole line to probe here (a line longer than the buffer, or foreign bytes): read from `low`.
      const entry = newline < 0 || next < 0 ? undefined : parseLine(text.slice(newline + 1, next));
      if (!entry) break;
      if (entry.seq <= after) low = middle + Buffer.byteLength(text.slice(0, newline + 1));
      else high = middle;
    }
    return low;
  } finally {
    await handle.close();
  }
}

/** A file's size, whether its last line lacks its newline (torn), and the `seq` of its last whole entry. */
async function lastLine(file: string): Promise<{ size: number; torn: boolean; seq: number | undefined }> {
  const handle = await open(file, 'r').catch(() => undefined);
  if (!handle) return { size: 0, torn: false, seq: undefined };
  try {
    const { size } = await handle.stat();
    const length = Math.min(size, TAIL_BYTES);
    const buffer = Buffer.alloc(length);
    await handle.read(buffer, 0, length, size - length);
    const text = buffer.toString('utf8');
    const torn = length > 0 && !text.endsWith('\n');
    const lines = text.split('\n');
    for (let i = lines.length - (torn ? 2 : 1); i >= 0; i--) {
      const entry = parseLine(lines[i]!);
      if (entry) return { size, torn, seq: entry.seq };
    }
    return { size, torn, seq: undefined };
  } finally {
    await handle.close();
  }
}
