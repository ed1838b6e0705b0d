import { z } from 'zod';

/** Labels are caller metadata; keys and values are bounded so they fit Docker's label limits. */
const LabelMap = z.record(z.string().regex(/^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$/, 'label keys are 1-63 letters, digits, . _ -'), z.string().max(256));

/** `POST /v1/sandboxes`: what a caller may ask for. Everything has a safe default. */
export const CreateSandboxRequest = z.strictObject({
  /** Any linux/amd64 image with /bin/sh; the controller's default image when absent. */
  image: z.string().min(1).max(256).optional(),
  env: z.record(z.string().min(1).max(256).regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'env names are letters, digits and _'), z.string().max(32 * 1024)).optional(),
  /** Seconds until the reaper kills the sandbox. */
  ttlSeconds: z.number().int().min(10).max(7 * 24 * 3600).optional(),
  labels: LabelMap.optional(),
});
export type CreateSandboxRequest = z.input<typeof CreateSandboxRequest>;

export const SandboxState = z.enum(['running', 'paused', 'exited', 'gone']);
export type SandboxState = z.infer<typeof SandboxState>;

/** A sandbox as the REST API describes it. Its token appears only in the create answer. */
export const SandboxInfo = z.strictObject({
  id: z.string(),
  state: SandboxState,
  image: z.string(),
  createdAt: z.string(),
  expiresAt: z.string(),
  labels: z.record(z.string(), z.string()),
});
export type SandboxInfo = z.infer<typeof SandboxInfo>;

export const CreateSandboxResponse = SandboxInfo.extend({
  /** Reaches this sandbox only; present it as `Authorization: Bearer <token>` on connect. */
  token: z.string(),
  /** Milliseconds from the request to the daemon's first answer. */
  readyMs: z.number().nonnegative(),
});
export type CreateSandboxResponse = z.infer<typeof CreateSandboxResponse>;

/** The body of every REST error answer. */
export const RestErrorBody = z.strictObject({
  error: z.strictObject({
    code: z.string(),
    message: z.string(),
    suggestion: z.string(),
    details: z.record(z.string(), z.unknown()).optional(),
  }),
});
export type RestErrorBody = z.infer<typeof RestErrorBody>;

/** The REST paths, in one place for the controller's router and the SDK's client. */
export const REST_PATHS = {
  healthz: '/healthz',
  sandboxes: '/v1/sandboxes',
  sandbox: (id: string) => `/v1/sandboxes/${encodeURIComponent(id)}`,
  connect: (id: string) => `/v1/sandboxes/${encodeURIComponent(id)}/connect`,
} as const;
