import { CodedError } from '@warren/protocol';
import { z } from 'zod';
import type { EventFilter } from '../events/event-log.js';
import { LIFECYCLE_TYPES, LifecycleTypeSchema, SandboxEvent, type LifecycleType } from '../events/lifecycle.js';
import { CreatedWebhook, CreateWebhookRequest, WebhookInfo } from '../events/webhooks.js';
import type { HttpServerDeps } from '../server-context.js';
import { TenantName } from '../tenancy/principals.js';
import { principalOf, tenantScope } from '../tenancy/reach.js';
import { sendJson } from './io.js';
import { defineRoute, wholeNumber, type Route } from './route.js';

/** The longest `?wait=` a long poll of `GET /v1/events` may ask for, seconds. */
export const MAX_EVENTS_WAIT_SECONDS = 60;
/** The most events one page holds. */
export const MAX_EVENTS_PAGE = 1000;

/** The event log and the webhooks, or NOT_SUPPORTED where this server runs without them. */
function eventsOf(deps: HttpServerDeps): NonNullable<HttpServerDeps['events']> {
  if (!deps.events) throw new CodedError('NOT_SUPPORTED', 'This server runs without the event log; start the controller with warren serve.');
  return deps.events;
}

/** `?types=created,killed` or `?types=created&types=killed` as a set; INVALID_PARAMS names the types there are. */
function typesOf(raw: readonly string[] | undefined): Set<LifecycleType> | undefined {
  if (raw === undefined || raw.length === 0) return undefined;
  const types = new Set<LifecycleType>();
  for (const name of raw.flatMap((r) => r.split(',')).filter((n) => n !== '')) {
    const parsed = LifecycleTypeSchema.safeParse(name);
    if (!parsed.success)
      throw new CodedError('INVALID_PARAMS', `No event type '${name.slice(0, 40)}'; the types are ${LIFECYCLE_TYPES.join(', ')}.`, { field: 'types' });
    types.add(parsed.data);
  }
  return types;
}

const EventsQuery = z.object({
  after: wholeNumber('after').optional(),
  limit: wholeNumber('limit').optional(),
  types: z.array(z.string().max(200)).max(LIFECYCLE_TYPES.length).optional(),
  tenant: TenantName.optional(),
  wait: wholeNumber('wait').optional(),
});

const EventsPage = z.object({
  events: z.array(SandboxEvent),
  next: z.number().int().min(0).describe('The cursor to pass as ?after= next time: the last event returned, or the one asked with.'),
});

const WebhooksQuery = z.object({ tenant: TenantName.optional() });

/** The lifecycle event log and the webhooks that receive it, per tenant (docs/events.md). */
export const EVENT_ROUTES: readonly Route[] = [
  defineRoute({
    method: 'GET',
    path: '/v1/events',
    operationId: 'listEvents',
    summary:
      "Sandbox lifecycle events after a cursor, oldest first: the caller's tenant's (an admin key: every tenant's, or ?tenant=). With ?wait= the answer waits for the first event.",
    tag: 'events',
    access: 'operator',
    query: {
      schema: EventsQuery,
      parameters: {
        after: 'Events after this cursor (the `next` of the previous page); 0 or absent: the oldest kept.',
        limit: `At most this many events (default 100, at most ${MAX_EVENTS_PAGE}).`,
        types: `Only these types, repeated or comma-separated: ${LIFECYCLE_TYPES.join(', ')}.`,
        tenant: "An admin key's choice of one tenant; a member key may only name its own.",
        wait: `Seconds to wait for an event when there is none yet (a long poll; at most ${MAX_EVENTS_WAIT_SECONDS}).`,
      },
    },
    responses: { 200: { description: 'One page of events and the next cursor.', schema: EventsPage } },
    handle: async ({ deps, res, query, caller }) => {
      const { log } = eventsOf(deps);
      const principal = principalOf(caller);
      const filter: EventFilter = { after: query.after ?? 0, tenant: tenantScope(principal, query.tenant), types: typesOf(query.types) };
      const limit = Math.max(1, Math.min(query.limit ?? 100, MAX_EVENTS_PAGE));
      const wait = Math.min(query.wait ?? 0, MAX_EVENTS_WAIT_SECONDS);
      if (wait > 0) {
        const gone = new AbortController();
        const abort = () => gone.abort();
        res.once('close', abort);
        try {
          await log.waitFor(filter, wait * 1000, gone.signal);
        } finally {
          res.off('close', abort);
        }
        // The client went away while it waited: nothing to answer.
        if (gone.signal.aborted) return;
      }
      sendJson(res, 200, log.read(filter, limit));
    },
  }),
  defineRoute({
    method: 'POST',
    path: '/v1/webhooks',
    operationId: 'createWebhook',
    summary: "Register a webhook for the caller's tenant: its events are POSTed there, signed; the answer holds the signing secret, shown only this once.",
    tag: 'events',
    access: 'operator',
    body: {
      schema: CreateWebhookRequest,
      what: 'webhook request',
      hint: `Send { "url": "https://...", "events"?: [${LIFECYCLE_TYPES.map((t) => `"${t}"`).join(', ')}] }.`,
    },
    responses: { 201: { description: 'The webhook and its secret (shown once).', schema: CreatedWebhook } },
    handle: async ({ deps, res, body, caller }) => sendJson(res, 201, await eventsOf(deps).webhooks.register(principalOf(caller), body)),
  }),
  defineRoute({
    method: 'GET',
    path: '/v1/webhooks',
    operationId: 'listWebhooks',
    summary: "The caller's tenant's webhooks with their delivery status (an admin key: every tenant's, or ?tenant=).",
    tag: 'events',
    access: 'operator',
    query: { schema: WebhooksQuery, parameters: { tenant: "An admin key's choice of one tenant." } },
    responses: { 200: { description: 'The webhooks.', schema: z.object({ webhooks: z.array(WebhookInfo) }) } },
    handle: async ({ deps, res, query, caller }) => {
      const principal = principalOf(caller);
      sendJson(res, 200, { webhooks: eventsOf(deps).webhooks.list(principal, tenantScope(principal, query.tenant)) });
    },
  }),
  defineRoute({
    method: 'GET',
    path: '/v1/webhooks/{webhook}',
    operationId: 'getWebhook',
    summary: 'One webhook and its delivery status: delivered, failed, consecutive failures, the last error, what is pending.',
    tag: 'events',
    access: 'operator',
    responses: { 200: { description: 'The webhook.', schema: WebhookInfo } },
    handle: async ({ deps, res, params, caller }) => sendJson(res, 200, eventsOf(deps).webhooks.get(principalOf(caller), params.webhook)),
  }),
  defineRoute({
    method: 'DELETE',
    path: '/v1/webhooks/{webhook}',
    operationId: 'deleteWebhook',
    summary: 'Delete a webhook: its deliveries stop.',
    tag: 'events',
    access: 'operator',
    responses: { 204: { description: 'Gone.' } },
    handle: async ({ deps, res, params, caller }) => {
      await eventsOf(deps).webhooks.remove(principalOf(caller), params.webhook);
      res.writeHead(204).end();
    },
  }),
];
