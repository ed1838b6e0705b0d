import { CodedError, CreatedKey, KeyInfo, ListKeysResponse, RotatedSandboxToken, TenantReport } from '@warren/protocol';
import type { HttpServerDeps } from '../server-context.js';
import { z } from 'zod';
import { TenantLimits } from '../tenancy/limits.js';
import { CreateKeyRequest, keyNotFound } from '../tenancy/principals.js';
import { principalOf, tenantScope } from '../tenancy/reach.js';
import { TenantQuery } from '../tenancy/owner.js';
import { sendJson } from './io.js';
import { defineRoute, type Route } from './route.js';

const RevokeTokenRequest = z.strictObject({ token: z.string().min(1).max(8192) });

/** A tenant's live sandboxes, snapshots and volumes, and its creates in the last minute, beside its limits. */
function tenantReport(deps: HttpServerDeps, tenant: string): TenantReport {
  const { launcher } = deps.sandboxes;
  const sandboxes = launcher.usageOf(tenant);
  const snapshots = deps.snapshots?.store.list(tenant) ?? [];
  return {
    tenant,
    usage: {
      ...sandboxes,
      snapshots: snapshots.length,
      snapshotMb: Math.ceil(snapshots.reduce((sum, s) => sum + s.sizeBytes, 0) / (1024 * 1024)),
      volumes: deps.volumes?.count(tenant) ?? 0,
      createsLastMinute: launcher.tenants.createsLastMinute(tenant),
    },
    limits: launcher.tenants.limitsOf(tenant),
  };
}

