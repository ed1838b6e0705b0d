import { ASKED_TENANT, ownerIn, ownerOf, TenantQuery } from '../tenancy/owner.js';
import {
  CodedError,
  CreateSnapshotRequest,
  ForkSandboxRequest,
  ForkSandboxResponse,
  ListSnapshotsResponse,
  PruneSnapshotsRequest,
  PruneSnapshotsResponse,
  SnapshotInfo,
} from '@warren/protocol';
import type { HttpServerDeps } from '../server-context.js';
import { DEFAULT_SNAPSHOT_LIMITS } from '../snapshot-store.js';
import { errorBody, sendJson } from './io.js';
import { defineRoute, type Route } from './route.js';

/** The snapshot service, or NOT_SUPPORTED where this server runs without one. */
function snapshotsOf(deps: HttpServerDeps): NonNullable<HttpServerDeps['snapshots']> {
  if (!deps.snapshots) throw new CodedError('NOT_SUPPORTED', 'This server runs without snapshots; start the controller with warren serve.');
  return deps.snapshots;
}

/** Snapshots of a sandbox's files, kept per tenant, and forks of a running sandbox (docs/state.md). */
export const SNAPSHOT_ROUTES: readonly Route[] = [
  defineRoute({
    method: 'POST',
    path: '/v1/sandboxes/{id}/snapshot',
    operationId: 'snapshotSandbox',
    summary:
      "Snapshot the sandbox's files (its container's changes and its workspace) for the calling API key; the sandbox is frozen for the capture and keeps running.",
    tag: 'snapshots',
    access: 'operator',
    scope: 'snapshots',
    body: { schema: CreateSnapshotRequest, what: 'snapshot request', hint: 'Send { "name"?: "<letters, digits, . _ ->", "labels"?: { ... } }.' },
    responses: { 201: { description: 'The stored snapshot.', schema: SnapshotInfo } },
    handle: async ({ deps, res, params, body, caller }) => {
      const info = await snapshotsOf(deps).take(params.id, ownerOf(caller), body);
      deps.logger.info({ sandboxId: params.id, snapshotId: info.id, sizeBytes: info.sizeBytes }, 'snapshot.created');
      sendJson(res, 201, info);
    },
  }),
  defineRoute({
    method: 'POST',
    path: '/v1/sandboxes/{id}/fork',
    operationId: 'forkSandbox',
    summary: "Make count independent sandboxes from the sandbox's current state (limits apply to each as to a create).",
    tag: 'snapshots',
    access: 'operator',
    scope: 'snapshots',
    body: {
      schema: ForkSandboxRequest,
      what: 'fork request',
      hint: (deps) => `Send { "count": <1-${deps.snapshots?.limits.maxForkCount ?? DEFAULT_SNAPSHOT_LIMITS.maxForkCount}> }.`,
    },
    responses: {
      201: {
        description:
          "The forks that started, each with its token (sandboxes), and one result per requested fork, in order: its sandbox or its error (results). When none started, the answer is the first fork's error.",
        schema: ForkSandboxResponse,
      },
    },
    handle: async ({ deps, res, params, body, caller }) => {
      const outcomes = await snapshotsOf(deps).fork(params.id, ownerOf(caller), body);
      const sandboxes = outcomes.flatMap((o) => ('sandbox' in o ? [o.sandbox] : []));
      // Each fork settles alone; with none started the first error is the answer, as a refusal was before.
      const first = outcomes.find((o) => 'error' in o);
      if (sandboxes.length === 0 && first !== undefined) throw first.error;
      deps.logger.info({ sandboxId: params.id, forks: sandboxes.map((f) => f.id), failed: outcomes.length - sandboxes.length }, 'sandbox.forked');
      const results = outcomes.map((o) => ('sandbox' in o ? { sandbox: o.sandbox } : { error: errorBody(o.error).body.error }));
      sendJson(res, 201, { sandboxes, results } satisfies ForkSandboxResponse);
    },
  }),
  defineRoute({
    method: 'GET',
    path: '/v1/snapshots',
    operationId: 'listSnapshots',
    summary: "The calling key's tenant's snapshots (an admin's: another tenant's with ?tenant=), newest first.",
    tag: 'snapshots',
    access: 'operator',
    scope: 'snapshots',
    query: { schema: TenantQuery, parameters: { tenant: ASKED_TENANT } },
    responses: { 200: { description: 'The snapshots.', schema: ListSnapshotsResponse } },
    handle: async ({ deps, res, query, caller }) => sendJson(res, 200, { snapshots: snapshotsOf(deps).list(ownerIn(caller, query.tenant)) }),
  }),
  defineRoute({
    method: 'POST',
    path: '/v1/snapshots/prune',
    operationId: 'pruneSnapshots',
    summary:
      "Delete the calling key's tenant's snapshots (or, for an admin, ?tenant='s) older than olderThanSeconds (with every given label), and images no snapshot names.",
    tag: 'snapshots',
    access: 'operator',
    scope: 'snapshots',
    query: { schema: TenantQuery, parameters: { tenant: ASKED_TENANT } },
    body: { schema: PruneSnapshotsRequest, what: 'prune request', hint: 'Send { "olderThanSeconds": <n>, "labels"?: {...} }.' },
    responses: { 200: { description: 'What was deleted.', schema: PruneSnapshotsResponse } },
    handle: async ({ deps, res, query, body, caller }) => sendJson(res, 200, await snapshotsOf(deps).prune(ownerIn(caller, query.tenant), body)),
  }),
  defineRoute({
    method: 'GET',
    path: '/v1/snapshots/{snapshot}',
    operationId: 'getSnapshot',
    summary: "Describe one of the calling key's tenant's snapshots (by id or name; an admin's: another tenant's with ?tenant=).",
    tag: 'snapshots',
    access: 'operator',
    scope: 'snapshots',
    query: { schema: TenantQuery, parameters: { tenant: ASKED_TENANT } },
    responses: { 200: { description: 'The snapshot.', schema: SnapshotInfo } },
    handle: async ({ deps, res, params, query, caller }) => sendJson(res, 200, snapshotsOf(deps).get(ownerIn(caller, query.tenant), params.snapshot)),
  }),
  defineRoute({
    method: 'DELETE',
    path: '/v1/snapshots/{snapshot}',
    operationId: 'deleteSnapshot',
    summary: "Delete one of the calling key's tenant's snapshots (an admin's: another tenant's with ?tenant=); sandboxes made from it keep their files.",
    tag: 'snapshots',
    access: 'operator',
    scope: 'snapshots',
    query: { schema: TenantQuery, parameters: { tenant: ASKED_TENANT } },
    responses: { 204: { description: 'Gone.' } },
    handle: async ({ deps, res, params, query, caller }) => {
      await snapshotsOf(deps).remove(ownerIn(caller, query.tenant), params.snapshot);
      res.writeHead(204).end();
    },
  }),
];
