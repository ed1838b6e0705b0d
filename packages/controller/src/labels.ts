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
  /** The tenant the sandbox belongs to; a warm-pool member gets its tenant at claim time (the record store keeps it). */
  tenant: 'warren.tenant',
  /** The id of the API key that created the sandbox: its token ends when that key is revoked. */
  creatorKey: 'warren.creator-key',
  /** The creating key's scopes, comma-separated, when it had fewer than all: the sandbox's token acts with no more. */
  creatorScopes: 'warren.creator-scopes',
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
  tenant?: string | undefined;
  creatorKeyId?: string | undefined;
  creatorScopes?: readonly string[] | undefined;
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
  if (input.tenant !== undefined) labels[LABELS.tenant] = input.tenant;
  if (input.creatorKeyId !== undefined) labels[LABELS.creatorKey] = input.creatorKeyId;
  if (input.creatorScopes !== undefined) labels[LABELS.creatorScopes] = input.creatorScopes.join(',');
  for (const [key, value] of Object.entries(input.labels)) labels[`${LABELS.userPrefix}${key}`] = value;
  return labels;
}

/** The prefix of every label Warren reads on a sandbox's container. */
export const WARREN_LABEL_PREFIX = 'warren.';

/**
 * The value of a label that is not set. The engine merges an image's labels under its container's,
 * so each of Warren's labels that the image carries and the sandbox does not set is given this
 * value at create ({@link containerLabels}), and {@link withoutUnset} drops it when labels are read.
 */
export const UNSET_LABEL = 'warren:unset';

/**
 * The labels to create a sandbox's container with: the sandbox's own, and every label under
 * {@link WARREN_LABEL_PREFIX} that the image carries (`imageLabels`) and the sandbox does not set,
 * marked {@link UNSET_LABEL}. So only Warren speaks for Warren: an image built with
 * `LABEL warren.policy=... warren.pool=1 warren.label.team=x` (or a snapshot's image, which keeps
 * the labels of the sandbox it was taken of) gives a sandbox none of them, not even once a
 * restarted controller rebuilds its records from the container's labels.
 *
 * @example
 * containerLabels({ 'warren.pool': '1', maintainer: 'me' }, { 'warren.sandbox': 'abc' });
 * // { 'warren.sandbox': 'abc', 'warren.pool': 'warren:unset' }
 */
export function containerLabels(imageLabels: Record<string, string>, labels: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = { ...labels };
  for (const key of Object.keys(imageLabels)) if (key.startsWith(WARREN_LABEL_PREFIX) && !Object.hasOwn(out, key)) out[key] = UNSET_LABEL;
  return out;
}

/**
 * A container's labels without those set to {@link UNSET_LABEL}.
 *
 * @example
 * withoutUnset({ 'warren.sandbox': 'abc', 'warren.pool': 'warren:unset' }); // { 'warren.sandbox': 'abc' }
 */
export function withoutUnset(labels: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(labels).filter(([, value]) => value !== UNSET_LABEL));
}