/** API keys, tenants' usage and limits, and token revocation (docs/tenancy.md). */
export const TENANCY_ROUTES: readonly Route[] = [
  defineRoute({
    method: 'GET',
    path: '/v1/keys',
    operationId: 'listKeys',
    summary: 'Every API key (of one tenant with ?tenant=), never a secret. Admin keys only.',
    tag: 'tenancy',
    access: 'admin',
    query: { schema: TenantQuery, parameters: { tenant: 'Only the keys of this tenant.' } },
    responses: { 200: { description: 'The keys.', schema: ListKeysResponse } },
    handle: async ({ deps, res, query }) => sendJson(res, 200, { keys: deps.credentials.keys.list(query.tenant) }),
  }),
  defineRoute({
    method: 'POST',
    path: '/v1/keys',
    operationId: 'createKey',
    summary: 'Make an API key for a tenant (admin or member, optional scopes and expiry). The secret is in this answer only.',
    tag: 'tenancy',
    access: 'admin',
    body: { schema: CreateKeyRequest, what: 'key request', hint: 'Send { "tenant": "acme", "role": "member", "scopes"?: [...], "expiresInSeconds"?: n }.' },
    responses: { 201: { description: 'The key, with its secret.', schema: CreatedKey } },
    handle: async ({ deps, res, body, caller }) => {
      const { key, info } = await deps.credentials.keys.create(body);
      deps.logger.info({ keyId: info.id, tenant: info.tenant, role: info.role, by: caller?.kind === 'operator' ? caller.keyId : undefined }, 'key.created');
      sendJson(res, 201, { ...info, key });
    },
  }),
  defineRoute({
    method: 'GET',
    path: '/v1/keys/{key}',
    operationId: 'getKey',
    summary: 'Describe one API key. Admin keys only.',
    tag: 'tenancy',
    access: 'admin',
    responses: { 200: { description: 'The key.', schema: KeyInfo } },
    handle: async ({ deps, res, params }) => {
      const info = deps.credentials.keys.info(params.key);
      if (!info) throw keyNotFound(params.key);
      sendJson(res, 200, info);
    },
  }),
  defineRoute({
    method: 'POST',
    path: '/v1/keys/{key}/rotate',
    operationId: 'rotateKey',
    summary: 'A new secret for a key: the old one stops working at once, and what it opened is closed. Admin keys only.',
    tag: 'tenancy',
    access: 'admin',
    responses: { 200: { description: 'The key, with its new secret.', schema: CreatedKey } },
    handle: async ({ deps, res, params }) => {
      const { key, info } = await deps.credentials.keys.rotate(params.key);
      deps.logger.info({ keyId: info.id, tenant: info.tenant }, 'key.rotated');
      sendJson(res, 200, { ...info, key });
    },
  }),
  defineRoute({
    method: 'DELETE',
    path: '/v1/keys/{key}',
    operationId: 'revokeKey',
    summary: 'Revoke a key: refused from the next request on; its tokens, console sessions and WebSockets end. Admin keys only.',
    tag: 'tenancy',
    access: 'admin',
    responses: { 200: { description: 'The key, revoked.', schema: KeyInfo } },
    handle: async ({ deps, res, params }) => {
      const info = await deps.credentials.keys.revoke(params.key);
      deps.logger.info({ keyId: info.id, tenant: info.tenant }, 'key.revoked');
      sendJson(res, 200, info);
    },
  }),
  defineRoute({
    method: 'GET',
    path: '/v1/tenant',
    operationId: 'getTenant',
    summary: "The caller's tenant (an admin may name another with ?tenant=): what it uses against its limits.",
    tag: 'tenancy',
    access: 'operator',
    query: { schema: TenantQuery, parameters: { tenant: 'Another tenant (admin keys only).' } },
    responses: { 200: { description: 'Usage and limits.', schema: TenantReport } },
    handle: async ({ deps, res, query, caller }) => {
      const principal = principalOf(caller);
      const tenant = tenantScope(principal, query.tenant) ?? principal.tenant;
      sendJson(res, 200, tenantReport(deps, tenant));
    },
  }),
  defineRoute({
    method: 'POST',
    path: '/v1/tenants/{tenant}/limits',
    operationId: 'setTenantLimits',
    summary: "Set a tenant's limits (replacing what an admin set before; the configuration's apply beneath). Admin keys only.",
    tag: 'tenancy',
    access: 'admin',
    body: { schema: TenantLimits, what: 'limits', hint: 'Send { "maxSandboxes"?: n, "maxCpus"?: n, "maxMemoryMb"?: n, "createsPerMinute"?: n, ... }.' },
    responses: { 200: { description: 'Usage and the limits now.', schema: TenantReport } },
    handle: async ({ deps, res, params, body }) => {
      await deps.credentials.keys.setLimits(params.tenant, body);
      sendJson(res, 200, tenantReport(deps, params.tenant));
    },
  }),
  defineRoute({
    method: 'POST',
    path: '/v1/sandboxes/{id}/tokens/revoke',
    operationId: 'revokeToken',
    summary: 'Revoke one derived token of this sandbox: refused from the next request on, and its WebSockets end.',
    tag: 'tenancy',
    access: 'lifecycle',
    body: { schema: RevokeTokenRequest, what: 'revoke request', hint: 'Send { "token": "wsd_..." }.' },
    responses: { 204: { description: 'Revoked.' } },
    handle: async ({ deps, res, params, body }) => {
      const token = deps.credentials.readDerivedToken(body.token);
      if (!token || token.sandboxId !== params.id || token.tokenId === undefined)
        throw new CodedError('INVALID_PARAMS', 'That is not a derived token of this sandbox (POST /v1/sandboxes/<id>/derive makes them).', { field: 'token' });
      await deps.credentials.keys.revokeToken(token.tokenId, token.expiresAt);
      res.writeHead(204).end();
    },
  }),
  defineRoute({
    method: 'POST',
    path: '/v1/sandboxes/{id}/token/rotate',
    operationId: 'rotateSandboxToken',
    summary:
      'Give the sandbox a new token of its own: the old one is refused from the next request on, and its WebSockets, port tunnels, E2B streams, signed file links and every token derived from it end.',
    tag: 'tenancy',
    access: 'lifecycle',
    responses: { 200: { description: 'The new token.', schema: RotatedSandboxToken } },
    handle: async ({ deps, res, params, caller }) => {
      const token = await deps.credentials.rotateSandboxToken(params.id);
      deps.logger.info({ sandboxId: params.id, by: caller?.kind === 'operator' ? caller.keyId : caller?.kind }, 'sandbox.token_rotated');
      sendJson(res, 200, { token });
    },
  }),
];
