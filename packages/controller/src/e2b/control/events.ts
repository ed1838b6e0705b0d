import { listedTenant } from '../../tenancy/reach.js';
import type { ServerResponse } from 'node:http';
import type { SandboxEvent } from '../../events/lifecycle.js';
import type { Caller } from '../../grants.js';
import type { HttpServerDeps } from '../../server-context.js';
import { E2bHttpError } from '../errors.js';
import { json } from '../http-util.js';

/**
 * E2B's lifecycle event types for Warren's: a hibernation is E2B's pause and a wake its resume,
 * an expiry its kill. Warren's own kinds E2B has no word for (ready, frozen, thawed, snapshotted,
 * forked, oom-killed, failed) are not shown on E2B's routes.
 */
export function e2bEventType(event: SandboxEvent): string | undefined {
  switch (event.type) {
    case 'created':
      return 'sandbox.lifecycle.created';
    case 'killed':
    case 'expired':
      return 'sandbox.lifecycle.killed';
    case 'paused':
    case 'hibernated':
      return 'sandbox.lifecycle.paused';
    case 'resumed':
      return event.details?.thawed === true ? undefined : 'sandbox.lifecycle.resumed';
    case 'woken':
      return 'sandbox.lifecycle.resumed';
    default:
      return undefined;
  }
}

/** The E2B types there are, for a refusal that names them. */
const E2B_TYPES = ['sandbox.lifecycle.created', 'sandbox.lifecycle.killed', 'sandbox.lifecycle.paused', 'sandbox.lifecycle.resumed'];

/**
 * One event as E2B's events API shows it. Its `id` is Warren's cursor written as a UUID (the same
 * event always gets the same id); the build and template ids E2B has are not Warren's and are empty.
 */
export function e2bEvent(event: SandboxEvent, type: string): Record<string, unknown> {
  return {
    version: 'v1',
    id: `00000000-0000-4000-8000-${event.id.toString(16).padStart(12, '0')}`,
    type,
    eventData: null,
    sandboxBuildId: '',
    sandboxExecutionId: event.sandboxId,
    sandboxId: event.sandboxId,
    sandboxTeamId: event.tenant,
    sandboxTemplateId: typeof event.details?.image === 'string' ? event.details.image : '',
    timestamp: event.time,
  };
}

/**
 * `GET /events/sandboxes` and `GET /events/sandboxes/{sandboxID}`: the events of the caller's
 * tenant (E2B's team; an admin key's: every tenant's) from Warren's event log, newest first
 * unless `orderAsc=true`, paged by `offset` and `limit` (10 by default, at most 100), filtered by
 * `types` (repeatable). A sandbox of another tenant, or one that never was, has no events: an
 * empty list, as E2B answers.
 */
export function serveE2bEvents(deps: HttpServerDeps, res: ServerResponse, query: URLSearchParams, caller: Caller, sandboxId: string | undefined): void {
  if (!deps.events) throw new E2bHttpError(501, "This server runs without Warren's event log; start the controller with warren serve.");
  if (caller.kind !== 'operator') throw new E2bHttpError(401, 'The events API takes the API key only.');
  const types = query.getAll('types').flatMap((t) => t.split(','));
  const unknown = types.find((t) => !E2B_TYPES.includes(t));
  if (unknown !== undefined) throw new E2bHttpError(400, `Unknown event type '${unknown.slice(0, 64)}'; the types are ${E2B_TYPES.join(', ')}.`);
  const offset = whole(query.get('offset'), 0, 'offset');
  const limit = Math.min(Math.max(whole(query.get('limit'), 10, 'limit'), 1), 100);
  const tenant = listedTenant(caller);
  const all: Record<string, unknown>[] = [];
  for (const event of deps.events.log.read({ tenant }, Number.MAX_SAFE_INTEGER).events) {
    if (sandboxId !== undefined && event.sandboxId !== sandboxId) continue;
    const type = e2bEventType(event);
    if (type !== undefined && (types.length === 0 || types.includes(type))) all.push(e2bEvent(event, type));
  }
  if (query.get('orderAsc') !== 'true') all.reverse();
  json(res, 200, all.slice(offset, offset + limit));
}

function whole(raw: string | null, fallback: number, name: string): number {
  if (raw === null || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) throw new E2bHttpError(400, `${name} must be a whole number, got '${raw.slice(0, 32)}'.`);
  return value;
}
