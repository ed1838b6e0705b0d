import { SCOPE_NAMES, type KeyStore, type Principal, type Scope } from './tenancy/principals.js';
import {
  CodedError,
  ConnectionGrant,
  DEFAULT_ROOT,
  DeriveTokenRequest,
  METHODS,
  RequestId,
  encodeFrame,
  isMethodName,
  issueText,
  narrowPolicy,
  peekHeader,
  writableRoots,
  type DeriveTokenResponse,
  type FilePolicy,
  type MethodAccess,
} from '@warren/protocol';
import type { Credentials } from './credentials.js';
import type { Metrics } from './metrics.js';
import type { SandboxRecord } from './sandbox-table.js';

/**
 * Who is calling: an API key (`operator`: who it is, see tenancy/principals.ts), the holder of one
 * sandbox's token, or of a token derived from a credential of one sandbox.
 */
export type Caller =
  | ({ kind: 'operator' } & Principal)
  | { kind: 'sandbox'; sandboxId: string }
  | {
      kind: 'derived';
      sandboxId: string;
      grant: unknown;
      expiresAt?: number | undefined;
      /** The API key whose holder minted it: revoking that key ends the token. */
      keyId?: string | undefined;
      tokenId?: string | undefined;
      /** The tokens it was derived from (the sandbox's own, derived ones): revoking any ends it. */
      ancestors?: string[] | undefined;
    };

/** What every refused credential is told, whatever was wrong with it. */
export const UNAUTHORIZED_MESSAGE = 'Missing or invalid credential: send Authorization: Bearer <API key>, or a token of this sandbox.';

/** The policy a sandbox created without one gets: its workspace, read-write. */
export const DEFAULT_POLICY: FilePolicy = { root: DEFAULT_ROOT, readOnly: false };

/**
 * The grant a connection gets: the sandbox's base policy with exec for the API key and the
 * sandbox token; exactly what was signed into a derived token for its holder.
 */
export function grantFor(record: SandboxRecord, caller: Caller): ConnectionGrant {
  if (caller.kind !== 'derived') {
    // A key's scopes narrow what it (and the token of a sandbox it created) may do inside: no `exec`, no
    // process; no `files:write`, a read-only policy. The daemon holds both lines again from this grant.
    const scopes = scopesOf(caller, record);
    const policy = (record.policy as FilePolicy | undefined) ?? DEFAULT_POLICY;
    return {
      policy: scopes.includes('files:write') ? policy : narrowPolicy(policy, { inherit: true, readonly: true }),
      allowExec: scopes.includes('exec'),
      allowAudit: true,
    };
  }
  const parsed = ConnectionGrant.safeParse(caller.grant);
  if (!parsed.success) throw new CodedError('UNAUTHORIZED', UNAUTHORIZED_MESSAGE);
  // Whatever a derived token was signed with, it never carries the audit right.
  return { policy: parsed.data.policy, allowExec: parsed.data.allowExec };
}

/**
 * What a door needs from its caller: a WebSocket method's access class from the protocol
 * registry (`read`, `write`, `exec`, `info`, `audit`), or one of the kinds only REST routes have:
 * `lifecycle` (kill, keepalive, timeout, pause, resume), `derive` (a narrower token: the
 * narrowing itself is checked by {@link deriveGrant}) and `operator` (create, list, metrics).
 */
export type Access = MethodAccess | 'lifecycle' | 'derive' | 'operator' | 'admin';

/**
 * The scopes a caller acts with on a sandbox: an API key's own; a sandbox's own token those of the
 * key that created it (so a narrowed key cannot widen itself through the token it was handed).
 */
export function scopesOf(caller: Caller, record?: SandboxRecord): readonly Scope[] {
  if (caller.kind === 'operator') return caller.scopes;
  return record?.creatorScopes ?? SCOPE_NAMES;
}

