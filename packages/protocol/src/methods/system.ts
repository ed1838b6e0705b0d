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
});

export const SYSTEM_METHODS = {
  'system.info': { params: SystemInfoParams, result: SystemInfoResult, access: 'info', idempotent: true },
} as const satisfies Record<string, MethodSpec>;
