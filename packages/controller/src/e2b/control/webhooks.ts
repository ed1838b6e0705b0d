import { createHash, randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { noWebhook, type WebhookInfo, type WebhookService } from '../../events/webhooks.js';
import type { WebhookFormat } from '../../events/webhook-worker.js';
import type { Caller } from '../../grants.js';
import type { HttpServerDeps } from '../../server-context.js';
import { E2bHttpError } from '../errors.js';
import { e2bEvent, e2bEventType } from './events.js';
import { json, parse, readJson } from '../http-util.js';

/**
 * Every type E2B's webhooks may ask for. Warren sends `created`, `killed`, `paused` and `resumed`
 * (see `e2bEventType`); `updated` and `checkpointed` are accepted, so programs that ask for them
 * register unchanged, and never sent.
 */
const E2B_WEBHOOK_TYPES = [
  'sandbox.lifecycle.created',
  'sandbox.lifecycle.killed',
  'sandbox.lifecycle.updated',
  'sandbox.lifecycle.paused',
  'sandbox.lifecycle.resumed',
  'sandbox.lifecycle.checkpointed',
] as const;

const E2bWebhookType = z.enum(E2B_WEBHOOK_TYPES);

/** `POST /events/webhooks`: E2B's registration (its docs mark `enabled` required; absent is taken as true). */
const NewE2bWebhook = z.object({
  name: z.string().min(1).max(256),
  url: z.string().min(1).max(2048),
  enabled: z.boolean().optional(),
  events: z.array(E2bWebhookType).min(1).max(E2B_WEBHOOK_TYPES.length),
  signatureSecret: z.string().min(1).max(1024),
});

/** `PATCH /events/webhooks/{id}`: any of the registration's fields. */
const E2bWebhookChange = NewE2bWebhook.partial();

/**
 * E2B's webhook format: the event as E2B's events API shows it, with E2B's headers; its signature
 * is the unpadded base64 SHA-256 of the webhook's secret followed by the body, as E2B documents it.
 * Events of types E2B has no word for, or the webhook did not ask for, pass by.
 */
export const e2bWebhookFormat: WebhookFormat = (event, record) => {
  const type = e2bEventType(event);
  if (type === undefined || !(record.wireEvents ?? []).includes(type)) return undefined;
  const body = JSON.stringify(e2bEvent(event, type));
  return {
    body,
    headers: {
      'e2b-webhook-id': record.id,
      'e2b-delivery-id': randomUUID(),
      'e2b-signature-version': 'v1',
      'e2b-signature': createHash('sha256')
        .update(record.secret + body)
        .digest('base64')
        .replace(/=+$/, ''),
    },
  };
};

/** A webhook as E2B's API shows it (never its secret). */
function e2bWebhook(info: WebhookInfo): Record<string, unknown> {
  return {
    id: info.id,
    teamID: info.tenant,
    teamId: info.tenant,
    name: info.name ?? '',
    createdAt: info.createdAt,
    enabled: info.enabled !== false,
    url: info.url,
    events: info.wireEvents ?? [],
  };
}

/**
 * E2B's webhook routes (`/events/webhooks[/{id}]`: register, list, get, change, delete) over
 * Warren's webhook registry, per tenant as Warren's own `/v1/webhooks`: the same target checks,
 * retries and delivery status, in E2B's words and with E2B's signature. Only webhooks registered
 * through E2B's API are shown here; another tenant's, or one of Warren's own, answers 404.
 */
export async function serveE2bWebhooks(deps: HttpServerDeps, req: IncomingMessage, res: ServerResponse, caller: Caller, id: string | undefined): Promise<void> {
  if (!deps.events) throw new E2bHttpError(501, "This server runs without Warren's event log; start the controller with warren serve.");
  if (caller.kind !== 'operator') throw new E2bHttpError(401, 'Webhooks take the API key only.');
  const webhooks: WebhookService = deps.events.webhooks;
  const method = req.method ?? 'GET';
  const ownE2b = (webhook: WebhookInfo) => {
    if (webhook.format !== 'e2b') throw noWebhook(webhook.id);
    return webhook;
  };
  if (id === undefined && method === 'POST') {
    const body = parse(NewE2bWebhook, await readJson(req), 'webhook');
    const { webhook } = await webhooks.register(
      caller,
      { url: body.url },
      { format: 'e2b', name: body.name, enabled: body.enabled ?? true, secret: body.signatureSecret, wireEvents: body.events },
    );
    return json(res, 201, e2bWebhook(webhook));
  }
  if (id === undefined && method === 'GET')
    return json(
      res,
      200,
      webhooks
        .list(caller, caller.tenant)
        .filter((w) => w.format === 'e2b')
        .map(e2bWebhook),
    );
  if (id === undefined) throw new E2bHttpError(405, `${method} /events/webhooks is not a route; use GET or POST.`);
  if (method === 'GET') return json(res, 200, e2bWebhook(ownE2b(webhooks.get(caller, id))));
  if (method === 'PATCH') {
    const body = parse(E2bWebhookChange, await readJson(req), 'webhook change');
    ownE2b(webhooks.get(caller, id));
    const changed = await webhooks.change(caller, id, {
      url: body.url,
      name: body.name,
      enabled: body.enabled,
      secret: body.signatureSecret,
      wireEvents: body.events,
    });
    return json(res, 200, e2bWebhook(changed));
  }
  if (method === 'DELETE') {
    ownE2b(webhooks.get(caller, id));
    await webhooks.remove(caller, id);
    return json(res, 200, {});
  }
  throw new E2bHttpError(405, `${method} /events/webhooks/{id} is not a route; use GET, PATCH or DELETE.`);
}