/** Who is asking, and the grant their connection has (computed only when a rule needs it). */
export interface Holder {
  caller: Caller;
  grant(): ConnectionGrant;
  /** The scopes it acts with (see {@link scopesOf}); every scope when absent. */
  scopes?: () => readonly Scope[];
}

interface Rule {
  allows(holder: Required<Holder>): boolean;
  /** Who may, for a REST refusal ("it needs ..."). */
  needs: string;
  /** Why not, naming the method or route and what would be allowed. */
  why(what: string, holder?: Holder): string;
}

const KEY_OR_TOKEN = "the API key or the sandbox's own token";

/**
 * The one authorization model, for every door: each kind of access, who has it. The relay asks it
 * for every WebSocket frame (by the method's access class) and the REST routes ask it by theirs,
 * so a method and the route that does the same thing (`audit.list` and `GET .../audit`,
 * `system.info` and `GET /v1/sandboxes/<id>`) cannot disagree. Paths are the daemon's to check,
 * and the daemon holds the exec and audit lines again from the grant it is handed.
 */
const RULES: { readonly [A in Access]: Rule } = {
  read: { allows: () => true, needs: 'any credential of this sandbox', why: () => '' },
  info: { allows: () => true, needs: 'any credential of this sandbox', why: () => '' },
  derive: { allows: () => true, needs: 'any credential of this sandbox', why: () => '' },
  write: {
    allows: (h) => writableRoots(h.grant().policy).length > 0,
    needs: 'a handle with write access',
    why: (what) => `${what} writes, and this connection's file policy is read-only. Use read calls only, or a handle with write access.`,
  },
  exec: {
    allows: (h) => h.grant().allowExec,
    needs: 'a handle that may run commands',
    why: (what) =>
      `${what} runs a process, and this handle may not run commands (it was derived without allowExec). Use file calls, or a handle derived with allowExec: true.`,
  },
  audit: {
    allows: (h) => h.grant().allowAudit === true,
    needs: KEY_OR_TOKEN,
    why: (what) =>
      `${what} reads the sandbox's whole record of calls (every path and command), which only ${KEY_OR_TOKEN} may read; this handle is a derived one.`,
  },
  lifecycle: {
    allows: (h) => (h.caller.kind === 'operator' || h.caller.kind === 'sandbox') && h.scopes().includes('lifecycle'),
    needs: KEY_OR_TOKEN,
    why: (what, h) =>
      h === undefined || h.caller.kind === 'derived'
        ? `${what} changes the sandbox's life (kill, keepalive, timeout, pause, resume), which only ${KEY_OR_TOKEN} may do; this handle is a derived one.`
        : `${what} changes the sandbox's life, and this key (or the key that created the sandbox) lacks the 'lifecycle' scope.`,
  },
  controller: {
    allows: () => false,
    needs: 'the controller itself',
    why: (what) => `${what} is the controller's own channel to the daemon (the egress relay); no credential may call it.`,
  },
  operator: {
    allows: (h) => h.caller.kind === 'operator',
    needs: 'the API key',
    why: (what) => `${what} acts on the controller, not on one sandbox, and needs the API key.`,
  },
  admin: {
    allows: (h) => h.caller.kind === 'operator' && h.caller.role === 'admin',
    needs: 'an admin API key',
    why: (what) => `${what} spans every tenant (keys, limits, the controller's metrics), and needs an admin key; this one is a member key.`,
  },
};

/**
 * Whether `holder` may use a door of this kind of access: undefined when it may, else why not
 * (a sentence naming `what`, the method or route, and what is allowed instead).
 *
 * @example
 * refusalFor({ caller, grant: () => grant }, METHODS['audit.list'].access, 'audit.list');
 */
export function refusalFor(holder: Holder, access: Access, what: string): string | undefined {
  const rule = RULES[access];
  // A holder that names no scopes acts with its caller's own (an API key's; a token's are its sandbox's, checked by its grant).
  const whole = { scopes: () => scopesOf(holder.caller), ...holder };
  return rule.allows(whole) ? undefined : rule.why(what, holder);
}

