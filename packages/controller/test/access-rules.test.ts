import { DEFAULT_ADMIN, DEFAULT_MEMBER_SCOPES } from '../src/tenancy/principals.js';
import { describe, expect, it } from '@jest/globals';
import { decodeFrame, encodeFrame, METHODS, type ConnectionGrant, type MethodName } from '@warren/protocol';
import { atCredentialEnd, callAccessCheck, grantFor, mintedExpiry, routeRefusal, type Access, type Caller, type Holder } from '../src/grants.js';
import { portLinkCaller } from '../src/ports/port-links.js';
import type { SandboxRecord } from '../src/sandboxes.js';

const policy = { root: '/workspace', readOnly: false };
const holders: Record<string, Holder> = {
  'API key': { caller: { kind: 'operator', ...DEFAULT_ADMIN }, grant: () => ({ policy, allowExec: true, allowAudit: true }) },
  'sandbox token': { caller: { kind: 'sandbox', sandboxId: 's' }, grant: () => ({ policy, allowExec: true, allowAudit: true }) },
  'member key': {
    caller: { kind: 'operator', ...DEFAULT_ADMIN, role: 'member', tenant: 'acme', scopes: DEFAULT_MEMBER_SCOPES },
    grant: () => ({ policy, allowExec: true, allowAudit: true }),
  },
  // grantFor gives a key without exec and files:write a read-only grant without exec.
  'member key, read-only scopes': {
    caller: { kind: 'operator', ...DEFAULT_ADMIN, role: 'member', tenant: 'acme', scopes: ['snapshots'] },
    grant: () => ({ policy: { root: '/workspace', readOnly: true }, allowExec: false, allowAudit: true }),
    scopes: () => ['snapshots'],
  },
  'derived, read-only, no exec': derived({ policy: { root: '/workspace', readOnly: true }, allowExec: false }),
  'derived, read-write, exec': derived({ policy, allowExec: true }),
};

function derived(grant: ConnectionGrant): Holder {
  const caller: Caller = { kind: 'derived', sandboxId: 's', grant };
  return { caller, grant: () => grant };
}

/** Who may use each kind of access, written out by hand: the table the code must match. */
const EXPECTED: Record<Access, string[]> = {
  read: ['API key', 'sandbox token', 'member key', 'member key, read-only scopes', 'derived, read-only, no exec', 'derived, read-write, exec'],
  info: ['API key', 'sandbox token', 'member key', 'member key, read-only scopes', 'derived, read-only, no exec', 'derived, read-write, exec'],
  derive: ['API key', 'sandbox token', 'member key', 'member key, read-only scopes', 'derived, read-only, no exec', 'derived, read-write, exec'],
  write: ['API key', 'sandbox token', 'member key', 'derived, read-write, exec'],
  exec: ['API key', 'sandbox token', 'member key', 'derived, read-write, exec'],
  audit: ['API key', 'sandbox token', 'member key', 'member key, read-only scopes'],
  lifecycle: ['API key', 'sandbox token', 'member key'],
  operator: ['API key', 'member key', 'member key, read-only scopes'],
  admin: ['API key'],
  controller: [],
};

