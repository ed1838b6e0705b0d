import { CodedError, DeriveTokenRequest, DeriveTokenResponse, METHODS, type ParamsIn } from '@warren/protocol';
import { callAgent } from '../agent-link.js';
import { deriveGrant } from '../grants.js';
import type { HttpServerDeps } from '../server-context.js';
import { sendJson } from './io.js';
import { defineRoute, PAGE_PARAMETERS, PageQuery, type Route } from './route.js';

/**
 * One page of a sandbox's audit log, from its daemon (`audit.list`): a paused sandbox is refused
 * (its daemon cannot answer), a hibernated or frozen one is woken first.
 */
async function auditPage(deps: HttpServerDeps, id: string, page: { since?: number | undefined; limit?: number | undefined }): Promise<unknown> {
  const params: ParamsIn<'audit.list'> = {};
  if (page.since !== undefined) params.since = page.since;
  if (page.limit !== undefined) params.limit = page.limit;
  const { sandboxes } = deps;
  if (sandboxes.record(id).state === 'paused') throw new CodedError('SANDBOX_NOT_READY', `Sandbox '${id}' is paused; resume it to read its audit log.`);
  await sandboxes.wake(id);
  return (deps.callDaemon ?? callAgent)(sandboxes.daemonEndpoint(id), sandboxes.agentSecret(id), 'audit.list', params);
}

/** Who may do what to a sandbox: tokens derived with a narrower grant, and the daemon's audit log of the calls it served. */
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
    summary: "The daemon's audit log: every call it served, oldest first, in pages.",
    tag: 'access',
    access: 'audit',
    query: { schema: PageQuery, parameters: PAGE_PARAMETERS },
    responses: { 200: { description: 'One page of the audit log.', schema: METHODS['audit.list'].result } },
    handle: async ({ deps, res, params, query }) => sendJson(res, 200, await auditPage(deps, params.id, query)),
  }),
];
