import { seesTenant } from '../tenancy/reach.js';
import { CodedError } from '@warren/protocol';
import { z } from 'zod';
import { systemClock, type Clock } from '../clock.js';
import { TenantName, type Principal } from '../tenancy/principals.js';
import type { EventLog } from './event-log.js';
import { LifecycleTypeSchema, LIFECYCLE_TYPES } from './lifecycle.js';
import { postWebhook, type WebhookSender } from './webhook-post.js';
import { newWebhookSecret } from './webhook-signing.js';
import { newWebhookId, WebhookStatus, type WebhookRecord, type WebhookStore } from './webhook-store.js';
import { webhookUrl, type TargetGuard } from './webhook-target.js';
import { WebhookWorker, type DeliverySettings, type Sleep, type WebhookFormat } from './webhook-worker.js';

/** A webhook's id as the path names it: `wh_` and 16 hex digits. */
export const WebhookId = z.string().regex(/^wh_[0-9a-f]{16}$/);

/** The refusal of a webhook that does not exist, or that the caller's tenant may not see: the same words for both. */
export function noWebhook(id: string): CodedError {
  return new CodedError('NOT_FOUND', `No webhook '${id.slice(0, 64)}'. List them with GET /v1/webhooks.`, { webhook: id.slice(0, 64) });
}

/** What `POST /v1/webhooks` takes. */
export const CreateWebhookRequest = z.strictObject({
  url: z.string().min(1).max(2048).describe('Where events are POSTed: http:// or https://, a public address unless the operator opened others.'),
  events: z.array(LifecycleTypeSchema).min(1).max(LIFECYCLE_TYPES.length).optional().describe('Only these event types; absent: every type.'),
  tenant: z
    .union([TenantName, z.literal('*')])
    .optional()
    .describe("Whose events: the caller's tenant by default; an admin key may name another tenant, or '*' for every tenant."),
});
export type CreateWebhookRequest = z.infer<typeof CreateWebhookRequest>;

/** A webhook as the API describes it: never its secret. */
export const WebhookInfo = z.object({
  id: z.string(),
  url: z.string(),
  tenant: z.string(),
  events: z.array(LifecycleTypeSchema).optional(),
  createdAt: z.string(),
  /** `e2b` for a webhook registered through E2B's API, delivered in E2B's words and signature. */
  format: z.literal('e2b').optional(),
  /** Its name, E2B's enabled flag and E2B's event types, for a webhook registered through E2B's API. */
  name: z.string().optional(),
  enabled: z.boolean().optional(),
  wireEvents: z.array(z.string()).optional(),
  status: WebhookStatus.extend({
    /** Events that wait for delivery. */
    pending: z.number().int().min(0),
    /** The id of the last event delivered or given up. */
    cursor: z.number().int().min(0),
  }),
});
export type WebhookInfo = z.infer<typeof WebhookInfo>;

/** What `POST /v1/webhooks` answers: the webhook and its signing secret, shown this once. */
export const CreatedWebhook = z.object({ webhook: WebhookInfo, secret: z.string() });
export type CreatedWebhook = z.infer<typeof CreatedWebhook>;

/** The webhook settings of the configuration (`webhooks.*`). */
export interface WebhookSettings extends DeliverySettings {
  /** Webhooks one tenant may register. */
  maxPerTenant: number;
  /** Addresses or CIDRs opened to webhooks (loopback, private ranges, this host); see {@link TargetGuard}. */
  allowedCidrs: string[];
  /** Open the private ranges to webhooks. */
  allowPrivateTargets: boolean;
}

/** The defaults of `webhooks.*`: 6 attempts, 1 s doubling to at most 5 minutes, 10 s per attempt, nothing private opened. */
export const DEFAULT_WEBHOOK_SETTINGS: WebhookSettings = {
  maxPerTenant: 10,
  maxAttempts: 6,
  retryBaseMs: 1000,
  retryMaxMs: 300_000,
  timeoutMs: 10_000,
  allowedCidrs: [],
  allowPrivateTargets: false,
};

export interface WebhookServiceOptions {
  store: WebhookStore;
  log: EventLog;
  guard: TargetGuard;
  settings: WebhookSettings;
  clock?: Clock | undefined;
  send?: WebhookSender | undefined;
  sleep?: Sleep | undefined;
  /** How webhooks of another wire's format are written (E2B's, from the E2B gateway). */
  formats?: Partial<Record<WebhookWire, WebhookFormat>> | undefined;
}

/** The wires other than Warren's that webhooks can be delivered in. */
export type WebhookWire = NonNullable<WebhookRecord['format']>;

/** What a webhook registered through another wire's API (E2B's) has beyond Warren's request. */
export interface WireWebhook {
  format: WebhookWire;
  name: string;
  enabled: boolean;
  /** The registrant's own signing secret (E2B's `signatureSecret`). */
  secret: string;
  wireEvents: string[];
}

/** What may change on a webhook registered through another wire's API. */
export type WireWebhookChange = Partial<Pick<WireWebhook, 'name' | 'enabled' | 'secret' | 'wireEvents'>> & { url?: string | undefined };

/**
 * Webhooks per tenant: registered with a URL the {@link TargetGuard} accepts, given a secret shown
 * once, each delivered by its own {@link WebhookWorker}. A member key registers, sees and deletes
 * its own tenant's webhooks only; another tenant's answers NOT_FOUND exactly as one that does not
 * exist. An admin key reaches every tenant's, and may register one for another tenant or for
 * every tenant (`*`).
 *
 * @example
 * const webhooks = new WebhookService({ store, log, guard, settings });
 * webhooks.start();
 * const { webhook, secret } = await webhooks.register(principal, { url: 'https://hooks.example.com/warren' });
 */
