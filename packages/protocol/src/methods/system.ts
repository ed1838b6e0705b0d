import { z } from 'zod';
import type { MethodSpec } from '../method-spec.js';

export const SystemInfoParams = z.strictObject({});
export const SystemInfoResult = z.strictObject({
  agentVersion: z.string(),
  protocolVersion: z.number().int(),
  pid: z.number().int(),
  uid: z.number().int(),
  rssBytes: z.number().int().nonnegative(),
  uptimeMs: z.number().nonnegative(),
  /** The Node version the daemon runs on (`v24.22.3`); absent from older daemons. */
  nodeVersion: z.string().optional(),
});

export const SystemUsageParams = z.strictObject({});
/**
 * What the sandbox's container uses, read by the daemon from its own cgroup (`/sys/fs/cgroup`, v1
 * or v2) and network namespace, for providers whose engine gives the controller no stats (the
 * Kubernetes provider without a metrics pipeline). Limits are absent when none is set.
 */
export const SystemUsageResult = z.strictObject({
  cgroup: z.enum(['v1', 'v2']),
  cpuSeconds: z.number().nonnegative(),
  memoryBytes: z.number().int().nonnegative(),
  memoryLimitBytes: z.number().int().nonnegative().optional(),
  memoryPeakBytes: z.number().int().nonnegative().optional(),
  pids: z.number().int().nonnegative(),
  pidsLimit: z.number().int().nonnegative().optional(),
  network: z.strictObject({ rxBytes: z.number().int().nonnegative(), txBytes: z.number().int().nonnegative() }).optional(),
  /** Bytes the workspace's files take (allocated blocks, links not followed); absent when it holds too many entries to count quickly. */
  workspaceBytes: z.number().int().nonnegative().optional(),
});

export const SYSTEM_METHODS = {
  'system.info': { params: SystemInfoParams, result: SystemInfoResult, access: 'info', idempotent: true },
  'system.usage': { params: SystemUsageParams, result: SystemUsageResult, access: 'info', idempotent: true },
} as const satisfies Record<string, MethodSpec>;
