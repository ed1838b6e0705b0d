import type { Principal } from './principals.js';
import { CodedError } from '@warren/protocol';
import { UNAUTHORIZED_MESSAGE, type Caller } from '../grants.js';
import { sandboxNotFound, type SandboxRecord } from '../sandbox-table.js';
import type { KeyStore } from './principals.js';

/**
 * Whether a caller may see an object of `tenant`: an admin key sees every tenant's, a member key
 * its own tenant's; a token reaches only the one sandbox it was made for (checked where it is read).
 */
export function seesTenant(caller: Caller, tenant: string): boolean {
  return caller.kind !== 'operator' || caller.role === 'admin' || caller.tenant === tenant;
}

/**
 * The one ownership check of a door that names a sandbox, run once the caller is known and the
 * record found: another tenant's sandbox throws exactly what an id that does not exist throws
 * ({@link sandboxNotFound}: status, code, message and details alike), so ids do not leak; a
 * sandbox's own token ends once the key that created the sandbox is revoked or expired.
 *
 * @example
 * checkReach(credentials.keys, caller, deps.sandboxes.record(id)); // throws SANDBOX_NOT_FOUND for tenant B's key on A's sandbox
 */
export function checkReach(keys: KeyStore, caller: Caller, record: SandboxRecord): void {
  if (!seesTenant(caller, record.tenant)) throw sandboxNotFound(record.id);
  if (caller.kind === 'sandbox' && record.creatorKeyId !== undefined && keys.ended(record.creatorKeyId))
    throw new CodedError('UNAUTHORIZED', UNAUTHORIZED_MESSAGE);
}

/** The tenant whose objects a list shows this caller: a member key's own; undefined (every tenant's) for an admin. */
export function listedTenant(caller: Caller | undefined): string | undefined {
  return caller?.kind === 'operator' && caller.role !== 'admin' ? caller.tenant : undefined;
}

/** The API key calling, for a route of `operator` or `admin` access (which lets no other caller in). */
export function principalOf(caller: Caller | undefined): Principal {
  if (caller?.kind !== 'operator') throw new CodedError('FORBIDDEN', 'This route needs an API key.');
  return caller;
}

/**
 * The tenant a tenant-wide read covers: a member key's own (naming another is FORBIDDEN); for an
 * admin key the one it names with `?tenant=`, or undefined for every tenant.
 */
export function tenantScope(caller: Principal, asked: string | undefined): string | undefined {
  if (caller.role === 'admin') return asked;
  if (asked !== undefined && asked !== caller.tenant)
    throw new CodedError('FORBIDDEN', `A member key sees its own tenant only ('${caller.tenant}'); leave out ?tenant= or use an admin key.`, {
      field: 'tenant',
    });
  return caller.tenant;
}

/** The tenant an admin acted in when it was not its own (for the access log and the audit trail), else undefined. */
export function actedAcross(caller: Caller | undefined, tenant: string | undefined): string | undefined {
  return caller?.kind === 'operator' && tenant !== undefined && caller.tenant !== tenant ? tenant : undefined;
}
