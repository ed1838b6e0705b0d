import { AuditExportLine, AuditListParams, CodedError, DeriveTokenRequest, DeriveTokenResponse, issueText, METHODS, type ParamsIn } from '@warren/protocol';
import { z } from 'zod';
import { deriveGrant } from '../grants.js';
import type { HttpServerDeps } from '../server-context.js';
import { TenantName } from '../tenancy/principals.js';
import { principalOf, tenantScope } from '../tenancy/reach.js';
import { sendJson, sendJsonLines } from './io.js';
import { defineRoute, PAGE_PARAMETERS, PageQuery, type Route } from './route.js';

/**
 * One page of a sandbox's audit log, from the controller's durable trail: no daemon is asked, so a
 * paused, frozen or hibernated sandbox is read as it is. The page's bounds and refusal are the
 * WebSocket method's (`audit.list`).
 */
async function auditPage(deps: HttpServerDeps, id: string, page: { since?: number | undefined; limit?: number | undefined }): Promise<unknown> {
  const params: ParamsIn<'audit.list'> = {};
  if (page.since !== undefined) params.since = page.since;
  if (page.limit !== undefined) params.limit = page.limit;
  const checked = AuditListParams.safeParse(params);
  if (!checked.success) {
    const issue = checked.error.issues[0]!;
    throw new CodedError('INVALID_PARAMS', `Invalid audit page: ${issueText(issue)}.`, { field: issue.path.join('.') });
  }
  return deps.audit.list(id, checked.data);
}

/** An ISO 8601 time in a query (`?since=2026-12-01T00:00:00Z`), as epoch milliseconds. */
function isoTime(name: string) {
  return z
    .string()
    .transform((raw, ctx) => {
      const value = Date.parse(raw);
      if (Number.isFinite(value)) return value;
      ctx.addIssue({ code: 'custom', message: `?${name}= must be an ISO 8601 time such as 2026-12-01T00:00:00Z, got '${raw.slice(0, 80)}'.` });
      return z.NEVER;
    })
    .meta({ type: 'string', format: 'date-time' });
}

/** The query of `GET /v1/audit`. */
const AuditExportQuery = z.object({
  sandbox: z
    .string()
    .regex(/^[A-Za-z0-9]{1,128}$/, '?sandbox= must be a sandbox id (letters and digits)')
    .optional(),
  tenant: TenantName.optional(),
  since: isoTime('since').optional(),
  until: isoTime('until').optional(),
});

/** Who may do what to a sandbox: tokens derived with a narrower grant, and the audit trail of the calls made on it. */
export const ACCESS_ROUTES: readonly Route[] = [
  defineRoute({
    method: 'POST',
    path: '/v1/sandboxes/{id}/derive',
    operationId: 'deriveToken',
    summary: "A token for the same sandbox with a narrower grant than the caller's own.",
    tag: 'access',
    access: 'derive',
    body: { schema: DeriveTokenRequest, what: 'derive request', hint: 'Fields: allowRead, allowWrite, readonly, inherit, allowExec, ttlSeconds.' },
    responses: { 201: { description: 'The derived token and the grant it carries.', schema: DeriveTokenResponse } },
    handle: async ({ deps, res, params, body, caller }) => sendJson(res, 201, deriveGrant(deps.credentials, deps.sandboxes.record(params.id), caller!, body)),
  }),
  defineRoute({
    method: 'GET',
    path: '/v1/sandboxes/{id}/audit',
    operationId: 'auditLog',
    summary: "The sandbox's durable audit trail: every call made on it, with who made it, oldest first, in pages.",
    tag: 'access',
    access: 'audit',
    // The trail is the controller's: reading it wakes nothing.
    staysAsleep: true,
    query: { schema: PageQuery, parameters: PAGE_PARAMETERS },
    responses: { 200: { description: 'One page of the audit trail.', schema: METHODS['audit.list'].result } },
    handle: async ({ deps, res, params, query }) => sendJson(res, 200, await auditPage(deps, params.id, query)),
  }),
  defineRoute({
    method: 'GET',
    path: '/v1/audit',
    operationId: 'exportAudit',
    summary: "Every kept audit entry as JSON lines, also of sandboxes that are gone: a member key's tenant only, an admin key's every tenant or ?tenant=.",
    tag: 'access',
    access: 'operator',
    query: {
      schema: AuditExportQuery,
      parameters: {
        sandbox: 'One sandbox only (also one that is gone).',
        tenant: 'One tenant only (an admin key; a member key reads its own).',
        since: 'Entries at or after this ISO 8601 time.',
        until: 'Entries before this ISO 8601 time.',
      },
    },
    responses: {
      200: { description: 'One entry per line, sandbox by sandbox, each oldest first.', contentType: 'application/x-ndjson', schema: AuditExportLine },
    },
    handle: async ({ deps, res, query, caller }) => {
      const tenant = tenantScope(principalOf(caller), query.tenant);
      await sendJsonLines(res, deps.audit.export({ sandbox: query.sandbox, tenant, since: query.since, until: query.until }));
    },
  }),
];
