import type { SandboxSettings } from '@warren/protocol';

/** Labels Warren sets on every sandbox (container labels on Docker); the controller's whole state lives in these. */
export const LABELS = {
  sandbox: 'warren.sandbox',
  /** The instance id of the controller that made the container (derived from its master key). */
  owner: 'warren.owner',
  image: 'warren.image',
  createdAt: 'warren.created-at',
  expiresAt: 'warren.expires-at',
  /** JSON of the settings after defaults (resources, network, runtime, user, workdir, mounts). */
  settings: 'warren.settings',
  /** JSON of the sandbox's base file policy, when the create set one. */
  policy: 'warren.policy',
  /** Set on warm-pool members; their public id is given at claim time (see pool.ts). */
  pool: 'warren.pool',
  userPrefix: 'warren.label.',
} as const;

/**
 * The labels of a sandbox: identity, owner, expiry and settings, so a restarted
 * controller rebuilds its table from Docker alone.
 */
export function sandboxLabels(input: {
  id: string;
  owner: string;
  image: string;
  createdAt: Date;
  expiresAt: Date;
  settings: SandboxSettings;
  policy?: unknown;
  labels: Record<string, string>;
  pool?: boolean;
}): Record<string, string> {
  const labels: Record<string, string> = {
    [LABELS.sandbox]: input.id,
    [LABELS.owner]: input.owner,
    [LABELS.image]: input.image,
    [LABELS.createdAt]: input.createdAt.toISOString(),
    [LABELS.expiresAt]: input.expiresAt.toISOString(),
    [LABELS.settings]: JSON.stringify(input.settings),
  };
  if (input.policy !== undefined) labels[LABELS.policy] = JSON.stringify(input.policy);
  if (input.pool) labels[LABELS.pool] = '1';
  for (const [key, value] of Object.entries(input.labels)) labels[`${LABELS.userPrefix}${key}`] = value;
  return labels;
}