export class WebhookService {
  private readonly workers = new Map<string, WebhookWorker>();
  private readonly clock: Clock;

  constructor(private readonly options: WebhookServiceOptions) {
    this.clock = options.clock ?? systemClock;
  }

  /** Starts delivering every stored webhook's events, from where each stopped. */
  start(): void {
    for (const record of this.options.store.list()) this.startWorker(record);
  }

  /**
   * Registers a webhook for the caller's tenant (or, for an admin, the one named); it gets the
   * events from now on. `wire` registers one of another wire's API (E2B's), with its own secret.
   */
  async register(caller: Principal, request: CreateWebhookRequest, wire?: WireWebhook): Promise<CreatedWebhook> {
    if (wire !== undefined && this.options.formats?.[wire.format] === undefined)
      throw new CodedError('NOT_SUPPORTED', `This server delivers no webhooks in the ${wire.format} format.`);
    const tenant = request.tenant ?? caller.tenant;
    if (caller.role !== 'admin' && tenant !== caller.tenant)
      throw new CodedError('FORBIDDEN', `A member key registers webhooks for its own tenant '${caller.tenant}' only; leave out tenant.`, { field: 'tenant' });
    const url = webhookUrl(request.url);
    await this.options.guard.resolve(url);
    const { maxPerTenant } = this.options.settings;
    if (this.options.store.list().filter((r) => r.tenant === tenant).length >= maxPerTenant)
      throw new CodedError(
        'RESOURCE_EXHAUSTED',
        `Tenant '${tenant}' already has its ${maxPerTenant} webhooks (webhooks.maxPerTenant); delete one it no longer needs.`,
      );
    const record: WebhookRecord = {
      id: newWebhookId(),
      tenant,
      url: url.href,
      ...(request.events === undefined ? {} : { events: [...new Set(request.events)] }),
      secret: wire?.secret ?? newWebhookSecret(),
      createdAt: new Date(this.clock.now()).toISOString(),
      createdByKeyId: caller.keyId,
      cursor: this.options.log.lastId,
      status: { delivered: 0, failed: 0, consecutiveFailures: 0 },
      ...(wire === undefined ? {} : { format: wire.format, name: wire.name, enabled: wire.enabled, wireEvents: [...new Set(wire.wireEvents)] }),
    };
    await this.options.store.add(record);
    const worker = this.startWorker(record);
    return { webhook: this.describe(worker), secret: record.secret };
  }

  /** The webhooks the caller may see: a member's tenant's; an admin's every one, or one tenant's. */
  list(caller: Principal, tenant?: string): WebhookInfo[] {
    return [...this.workers.values()]
      .filter((w) => visible(caller, w.record) && (tenant === undefined || w.record.tenant === tenant))
      .map((w) => this.describe(w));
  }

  /** One webhook the caller may see, or NOT_FOUND. */
  get(caller: Principal, id: string): WebhookInfo {
    return this.describe(this.require(caller, id));
  }

  /**
   * Changes a webhook of another wire's API the caller may see (or NOT_FOUND): its URL (checked as
   * at registration), name, enabled flag, secret or event types. Deliveries go on from where they were.
   */
  async change(caller: Principal, id: string, change: WireWebhookChange): Promise<WebhookInfo> {
    const worker = this.require(caller, id);
    const record = worker.record;
    if (record.format === undefined) throw noWebhook(id);
    if (change.url !== undefined) {
      const url = webhookUrl(change.url);
      await this.options.guard.resolve(url);
      record.url = url.href;
    }
    if (change.name !== undefined) record.name = change.name;
    if (change.enabled !== undefined) record.enabled = change.enabled;
    if (change.secret !== undefined) record.secret = change.secret;
    if (change.wireEvents !== undefined) record.wireEvents = [...new Set(change.wireEvents)];
    await this.options.store.save();
    return this.describe(worker);
  }

  /** Deletes one webhook the caller may see (or NOT_FOUND); its deliveries stop. */
  async remove(caller: Principal, id: string): Promise<void> {
    const worker = this.require(caller, id);
    this.workers.delete(id);
    await worker.close();
    await this.options.store.remove(id);
  }

  /** Stops every delivery after the attempt under way. */
  async close(): Promise<void> {
    const workers = [...this.workers.values()];
    this.workers.clear();
    await Promise.all(workers.map((w) => w.close()));
    await this.options.store.save().catch(() => undefined);
  }

  private require(caller: Principal, id: string): WebhookWorker {
    const worker = this.workers.get(id);
    if (!worker || !visible(caller, worker.record)) throw noWebhook(id);
    return worker;
  }

  private startWorker(record: WebhookRecord): WebhookWorker {
    const { log, guard, settings, store } = this.options;
    const worker = new WebhookWorker(record, {
      log,
      guard,
      settings,
      send: this.options.send ?? postWebhook,
      format: record.format === undefined ? undefined : this.options.formats?.[record.format],
      save: () => store.save(),
      clock: this.clock,
      sleep: this.options.sleep,
    });
    this.workers.set(record.id, worker);
    worker.start();
    return worker;
  }

  private describe(worker: WebhookWorker): WebhookInfo {
    const { id, url, tenant, events, createdAt, cursor, status, format, name, enabled, wireEvents } = worker.record;
    return {
      id,
      url,
      tenant,
      ...(events === undefined ? {} : { events }),
      createdAt,
      ...(format === undefined ? {} : { format, name, enabled: enabled !== false, wireEvents }),
      status: { ...status, pending: worker.pending(), cursor },
    };
  }
}

/** Whether the caller may see a webhook: an admin every one, a member its own tenant's. */
function visible(caller: Principal, record: WebhookRecord): boolean {
  return seesTenant({ kind: 'operator', ...caller }, record.tenant);
}
