import { CodedError } from '@warren/protocol';
import { scopesOf, type Caller } from '../grants.js';
import type { SandboxPlan } from '../sandbox-plan.js';
import type { SandboxRecord } from '../sandbox-table.js';
import { SCOPES, type Scope } from './principals.js';

/** The refusal of an act a key's scopes do not cover (FORBIDDEN, naming the scope and what it allows). */
export function missingScope(scope: Scope, what: string): CodedError {
  return new CodedError('FORBIDDEN', `${what} needs the '${scope}' scope (${SCOPES[scope]}), which this key does not have. Ask an admin for a key with it.`, {
    scope,
  });
}

/** Throws {@link missingScope} when `caller` (an API key, or a sandbox's token acting with its creator's scopes) lacks `scope`. */
export function requireScope(caller: Caller, scope: Scope, what: string, record?: SandboxRecord): void {
  if (caller.kind === 'derived') return;
  if (!scopesOf(caller, record).includes(scope)) throw missingScope(scope, what);
}

/**
 * The scopes a create needs beyond `sandboxes:create`: `network:bridge` for Docker's bridge, and
 * `egress:open` for egress mode open. Checked on every create (REST, E2B, snapshots, forks), from
 * the owner's scopes (absent: all).
 */
export function checkCreateScopes(plan: SandboxPlan): void {
  const scopes = plan.owner?.scopes;
  if (scopes === undefined) return;
  const need = (scope: Scope, what: string) => {
    if (!scopes.includes(scope)) throw missingScope(scope, what);
  };
  need('sandboxes:create', 'Creating a sandbox');
  if (plan.settings.network === 'bridge') need('network:bridge', "A sandbox on Docker's bridge network");
  if (plan.egress?.mode === 'open') need('egress:open', "A sandbox with egress mode 'open'");
}
