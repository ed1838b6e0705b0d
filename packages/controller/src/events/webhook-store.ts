import { randomBytes } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { LifecycleTypeSchema } from './lifecycle.js';

/** The file the webhooks are kept in, in the state folder (mode 0600: it holds their secrets). */
export const WEBHOOKS_FILE = 'webhooks.json';

/** How a webhook's deliveries went, kept with it so a restart keeps the record of failures. */
export const WebhookStatus = z.object({
  /** Events delivered (a 2xx answer). */
  delivered: z.number().int().min(0),
  /** Events given up after every attempt failed. */
  failed: z.number().int().min(0),
  /** Attempts that failed since the last success. */
  consecutiveFailures: z.number().int().min(0),
  lastAttemptAt: z.string().optional(),
  lastSuccessAt: z.string().optional(),
  lastFailureAt: z.string().optional(),
  /** Why the last failed attempt failed (an HTTP status, a refused address, a timeout). */
  lastError: z.string().optional(),
});
export type WebhookStatus = z.infer<typeof WebhookStatus>;

/** One stored webhook: where its events go, which, its secret, and how far delivery got. */
export const WebhookRecord = z.object({
  id: z.string(),
  /** The tenant whose events it gets; `*` for every tenant (registered by an admin key). */
  tenant: z.string(),
  url: z.string(),
  /** Only these types; absent: every type. */
  events: z.array(LifecycleTypeSchema).optional(),
  secret: z.string(),
  createdAt: z.string(),
  /** The key that registered it. */
  createdByKeyId: z.string(),
  /** The id of the last event delivered or given up: delivery goes on after it, restarts included. */
  cursor: z.number().int().min(0),
  status: WebhookStatus,
  /** Delivered in another wire's words and signature (`e2b`: registered through E2B's `/events/webhooks`); absent: Warren's. */
  format: z.literal('e2b').optional(),
  /** The name its registrant gave (E2B's webhooks have one). */
  name: z.string().optional(),
  /** False: events pass by undelivered until it is enabled again (E2B's `enabled`); absent: enabled. */
  enabled: z.boolean().optional(),
  /** The event types in its wire's words, when that wire names them otherwise (E2B's `sandbox.lifecycle.*`). */
  wireEvents: z.array(z.string()).optional(),
});
export type WebhookRecord = z.infer<typeof WebhookRecord>;

/** A new webhook id: `wh_` and 16 random hex digits. */
export function newWebhookId(): string {
  return `wh_${randomBytes(8).toString('hex')}`;
}

/**
 * The registered webhooks, in `<stateDir>/webhooks.json` (mode 0600, written whole to a temporary
 * file and renamed over the old one, one write after another), or in memory only without a state
 * folder. The records are the store's: callers change them and call {@link WebhookStore.save}.
 *
 * @example
 * const store = await WebhookStore.load(stateDir);
 * await store.add(record);
 */
export class WebhookStore {
  private readonly records = new Map<string, WebhookRecord>();
  private writing: Promise<void> = Promise.resolve();

  private constructor(private readonly file: string | undefined) {}

  /** Reads the stored webhooks; a missing file is none. */
  static async load(stateDir: string | undefined): Promise<WebhookStore> {
    const store = new WebhookStore(stateDir === undefined ? undefined : path.join(stateDir, WEBHOOKS_FILE));
    if (store.file === undefined) return store;
    let text: string;
    try {
      text = await readFile(store.file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return store;
      throw err;
    }
    const parsed = z.object({ webhooks: z.array(WebhookRecord) }).safeParse(JSON.parse(text));
    if (!parsed.success) throw new Error(`${store.file} is not a webhooks file Warren wrote: ${parsed.error.issues[0]?.message ?? 'invalid'}.`);
    for (const record of parsed.data.webhooks) store.records.set(record.id, record);
    return store;
  }

  list(): WebhookRecord[] {
    return [...this.records.values()];
  }

  get(id: string): WebhookRecord | undefined {
    return this.records.get(id);
  }

  async add(record: WebhookRecord): Promise<void> {
    this.records.set(record.id, record);
    await this.save();
  }

  async remove(id: string): Promise<void> {
    this.records.delete(id);
    await this.save();
  }

  /** Writes every record as it is now. */
  save(): Promise<void> {
    const file = this.file;
    if (file === undefined) return Promise.resolve();
    const text = `${JSON.stringify({ webhooks: this.list() }, null, 2)}\n`;
    this.writing = this.writing
      .catch(() => undefined)
      .then(async () => {
        await mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
        const temp = `${file}.${randomBytes(4).toString('hex')}.tmp`;
        await writeFile(temp, text, { mode: 0o600 });
        await rename(temp, file);
      });
    return this.writing;
  }
}
