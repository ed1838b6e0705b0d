import type { TenantReport } from '@warren/protocol';
import type { HttpServerDeps } from '../server-context.js';

/** A tenant's live sandboxes, snapshots and volumes, and its creates in the last minute, beside its limits. */
export function tenantReport(deps: HttpServerDeps, tenant: string): TenantReport {
  const { launcher } = deps.sandboxes;
  const sandboxes = launcher.usageOf(tenant);
  const snapshots = deps.snapshots?.store.list(tenant) ?? [];
  return {
    tenant,
    usage: {
      ...sandboxes,
      snapshots: snapshots.length,
      snapshotMb: Math.ceil(snapshots.reduce((sum, s) => sum + s.sizeBytes, 0) / (1024 * 1024)),
      volumes: deps.volumes?.count(tenant) ?? 0,
      createsLastMinute: launcher.tenants.createsLastMinute(tenant),
    },
    limits: launcher.tenants.limitsOf(tenant),
  };
}
