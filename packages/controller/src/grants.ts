import {
  CodedError,
  ConnectionGrant,
  DEFAULT_ROOT,
  DeriveTokenRequest,
  METHODS,
  encodeFrame,
  isMethodName,
  issueText,
  narrowPolicy,
  peekHeader,
  writableRoots,
  type DeriveTokenResponse,
  type ErrorCode,
  type FilePolicy,
  type MethodAccess,
  type RequestId,
} from '@warren/protocol';
import type { WebSocket } from 'ws';
import type { Credentials } from './credentials.js';
import type { Metrics } from './metrics.js';
import type { SandboxRecord } from './sandboxes.js';

/** Who is calling: the operator (API key), the holder of one sandbox's token, or of a derived token. */
export type Caller =
  { kind: 'operator' } | { kind: 'sandbox'; sandboxId: string } | { kind: 'derived'; sandboxId: string; grant: unknown; expiresAt?: number | undefined };

/** The policy a sandbox created without one gets: its workspace, read-write. */
export const DEFAULT_POLICY: FilePolicy = { root: DEFAULT_ROOT, readOnly: false };

/**
 * The grant a connection gets: the sandbox's base policy with exec for the API key and the
 * sandbox token; exactly what was signed into a derived token for its holder.
 */
export function grantFor(record: SandboxRecord, caller: Caller): ConnectionGrant {
  if (caller.kind !== 'derived') return { policy: (record.policy as FilePolicy | undefined) ?? DEFAULT_POLICY, allowExec: true, allowAudit: true };
  const parsed = ConnectionGrant.safeParse(caller.grant);
  if (!parsed.success) throw new CodedError('UNAUTHORIZED', 'Missing or invalid credential: send Authorization: Bearer <API key>, or a token of this sandbox.');
  // Whatever a derived token was signed with, it never carries the audit right.
  return { policy: parsed.data.policy, allowExec: parsed.data.allowExec };
}

/**
 * The one authorization model: whether a grant may use a kind of access, for a WebSocket method
 * (checked per frame by the relay) and for the REST route that does the same thing alike.
 * Returns why not, or undefined when it may. Paths are the daemon's to check.
 */
export function refusalFor(grant: ConnectionGrant, access: MethodAccess, what: string): string | undefined {
  if (access === 'exec' && !grant.allowExec)
    return `${what} runs a process, and this handle may not run commands (it was derived without allowExec). Use file calls, or a handle derived with allowExec: true.`;
  if (access === 'write' && writableRoots(grant.policy).length === 0)
    return `${what} writes, and this connection's file policy is read-only. Use read calls only, or a handle with write access.`;
  if (access === 'audit' && grant.allowAudit !== true)
    return `${what} reads the sandbox's whole record of calls (every path and command), which only the API key and the sandbox's own token may read; this handle is a derived one.`;
  return undefined;
}

/**
 * `POST /v1/sandboxes/:id/derive`: a self-contained signed token whose grant is the caller's own,
 * narrowed by `narrowPolicy` (seed 001 rules). Anything wider is PERMISSION_ESCALATION.
 */
export function deriveGrant(credentials: Credentials, record: SandboxRecord, caller: Caller, body: unknown): DeriveTokenResponse {
  const parsed = DeriveTokenRequest.safeParse(body ?? {});
  if (!parsed.success) {
    throw new CodedError(
      'INVALID_PARAMS',
      `Invalid derive request: ${parsed.error.issues.map(issueText).join('; ')}. Fields: allowRead, allowWrite, readonly, inherit, allowExec, ttlSeconds.`,
    );
  }
  const { allowExec, ttlSeconds, ...narrowing } = parsed.data;
  const parent = grantFor(record, caller);
  if (allowExec === true && !parent.allowExec) {
    throw new CodedError(
      'PERMISSION_ESCALATION',
      'derive() would widen the parent: allowExec on a handle that may not run commands. A derived handle can only narrow.',
    );
  }
  const grant: ConnectionGrant = { policy: narrowPolicy(parent.policy, narrowing), allowExec: allowExec ?? false };
  let expiresAt = ttlSeconds === undefined ? undefined : Date.now() + ttlSeconds * 1000;
  if (caller.kind === 'derived' && caller.expiresAt !== undefined) expiresAt = Math.min(expiresAt ?? Infinity, caller.expiresAt);
  const token = credentials.deriveToken({ sandboxId: record.id, grant, expiresAt });
  return expiresAt === undefined ? { token, grant } : { token, grant, expiresAt: new Date(expiresAt).toISOString() };
}

/**
 * The per-frame check the relay runs on every client frame: a call whose method needs `exec`
 * when the grant has no exec, or `write` when the grant can write nowhere, is answered with a
 * FORBIDDEN error frame and never reaches the daemon. Paths are the daemon's to check.
 */
export function callAccessCheck(grant: ConnectionGrant, metrics?: Metrics): (data: Buffer) => Buffer | undefined {
  return (data) => {
    const header = peekHeader(data);
    if (header?.type !== 'req' || typeof header.method !== 'string' || !isMethodName(header.method)) return undefined;
    const access = METHODS[header.method].access;
    const refusal = refusalFor(grant, access, header.method);
    if (refusal === undefined) return undefined;
    metrics?.calls.inc({ method: header.method, outcome: 'refused' });
    metrics?.errors.inc({ code: 'FORBIDDEN', source: 'call' });
    const id = header.id as RequestId;
    return encodeFrame({ type: 'err', id: id ?? null, error: { code: 'FORBIDDEN', message: refusal, details: { method: header.method, access } } });
  };
}

/**
 * Watches the frames of one relayed connection, without touching them, for the metrics: a call's
 * method and start on its request frame, its outcome and latency on the final answer.
 */
export function observeCalls(client: WebSocket, agent: WebSocket, metrics: Metrics): { forget(data: Buffer): void } {
  const inFlight = new Map<RequestId, { method: string; started: number }>();
  client.on('message', (data: Buffer) => {
    const header = peekHeader(data);
    if (
      header?.type === 'req' &&
      typeof header.method === 'string' &&
      (typeof header.id === 'number' || typeof header.id === 'string') &&
      isMethodName(header.method)
    ) {
      if (inFlight.size < 10_000) inFlight.set(header.id, { method: header.method, started: performance.now() });
    }
  });
  agent.on('message', (data: Buffer) => {
    const header = peekHeader(data);
    if (header?.type !== 'res' && header?.type !== 'err') return;
    const id = header.id as RequestId | null;
    const call = id === null ? undefined : inFlight.get(id);
    if (header.type === 'err') {
      const code = (header.error as { code?: ErrorCode } | undefined)?.code ?? 'INTERNAL';
      metrics.errors.inc({ code, source: 'call' });
    }
    if (!call) return;
    inFlight.delete(id!);
    metrics.calls.inc({ method: call.method, outcome: header.type === 'res' ? 'ok' : 'error' });
    metrics.callSeconds.observe({ method: call.method }, (performance.now() - call.started) / 1000);
  });
  client.once('close', () => inFlight.clear());
  return {
    /** Drops a request the relay refused: no answer from the daemon will close it. */
    forget(data: Buffer) {
      const id = peekHeader(data)?.id;
      if (typeof id === 'number' || typeof id === 'string') inFlight.delete(id);
    },
  };
}
