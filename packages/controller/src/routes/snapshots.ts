import { ownerOf } from '../tenancy/owner.js';
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
import { sendJson } from './io.js';
import { defineRoute, type Route } from './route.js';

/** The snapshot service, or NOT_SUPPORTED where this server runs without one. */
function snapshotsOf(deps: HttpServerDeps): NonNullable<HttpServerDeps['snapshots']> {
  if (!deps.snapshots) throw new CodedError('NOT_SUPPORTED', 'This server runs without snapshots; start the controller with warren serve.');
  return deps.snapshots;
}

/** Snapshots of a sandbox's files, kept per API key, and forks of a running sandbox (docs/state.md). */
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
    responses: { 201: { description: 'The forks, each with its token.', schema: ForkSandboxResponse } },
    handle: async ({ deps, res, params, body, caller }) => {
      const forks = await snapshotsOf(deps).fork(params.id, ownerOf(caller), body);
      deps.logger.info({ sandboxId: params.id, forks: forks.map((f) => f.id) }, 'sandbox.forked');
      sendJson(res, 201, { sandboxes: forks });
    },
  }),
  defineRoute({
    method: 'GET',
    path: '/v1/snapshots',
    operationId: 'listSnapshots',
    summary: "The calling API key's snapshots, newest first.",
    tag: 'snapshots',
    access: 'operator',
    scope: 'snapshots',
    responses: { 200: { description: 'The snapshots.', schema: ListSnapshotsResponse } },
    handle: async ({ deps, res, caller }) => sendJson(res, 200, { snapshots: snapshotsOf(deps).list(ownerOf(caller)) }),
  }),
  defineRoute({
    method: 'POST',
    path: '/v1/snapshots/prune',
    operationId: 'pruneSnapshots',
    summary: "Delete the calling key's snapshots older than olderThanSeconds (with every given label), and images no snapshot names.",
    tag: 'snapshots',
    access: 'operator',
    scope: 'snapshots',
    body: { schema: PruneSnapshotsRequest, what: 'prune request', hint: 'Send { "olderThanSeconds": <n>, "labels"?: {...} }.' },
    responses: { 200: { description: 'What was deleted.', schema: PruneSnapshotsResponse } },
    handle: async ({ deps, res, body, caller }) => sendJson(res, 200, await snapshotsOf(deps).prune(ownerOf(caller), body)),
  }),
  defineRoute({
    method: 'GET',
    path: '/v1/snapshots/{snapshot}',
    operationId: 'getSnapshot',
    summary: "Describe one of the calling key's snapshots (by id or name).",
    tag: 'snapshots',
    access: 'operator',
    scope: 'snapshots',
    responses: { 200: { description: 'The snapshot.', schema: SnapshotInfo } },
    handle: async ({ deps, res, params, caller }) => sendJson(res, 200, snapshotsOf(deps).get(ownerOf(caller), params.snapshot)),
  }),
  defineRoute({
    method: 'DELETE',
    path: '/v1/snapshots/{snapshot}',
    operationId: 'deleteSnapshot',
    summary: "Delete one of the calling key's snapshots (sandboxes made from it keep their files).",
    tag: 'snapshots',
    access: 'operator',
    scope: 'snapshots',
    responses: { 204: { description: 'Gone.' } },
    handle: async ({ deps, res, params, caller }) => {
      await snapshotsOf(deps).remove(ownerOf(caller), params.snapshot);
      res.writeHead(204).end();
    },
  }),
];
