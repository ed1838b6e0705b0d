import type { Caller } from '../grants.js';
import { DEFAULT_TENANT } from './principals.js';

/**
 * Who a new object belongs to: the tenant of the key that made it, and that key (for the
 * attribution of what it does, and so that revoking the key ends the tokens it was handed).
 */
export interface Owner {
  tenant: string;
  keyId: string;
}

/** The owner of what `caller` makes: an API key's tenant and id; undefined for any token (tokens make no tenant objects). */
export function ownerOf(caller: Caller | undefined): Owner | undefined {
  return caller?.kind === 'operator' ? { tenant: caller.tenant, keyId: caller.keyId } : undefined;
}

/** The tenant of an owner, or {@link DEFAULT_TENANT} for what is made without one (the warm pool, embedding). */
export function tenantOf(owner: Owner | undefined): string {
  return owner?.tenant ?? DEFAULT_TENANT;
}
