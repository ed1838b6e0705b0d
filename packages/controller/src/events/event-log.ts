import { appendFile, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { systemClock, type Clock } from '../clock.js';
import { SandboxEvent, type LifecycleReport, type LifecycleType } from './lifecycle.js';

/** The file the log keeps its events in, one JSON object a line, in `<stateDir>/events/`. */
export const EVENTS_FILE = 'events.jsonl';

/** Which events a reader wants: after a cursor, of one tenant (or every one), of some types. */
export interface EventFilter {
  /** Events with an id above this one; 0 (or absent) from the oldest kept. */
  after?: number | undefined;
  /** Only this tenant's events; absent: every tenant's (an admin's view). */
  tenant?: string | undefined;
  /** Only these types; absent or empty: every type. */
  types?: ReadonlySet<LifecycleType> | undefined;
}

/** One page of events and the cursor to ask with next. */
export interface EventPage {
  events: SandboxEvent[];
  /** The id of the last event returned, or the cursor asked with when none was: pass it as `after` next time. */
  next: number;
}

/** The event log's settings (`events.*` in the configuration). */
export interface EventSettings {
  /** How many events the log keeps, in memory and in `<stateDir>/events/`; a reader whose cursor is older misses the dropped ones. */
  retain: number;
}

/** The defaults of `events.*`. */
export const DEFAULT_EVENT_SETTINGS: EventSettings = { retain: 10_000 };

export interface EventLogOptions {
  /** The folder of {@link EVENTS_FILE}; absent: the log lives in memory only. */
  dir?: string | undefined;
  /** How many events are kept (in memory and in the file); older ones are dropped. */
  retain: number;
  clock?: Clock | undefined;
  /** Told of a write that failed (the event stays in memory). */
  onError?: ((err: unknown) => void) | undefined;
}

/**
 * The controller's append-only log of sandbox lifecycle events: the newest `retain` of them in
 * memory, and in a JSON-lines file so they survive a restart. Each event gets the next id, one
 * above the last (a restart goes on from the file's last), so a reader's cursor is a plain
 * number: `read({ after: cursor })`. Readers filter by tenant: a member key reads its own tenant's
 * events only (the routes decide which tenant). The file is rewritten to the kept events once it
 * holds twice as many, so it stays bounded.
 *
 * @example
 * const log = await EventLog.open({ dir: path.join(stateDir, 'events'), retain: 10_000 });
 * log.append({ type: 'created', tenant: 'acme', sandboxId: 'abc' });
 * const { events, next } = log.read({ after: 0, tenant: 'acme' }, 100);
 */
export class EventLog {
  private readonly events: SandboxEvent[] = [];
  private nextId = 1;
  private linesInFile = 0;
  private writing: Promise<void> = Promise.resolve();
  private readonly listeners = new Set<(event: SandboxEvent) => void>();
  private readonly clock: Clock;

  private constructor(private readonly options: EventLogOptions) {
    this.clock = options.clock ?? systemClock;
  }

  /** Opens the log, reading the events a previous run kept (a torn last line is skipped). */
  static async open(options: EventLogOptions): Promise<EventLog> {
    const log = new EventLog(options);
    if (options.dir !== undefined) await log.load(options.dir);
    return log;
  }

  private async load(dir: string): Promise<void> {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    let text = '';
    try {
      text = await readFile(path.join(dir, EVENTS_FILE), 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    for (const line of text.split('\n')) {
      if (line.trim() === '') continue;
      this.linesInFile++;
      let parsed;
      try {
        parsed = SandboxEvent.safeParse(JSON.parse(line));
      } catch {
        continue;
      }
      if (!parsed.success || parsed.data.id < this.nextId) continue;
      this.events.push(parsed.data);
      this.nextId = parsed.data.id + 1;
    }
    this.trim();
  }

  /** The id the last event got (0 before any). */
  get lastId(): number {
    return this.nextId - 1;
  }

  /** Records an event now: it gets the next id and the current time, and is written to the file in order. */
  append(report: LifecycleReport): SandboxEvent {
    const event: SandboxEvent = { id: this.nextId++, time: new Date(this.clock.now()).toISOString(), ...report };
    this.events.push(event);
    this.trim();
    this.persist(event);
    for (const listener of this.listeners) listener(event);
    return event;
  }

  /** Up to `limit` events after the filter's cursor that match it, oldest first. */
  read(filter: EventFilter, limit: number): EventPage {
    const after = filter.after ?? 0;
    const first = this.events[0]?.id ?? this.nextId;
    const out: SandboxEvent[] = [];
    for (let i = Math.max(0, after - first + 1); i < this.events.length && out.length < limit; i++) {
      const event = this.events[i] as SandboxEvent;
      if (matches(event, filter)) out.push(event);
    }
    return { events: out, next: out.at(-1)?.id ?? after };
  }

  /**
   * Resolves once an event the filter matches is appended, or after `timeoutMs`, or when `signal`
   * aborts (a long poll whose client went away); true when such an event came.
   */
  waitFor(filter: EventFilter, timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
    if (this.read(filter, 1).events.length > 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const done = (came: boolean) => {
        clearTimeout(timer);
        this.listeners.delete(listener);
        signal?.removeEventListener('abort', aborted);
        resolve(came);
      };
      const listener = (event: SandboxEvent) => {
        if (matches(event, filter)) done(true);
      };
      const aborted = () => done(false);
      const timer = setTimeout(() => done(false), timeoutMs);
      timer.unref();
      this.listeners.add(listener);
      signal?.addEventListener('abort', aborted, { once: true });
    });
  }

  /** Calls `listener` with each event appended from now on; returns what stops it. */
  onAppend(listener: (event: SandboxEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Resolves once every event appended so far is in the file. */
  flush(): Promise<void> {
    return this.writing;
  }

  private trim(): void {
    const excess = this.events.length - this.options.retain;
    if (excess > 0) this.events.splice(0, excess);
  }

  private persist(event: SandboxEvent): void {
    const { dir } = this.options;
    if (dir === undefined) return;
    const file = path.join(dir, EVENTS_FILE);
    this.writing = this.writing
      .then(async () => {
        if (this.linesInFile + 1 > 2 * this.options.retain) {
          // Rewritten whole to what is kept (this event included), then renamed over: never half a file.
          const kept = this.events.filter((e) => e.id <= event.id);
          const tmp = `${file}.tmp`;
          await writeFile(tmp, kept.map((e) => `${JSON.stringify(e)}\n`).join(''), { mode: 0o600 });
          await rename(tmp, file);
          this.linesInFile = kept.length;
          return;
        }
        await appendFile(file, `${JSON.stringify(event)}\n`, { mode: 0o600 });
        this.linesInFile++;
      })
      .catch((err: unknown) => this.options.onError?.(err));
  }
}

function matches(event: SandboxEvent, filter: EventFilter): boolean {
  if (filter.tenant !== undefined && event.tenant !== filter.tenant) return false;
  return filter.types === undefined || filter.types.size === 0 || filter.types.has(event.type);
}
