import { CodedError } from '@warren/protocol';
import { DOCKER_HUB, parseImageRef, type ImageRef } from '../image-ref.js';

/**
 * Where a member key's builds (`POST /v1/images/build`) are named on the engine:
 * `warren-built/<tenant>/<name>:<tag>`, so two tenants that build `myimg:1` get two images that
 * never meet, and no build of one tenant can tell that a name of another's exists.
 */
export const TENANT_BUILDS_ROOT = 'warren-built';
/** Where E2B templates are named on the engine: `e2b/<tenant>/<name>:<tag>` (see e2b/template-builds/names.ts). */
export const TEMPLATES_ROOT = 'e2b';
/** The roots of names that are tenants' own builds: never pulled, reached by their tenant (and admin keys) only. */
export const TENANT_ROOTS: readonly string[] = [TENANT_BUILDS_ROOT, TEMPLATES_ROOT];

/**
 * A tenant's name as one part of an image path. Tenant names (lowercase letters, digits and `-`,
 * starting with a letter or digit) are path parts as they are, but for a trailing `-`, which the
 * engine refuses: the trailing dashes become `_<how many>` (`acme-` is `acme_1`, `acme--` is
 * `acme_2`). No tenant name has a `_`, so no two tenants ever share a part.
 *
 * @example
 * tenantPathPart('acme'); // 'acme'
 * tenantPathPart('acme-'); // 'acme_1'
 */
export function tenantPathPart(tenant: string): string {
  const trimmed = tenant.replace(/-+$/, '');
  return trimmed === tenant ? tenant : `${trimmed}_${tenant.length - trimmed.length}`;
}

/** The start of every engine name of a tenant's builds: `warren-built/<tenant>/`. */
export function tenantBuildsPrefix(tenant: string): string {
  return `${TENANT_BUILDS_ROOT}/${tenantPathPart(tenant)}/`;
}

/**
 * The engine name of a member's build of `tag` (`name:tag` as `buildTag` checked it):
 * `warren-built/<tenant>/<name>:<tag>`. A tag that already starts with the tenant's own prefix
 * keeps it (a rebuild of a name `GET /v1/images` listed); one under another tenant's prefix, or
 * under any tenants' root, is refused (`INVALID_PARAMS`), without looking at the engine.
 *
 * @example
 * tenantBuildName('acme', 'myimg:1'); // 'warren-built/acme/myimg:1'
 */
export function tenantBuildName(tenant: string, tag: string): string {
  const prefix = tenantBuildsPrefix(tenant);
  if (tag.startsWith(prefix)) return tag;
  if (TENANT_ROOTS.some((root) => tag.startsWith(`${root}/`)))
    throw new CodedError(
      'INVALID_PARAMS',
      `The image name '${tag.slice(0, 200)}' is under ${TENANT_ROOTS.map((r) => `${r}/`).join(' or ')}, where tenants' builds are named; give the name without it (e.g. myimg:1), and this tenant's build is named ${prefix}myimg:1.`,
    );
  const name = `${prefix}${tag}`;
  try {
    parseImageRef(name);
  } catch {
    const room = 255 - prefix.length;
    throw new CodedError(
      'INVALID_PARAMS',
      `The image name '${tag.slice(0, 200)}' is too long: this tenant's builds are named ${prefix}<name>, so <name> has at most ${room} characters before its tag.`,
    );
  }
  return name;
}

/**
 * The engine name of an admin key's build of `tag`: `tag` itself (an operator's image, shared by
 * every tenant), refused (`INVALID_PARAMS`) under a tenants' root, which holds tenants' own builds.
 *
 * @example
 * operatorBuildName('py-tools:1'); // 'py-tools:1'
 */
export function operatorBuildName(tag: string): string {
  if (TENANT_ROOTS.some((root) => tag.startsWith(`${root}/`)))
    throw new CodedError(
      'INVALID_PARAMS',
      `The image name '${tag.slice(0, 200)}' is under ${TENANT_ROOTS.map((r) => `${r}/`).join(' or ')}, where tenants' own builds are named; an admin key's build is shared by every tenant, so give it a name outside them (build a tenant's image with a member key of that tenant).`,
    );
  return tag;
}

/**
 * Whether a reference names an image under a tenants' root (`warren-built/...`, `e2b/...`, in any
 * spelling of Docker Hub): such an image is a tenant's build, on this engine only, and is never pulled.
 */
export function isTenantRootRef(ref: ImageRef): boolean {
  return ref.registry === DOCKER_HUB && TENANT_ROOTS.some((root) => ref.path.startsWith(`${root}/`));
}
