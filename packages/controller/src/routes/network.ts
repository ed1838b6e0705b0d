import { requireScope } from '../tenancy/scopes.js';
import { EgressLogResponse, NetworkPolicyResponse, UpdateNetworkRequest } from '@warren/protocol';
import { sendJson } from './io.js';
import { defineRoute, PAGE_PARAMETERS, PageQuery, type Route } from './route.js';

/** A sandbox's way out: its egress policy, changed live, and the gateway's log of its connection attempts. */
export const NETWORK_ROUTES: readonly Route[] = [
  defineRoute({
    method: 'GET',
    path: '/v1/sandboxes/{id}/network',
    operationId: 'getNetwork',
    summary: "The sandbox's egress policy and its version (version 0: created without egress, so it has no way out and no relay).",
    tag: 'network',
    access: 'lifecycle',
    responses: { 200: { description: 'The policy the gateway enforces now.', schema: NetworkPolicyResponse } },
    handle: async ({ deps, res, params }) => {
      // A sandbox created without egress has no relay at all: its policy is none, version 0.
      const current = (await deps.sandboxes.networkOf(params.id)) ?? { policy: { mode: 'none' as const }, version: 0 };
      sendJson(res, 200, { egress: current.policy, version: current.version });
    },
  }),
  defineRoute({
    method: 'POST',
    path: '/v1/sandboxes/{id}/network',
    operationId: 'updateNetwork',
    summary: "Replace the sandbox's egress policy without a restart; connections it no longer allows are closed before the answer.",
    tag: 'network',
    access: 'lifecycle',
    body: {
      schema: UpdateNetworkRequest,
      what: 'network update',
      hint: 'Send { "egress": { "mode": "allow", "rules": [{ "host": "pypi.org" }] } } (or mode none / open).',
    },
    responses: { 200: { description: 'The new policy and its version.', schema: NetworkPolicyResponse } },
    handle: async ({ deps, res, params, body, caller }) => {
      if (body.egress.mode === 'open' && caller) requireScope(caller, 'egress:open', "Egress mode 'open'", deps.sandboxes.record(params.id));
      const updated = await deps.sandboxes.updateEgress(params.id, body.egress);
      deps.logger.info({ sandboxId: params.id, mode: updated.policy.mode, version: updated.version }, 'sandbox.egress-updated');
      sendJson(res, 200, { egress: updated.policy, version: updated.version });
    },
  }),
  defineRoute({
    method: 'GET',
    path: '/v1/sandboxes/{id}/egress',
    operationId: 'egressLog',
    summary: "The sandbox's recent egress events: every connection attempt through the gateway, allowed or denied, and by which rule.",
    tag: 'network',
    access: 'audit',
    query: { schema: PageQuery, parameters: PAGE_PARAMETERS },
    responses: { 200: { description: 'The events, oldest first.', schema: EgressLogResponse } },
    handle: async ({ deps, res, params, query }) => {
      const record = deps.sandboxes.record(params.id);
      sendJson(res, 200, deps.egressLog?.list(record.agentId, query) ?? { entries: [], lastSeq: -1 });
    },
  }),
];