/** A REST refusal: FORBIDDEN, saying who may use the route and why this credential may not. */
export function routeRefusal(holder: Holder, access: Access, what: string): CodedError | undefined {
  const why = refusalFor(holder, access, what);
  return why === undefined
    ? undefined
    : new CodedError('FORBIDDEN', `This credential may not use this route; it needs ${RULES[access].needs}. ${why}`, { access });
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
  const expiresAt = mintedExpiry(caller, ttlSeconds === undefined ? undefined : Date.now() + ttlSeconds * 1000);
  const { keyId, ancestors } = mintedFrom(credentials.keys, record, caller);
  const token = credentials.deriveToken({ sandboxId: record.id, grant, expiresAt, keyId, ancestors });
  return expiresAt === undefined ? { token, grant } : { token, grant, expiresAt: new Date(expiresAt).toISOString() };
}

/**
 * When something `caller` mints must stop working (a derived token, a port URL): the end asked
 * for, never later than the end of the caller's own credential; undefined when neither has one.
 * Every door that hands out a credential or a link asks this, so nothing a handle makes outlives it.
 *
 * @example
 * mintedExpiry({ kind: 'derived', sandboxId, grant, expiresAt: t + 3000 }, t + 7 * 86_400_000); // t + 3000
 */
export function mintedExpiry(caller: Caller, requested: number | undefined): number | undefined {
  const own = caller.kind === 'derived' ? caller.expiresAt : undefined;
  if (own === undefined) return requested;
  return requested === undefined ? own : Math.min(requested, own);
}

/** The credentials something minted depends on: it stops working when any of them ends. */
export interface MintedFrom {
  /** The API key behind it: the caller's own, or the one that created the sandbox whose token the caller holds; revoking it ends what was minted. */
  keyId?: string | undefined;
  /** The tokens behind it (the sandbox's own token of that generation, derived ones): rotating or revoking any ends what was minted. */
  ancestors: string[];
}

/**
 * What a thing `caller` mints for `record` (a derived token, a port URL) depends on, so that it
 * lives no longer than the credential that minted it: the key it comes from (the caller's own, or
 * the one that created the sandbox), and the tokens it comes from (a rotated sandbox token, a
 * revoked derived one). Every door that mints asks this, so revocation reaches all it minted.
 *
 * @example
 * mintedFrom(keys, record, { kind: 'sandbox', sandboxId: record.id }); // { keyId: record.creatorKeyId, ancestors: ['wst:<id>:0'] }
 */
export function mintedFrom(keys: Pick<KeyStore, 'sandboxTokenId'>, record: Pick<SandboxRecord, 'id' | 'creatorKeyId'>, caller: Caller): MintedFrom {
  const keyId = caller.kind === 'sandbox' ? record.creatorKeyId : caller.keyId;
  const ancestors =
    caller.kind === 'sandbox'
      ? [keys.sandboxTokenId(record.id)]
      : caller.kind === 'derived'
        ? [...(caller.ancestors ?? []), ...(caller.tokenId === undefined ? [] : [caller.tokenId])]
        : [];
  return { keyId, ancestors };
}

/** Whether something minted from these credentials still stands: its key neither revoked nor expired, none of its tokens revoked. */
export function mintedStands(keys: Pick<KeyStore, 'ended' | 'tokenRevoked'>, from: MintedFrom): boolean {
  return !(from.keyId !== undefined && keys.ended(from.keyId)) && !from.ancestors.some((id) => keys.tokenRevoked(id));
}

/** setTimeout's longest wait; a credential may live longer (a derived token up to 30 days), so waits are chained. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Calls `end` when the caller's credential expires (a derived token with a lifetime, a port URL),
 * so a connection or tunnel it opened does not outlive it; returns what cancels the wait. A
 * credential without an end never calls it. The timer does not keep the process alive.
 *
 * @example
 * const cancel = atCredentialEnd(caller, () => client.close(1008, 'credential expired'));
 * client.once('close', cancel);
 */
