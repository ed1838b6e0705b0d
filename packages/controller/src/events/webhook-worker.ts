import { systemClock, type Clock } from '../clock.js';
import type { EventFilter, EventLog } from './event-log.js';
import type { SandboxEvent } from './lifecycle.js';
import type { WebhookSender } from './webhook-post.js';
import { EVENT_ID_HEADER, SIGNATURE_HEADER, signatureHeader } from './webhook-signing.js';
import type { WebhookRecord } from './webhook-store.js';
import type { TargetGuard } from './webhook-target.js';

/** How deliveries are tried (`webhooks.*` in the configuration). */
export interface DeliverySettings {
  /** Attempts per event, the first included, before it is given up. */
  maxAttempts: number;
  /** The wait after the first failed attempt; each later wait doubles, up to `retryMaxMs`. */
  retryBaseMs: number;
  retryMaxMs: number;
  /** How long one attempt may take, connection and answer. */
  timeoutMs: number;
}

/** One delivery's body and headers. */
export interface WebhookMessage {
  body: string;
  headers: Record<string, string>;
}

/**
 * How a webhook of another wire's format (E2B's) writes an event: its body and signed headers at
 * time `nowMs`, or undefined for an event that wire does not deliver to this webhook (it passes by).
 */
export type WebhookFormat = (event: SandboxEvent, record: WebhookRecord, nowMs: number) => WebhookMessage | undefined;

/** Warren's own format: the event as JSON, signed with a timestamp (`Warren-Signature`). */
export const warrenFormat: WebhookFormat = (event, record, nowMs) => {
  const body = JSON.stringify(event);
  return {
    body,
    headers: {
      [SIGNATURE_HEADER]: signatureHeader(record.secret, body, Math.floor(nowMs / 1000)),
      [EVENT_ID_HEADER]: String(event.id),
      'Warren-Webhook-Id': record.id,
    },
  };
};

/** Waits `ms`, or less when `signal` aborts. */
export type Sleep = (ms: number, signal: AbortSignal) => Promise<void>;

/**
 * The wait before attempt `attempt + 1` after attempt `attempt` failed: `base`, `2 × base`,
 * `4 × base`, ... at most `max`.
 *
 * @example
 * retryDelayMs(3, 1000, 60_000); // 4000
 */
export function retryDelayMs(attempt: number, baseMs: number, maxMs: number): number {
  return Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1));
}

const realSleep: Sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    timer.unref();
    signal.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
  });

export interface WebhookWorkerOptions {
  log: EventLog;
  guard: TargetGuard;
  settings: DeliverySettings;
  send: WebhookSender;
  /** How its events are written; default {@link warrenFormat}. */
  format?: WebhookFormat | undefined;
  /** Stores the record once its cursor or status changed. */
  save: () => Promise<void>;
  clock?: Clock | undefined;
  sleep?: Sleep | undefined;
}

/**
 * Delivers one webhook's events, one at a time and in order: each event after the record's
 * cursor that the webhook wants, POSTed signed (`Warren-Signature`, `Warren-Event-Id`), tried up to
 * `maxAttempts` times with doubling waits, then given up (counted in `status.failed`) so one dead
 * receiver cannot hold the rest back forever. The cursor moves past each event once it is
 * delivered or given up and is stored, so a restarted controller goes on where it stopped. The
 * address is checked by the guard at every attempt.
 *
 * @example
 * const worker = new WebhookWorker(record, { log, guard, settings, send: postWebhook, save: () => store.save() });
 * worker.start();
 * await worker.close();
 */
export class WebhookWorker {
  private readonly stopping = new AbortController();
  private running: Promise<void> | undefined;
  private readonly clock: Clock;
  private readonly sleep: Sleep;

  constructor(
    readonly record: WebhookRecord,
    private readonly options: WebhookWorkerOptions,
  ) {
    this.clock = options.clock ?? systemClock;
    this.sleep = options.sleep ?? realSleep;
  }

  /** The events this webhook wants after its cursor. */
  get filter(): EventFilter {
    const { tenant, events, cursor } = this.record;
    return { after: cursor, tenant: tenant === '*' ? undefined : tenant, types: events === undefined ? undefined : new Set(events) };
  }

  /** How many events wait for delivery (those the log still holds). */
  pending(): number {
    return this.options.log.read(this.filter, Number.MAX_SAFE_INTEGER).events.length;
  }

  start(): void {
    this.running ??= this.loop();
  }

  /** Stops after the attempt under way; an event not settled is tried again by the next worker. */
  async close(): Promise<void> {
    this.stopping.abort();
    await this.running;
  }

  private get stopped(): boolean {
    return this.stopping.signal.aborted;
  }

  private async loop(): Promise<void> {
    const { log, save } = this.options;
    while (!this.stopped) {
      const [event] = log.read(this.filter, 1).events;
      if (!event) {
        await log.waitFor(this.filter, 60_000, this.stopping.signal);
        continue;
      }
      // A disabled webhook lets events pass by, as E2B's does.
      if (this.record.enabled !== false && !(await this.deliver(event))) return;
      this.record.cursor = event.id;
      await save().catch(() => undefined);
    }
  }

  /** Tries one event until it is delivered or given up; false when the worker stopped first. */
  private async deliver(event: SandboxEvent): Promise<boolean> {
    const { settings, guard, send } = this.options;
    const format = this.options.format ?? warrenFormat;
    const { status } = this.record;
    for (let attempt = 1; attempt <= settings.maxAttempts; attempt++) {
      if (this.stopped) return false;
      const now = this.clock.now();
      const message = format(event, this.record, now);
      if (message === undefined) return true;
      status.lastAttemptAt = new Date(now).toISOString();
      try {
        const url = new URL(this.record.url);
        const address = await guard.resolve(url);
        await send({ url, address, body: message.body, headers: message.headers, timeoutMs: settings.timeoutMs });
        status.delivered++;
        status.consecutiveFailures = 0;
        status.lastSuccessAt = new Date(this.clock.now()).toISOString();
        return true;
      } catch (err) {
        status.consecutiveFailures++;
        status.lastFailureAt = new Date(this.clock.now()).toISOString();
        status.lastError = (err instanceof Error ? err.message : String(err)).slice(0, 500);
        await this.options.save().catch(() => undefined);
        if (attempt < settings.maxAttempts) await this.sleep(retryDelayMs(attempt, settings.retryBaseMs, settings.retryMaxMs), this.stopping.signal);
      }
    }
    if (this.stopped) return false;
    status.failed++;
    return true;
  }
}
