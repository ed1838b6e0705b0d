import type { Caller } from '../grants.js';
import { DEFAULT_TENANT, SCOPE_NAMES, type Role, type Scope } from './principals.js';

/**
 * Who a new object belongs to: the tenant of the key that made it, and that key (for the
 * attribution of what it does, and so that revoking the key ends the tokens it was handed).
 */
export interface Owner {
  tenant: string;
  keyId: string;
  /** The key's scopes when it has fewer than all: a sandbox it creates hands its token no more. */
  scopes?: Scope[] | undefined;
  /** The key's role: a member's create may start only its own tenant's built images. */
  role?: Role | undefined;
}

/** The owner of what `caller` makes: an API key's tenant and id; undefined for any token (tokens make no tenant objects). */
export function ownerOf(caller: Caller | undefined): Owner | undefined {
  if (caller?.kind !== 'operator') return undefined;
  const narrowed = caller.scopes.length < SCOPE_NAMES.length;
  return { tenant: caller.tenant, keyId: caller.keyId, role: caller.role, ...(narrowed ? { scopes: [...caller.scopes] } : {}) };
}

/** The tenant of an owner, or {@link DEFAULT_TENANT} for what is made without one (the warm pool, embedding). */
export function tenantOf(owner: Owner | undefined): string {
  return owner?.tenant ?? DEFAULT_TENANT;
}
