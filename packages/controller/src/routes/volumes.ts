import { ASKED_TENANT, ownerIn, TenantQuery } from '../tenancy/owner.js';
import { CodedError, CreateVolumeRequest, ListVolumesResponse, VolumeInfo } from '@warren/protocol';
import type { HttpServerDeps } from '../server-context.js';
import { sendJson } from './io.js';
import { defineRoute, type Route } from './route.js';

/** The volume service, or NOT_SUPPORTED where this server runs without one. */
function volumesOf(deps: HttpServerDeps): NonNullable<HttpServerDeps['volumes']> {
  if (!deps.volumes) throw new CodedError('NOT_SUPPORTED', 'This server runs without named volumes; start the controller with warren serve.');
  return deps.volumes;
}

/** Named volumes of the calling key's tenant (an admin's: any tenant's, with ?tenant=): storage that outlives sandboxes (docs/state.md#volumes). */
export const VOLUME_ROUTES: readonly Route[] = [
  defineRoute({
    method: 'POST',
    path: '/v1/volumes',
    operationId: 'createVolume',
    summary:
      "Create a named volume for the calling key's tenant (an admin's: ?tenant='s): storage that outlives sandboxes, with a size limit where the host gives quotas.",
    tag: 'volumes',
    access: 'operator',
    scope: 'volumes',
    query: { schema: TenantQuery, parameters: { tenant: ASKED_TENANT } },
    body: { schema: CreateVolumeRequest, what: 'volume request', hint: 'Send { "name": "<letters, digits, . _ ->", "sizeMb"?: <n> }.' },
    responses: { 201: { description: 'The volume.', schema: VolumeInfo } },
    handle: async ({ deps, res, query, body, caller }) => sendJson(res, 201, await volumesOf(deps).create(ownerIn(caller, query.tenant), body)),
  }),
  defineRoute({
    method: 'GET',
    path: '/v1/volumes',
    operationId: 'listVolumes',
    summary: "The calling key's tenant's volumes (an admin's: another tenant's with ?tenant=).",
    tag: 'volumes',
    access: 'operator',
    scope: 'volumes',
    query: { schema: TenantQuery, parameters: { tenant: ASKED_TENANT } },
    responses: { 200: { description: 'The volumes.', schema: ListVolumesResponse } },
    handle: async ({ deps, res, query, caller }) => sendJson(res, 200, { volumes: await volumesOf(deps).list(ownerIn(caller, query.tenant)) }),
  }),
  defineRoute({
    method: 'GET',
    path: '/v1/volumes/{volume}',
    operationId: 'getVolume',
    summary: "Describe one of the calling key's tenant's volumes (an admin's: another tenant's with ?tenant=).",
    tag: 'volumes',
    access: 'operator',
    scope: 'volumes',
    query: { schema: TenantQuery, parameters: { tenant: ASKED_TENANT } },
    responses: { 200: { description: 'The volume.', schema: VolumeInfo } },
    handle: async ({ deps, res, params, query, caller }) => sendJson(res, 200, await volumesOf(deps).get(ownerIn(caller, query.tenant), params.volume)),
  }),
  defineRoute({
    method: 'DELETE',
    path: '/v1/volumes/{volume}',
    operationId: 'deleteVolume',
    summary: "Delete one of the calling key's tenant's volumes (an admin's: another tenant's with ?tenant=) and its data (refused while a sandbox mounts it).",
    tag: 'volumes',
    access: 'operator',
    scope: 'volumes',
    query: { schema: TenantQuery, parameters: { tenant: ASKED_TENANT } },
    responses: { 204: { description: 'Gone.' } },
    handle: async ({ deps, res, params, query, caller }) => {
      await volumesOf(deps).remove(ownerIn(caller, query.tenant), params.volume);
      res.writeHead(204).end();
    },
  }),
];