describe('one rule table for every door', () => {
  it('every WebSocket method is allowed or refused per frame exactly as its access class says, with the request id', () => {
    for (const [name, holder] of Object.entries(holders)) {
      const check = callAccessCheck(holder);
      for (const method of Object.keys(METHODS) as MethodName[]) {
        const access = METHODS[method].access;
        const refusal = check(encodeFrame({ type: 'req', id: `${method}-1`, method, params: {} }));
        const allowed = EXPECTED[access].includes(name);
        expect([name, method, refusal === undefined]).toEqual([name, method, allowed]);
        if (refusal)
          expect(decodeFrame(refusal).header).toMatchObject({ type: 'err', id: `${method}-1`, error: { code: 'FORBIDDEN', details: { method, access } } });
      }
    }
  });

  it('every REST kind of access decides by the same table, and a method and its route agree', () => {
    for (const [name, holder] of Object.entries(holders)) {
      for (const access of Object.keys(EXPECTED) as Access[]) {
        const refusal = routeRefusal(holder, access, 'the route');
        expect([name, access, refusal === undefined]).toEqual([name, access, EXPECTED[access].includes(name)]);
        if (refusal) expect(refusal.message).toMatch(/^This credential may not use this route; it needs .+\. the route /);
      }
      const ws = (method: MethodName) => callAccessCheck(holder)(encodeFrame({ type: 'req', id: 1, method, params: {} })) === undefined;
      expect([name, ws('audit.list')]).toEqual([name, routeRefusal(holder, 'audit', 'GET audit') === undefined]);
      expect([name, ws('system.info')]).toEqual([name, routeRefusal(holder, 'info', 'GET sandbox') === undefined]);
    }
  });

  it('a derived token never carries the audit right, whatever it was signed with', () => {
    const record = { policy } as unknown as SandboxRecord;
    const caller: Caller = { kind: 'derived', sandboxId: 's', grant: { policy, allowExec: true, allowAudit: true } };
    const grant = grantFor(record, caller);
    expect(grant.allowAudit).toBeUndefined();
    expect(routeRefusal({ caller, grant: () => grant }, 'audit', 'GET audit')).toBeDefined();
  });
});

describe('what a handle mints ends with it, and reaches no further than it', () => {
  const grant = { policy, allowExec: true };
  const shortLived: Caller = { kind: 'derived', sandboxId: 's', grant, expiresAt: 10_000 };

  it('caps a minted expiry at the minting credential’s own end, and leaves the others what they asked for', () => {
    expect(mintedExpiry(shortLived, 7 * 86_400_000)).toBe(10_000);
    expect(mintedExpiry(shortLived, undefined)).toBe(10_000);
    expect(mintedExpiry(shortLived, 5_000)).toBe(5_000);
    expect(mintedExpiry({ kind: 'derived', sandboxId: 's', grant }, 7 * 86_400_000)).toBe(7 * 86_400_000);
    expect(mintedExpiry({ kind: 'sandbox', sandboxId: 's' }, 123)).toBe(123);
    expect(mintedExpiry({ kind: 'operator', ...DEFAULT_ADMIN }, undefined)).toBeUndefined();
  });

  it('calls the end when the credential ends, not early for one past setTimeout’s limit, and never for a credential without one', async () => {
    let ended = 0;
    atCredentialEnd(
      shortLived,
      () => ended++,
      () => 10_000,
    );
    expect(ended).toBe(1);
    // 40 days is past setTimeout's 24.8: a single timer would fire at once (Node's overflow rule).
    const cancel = atCredentialEnd(
      { ...shortLived, expiresAt: 40 * 86_400_000 },
      () => ended++,
      () => 0,
    );
    const none = atCredentialEnd({ kind: 'operator', ...DEFAULT_ADMIN }, () => ended++);
    await new Promise((r) => setTimeout(r, 20));
    cancel();
    none();
    expect(ended).toBe(1);
  });

  it('gives a port link’s holder exec for the tunnel and no file at all', () => {
    const record = { id: 's', policy: { root: '/workspace', readOnly: false } } as unknown as SandboxRecord;
    const caller = portLinkCaller(record, { expiresAt: 10_000, from: { ancestors: [] } });
    const linkGrant = grantFor(record, caller);
    expect(linkGrant.allowExec).toBe(true);
    expect(linkGrant.allowAudit).toBeUndefined();
    expect(linkGrant.policy).toMatchObject({ readOnly: true, restrict: { read: [], write: [] } });
    expect(routeRefusal({ caller, grant: () => linkGrant }, 'write', 'fs.write')).toBeDefined();
    expect(routeRefusal({ caller, grant: () => linkGrant }, 'lifecycle', 'kill')).toBeDefined();
  });
});
