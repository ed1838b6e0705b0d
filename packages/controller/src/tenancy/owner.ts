import { z } from 'zod';
import type { Caller } from '../grants.js';
import { DEFAULT_TENANT, SCOPE_NAMES, TenantName, type Role, type Scope } from './principals.js';
import { tenantScope } from './reach.js';

/** The query of a route an admin key may aim at another tenant's objects (`?tenant=`). */
export const TenantQuery = z.object({ tenant: TenantName.optional() });
/** What `?tenant=` means on the routes that take it, for the OpenAPI document. */
export const ASKED_TENANT = "Another tenant's (admin keys only; a member key may name only its own).";

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

/**
 * The owner `caller` acts as on a tenant's objects (snapshots, volumes): its own tenant, or, for
 * an admin key, the tenant it names with `?tenant=`. A member key naming another tenant is FORBIDDEN.
 *
 * @example
 * snapshots.list(ownerIn(caller, query.tenant)); // an admin's ?tenant=acme lists acme's snapshots
 */
export function ownerIn(caller: Caller | undefined, asked: string | undefined): Owner | undefined {
  const owner = ownerOf(caller);
  if (owner === undefined || asked === undefined || caller?.kind !== 'operator') return owner;
  return { ...owner, tenant: tenantScope(caller, asked) ?? owner.tenant };
}

/** The tenant of an owner, or {@link DEFAULT_TENANT} for what is made without one (the warm pool, embedding). */
export function tenantOf(owner: Owner | undefined): string {
  return owner?.tenant ?? DEFAULT_TENANT;
}