export function atCredentialEnd(caller: Caller, end: () => void, now: () => number = Date.now): () => void {
  const at = caller.kind === 'derived' ? caller.expiresAt : undefined;
  if (at === undefined) return () => undefined;
  let timer: NodeJS.Timeout | undefined;
  const arm = () => {
    const left = at - now();
    if (left <= 0) return end();
    timer = setTimeout(arm, Math.min(left, MAX_TIMER_MS));
    timer.unref();
  };
  arm();
  return () => clearTimeout(timer);
}

/**
 * The per-frame check the relay runs on every client frame: a call the one rule table refuses
 * for this connection (by its method's access class) is answered with a FORBIDDEN error frame
 * carrying the request's id, and never reaches the daemon. Paths are the daemon's to check.
 * (The relay itself runs {@link callRefusal} through its `CallGate`, which reads each header once.)
 */
export function callAccessCheck(holder: Holder, metrics?: Metrics): (data: Buffer) => Buffer | undefined {
  return (data) => {
    const header = peekHeader(data);
    return header?.type === 'req' ? callRefusal(holder, header, metrics) : undefined;
  };
}

/**
 * The access check of one request frame's header, already read: undefined when the connection
 * may call its method (or the method is unknown: the daemon answers `UNKNOWN_METHOD`), else the
 * FORBIDDEN error frame to answer, with the request's id, counted in the metrics as refused.
 */
export function callRefusal(holder: Holder, header: Record<string, unknown>, metrics?: Metrics): Buffer | undefined {
  const method = header.method;
  if (typeof method !== 'string' || !isMethodName(method)) return undefined;
  const access = METHODS[method].access;
  const refusal = refusalFor(holder, access, method);
  if (refusal === undefined) return undefined;
  metrics?.calls.inc({ method, outcome: 'refused' });
  metrics?.errors.inc({ code: 'FORBIDDEN', source: 'call' });
  const id = RequestId.safeParse(header.id);
  return encodeFrame({
    type: 'err',
    id: id.success ? id.data : null,
    error: { code: 'FORBIDDEN', message: refusal, details: { method, access } },
  });
}

/**
 * Who a presented credential makes its holder: the operator for the API key, and for a sandbox's
 * own token or a valid derived token of that sandbox, a caller of that sandbox only; undefined
 * when it is none of these. Every door (REST, WebSocket, the E2B gateway) decides by this.
 *
 * @example
 * callerFor(credentials, req.headers['x-access-token'], sandboxId); // { kind: 'sandbox', sandboxId } or undefined
 */
export function callerFor(credentials: Credentials, presented: string, sandboxId: string | undefined): Caller | undefined {
  const principal = credentials.principal(presented);
  if (principal !== undefined) return { kind: 'operator', ...principal };
  if (sandboxId === undefined) return undefined;
  if (credentials.isSandboxToken(sandboxId, presented)) return { kind: 'sandbox', sandboxId };
  const derived = credentials.readDerivedToken(presented);
  if (!derived || derived.sandboxId !== sandboxId || (derived.expiresAt !== undefined && derived.expiresAt <= Date.now())) return undefined;
  // A token lives no longer than the key whose holder minted it, and until it is revoked itself.
  if (derived.tokenId !== undefined && credentials.keys.tokenRevoked(derived.tokenId)) return undefined;
  if (!mintedStands(credentials.keys, { keyId: derived.keyId, ancestors: derived.ancestors ?? [] })) return undefined;
  return {
    kind: 'derived',
    sandboxId,
    grant: derived.grant,
    expiresAt: derived.expiresAt,
    keyId: derived.keyId,
    tokenId: derived.tokenId,
    ...(derived.ancestors?.length ? { ancestors: derived.ancestors } : {}),
  };
}
