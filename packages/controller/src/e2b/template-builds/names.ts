import type { CreateSandboxRequest, ImageInfo } from '@warren/protocol';
import type { HttpServerDeps } from '../../server-context.js';
import type { Owner } from '../../tenancy/owner.js';
import { tenantPathPart } from '../../tenancy/image-names.js';
import { E2bHttpError } from '../errors.js';

/** The home and working folder of a sandbox made from a built template, as E2B programs expect. */
export const E2B_HOME = '/home/user';
const NAME = /^[a-z0-9]+(?:[._-][a-z0-9]+)*$/;
const TAG = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
/** E2B's tag when a name has none. */
const DEFAULT_TAG = 'default';

/** A template name as E2B writes it: `name` or `name:tag`. */
export function parseTemplateName(text: string): { name: string; tag: string } {
  const colon = text.indexOf(':');
  const name = colon < 0 ? text : text.slice(0, colon);
  const tag = colon < 0 ? DEFAULT_TAG : text.slice(colon + 1);
  if (!NAME.test(name) || name.length > 63)
    throw new E2bHttpError(
      400,
      `'${text.slice(0, 80)}' is not a template name Warren takes: 1-63 lower-case letters and digits, separated by single '.', '_' or '-' (e.g. my-template or my-template:v1).`,
    );
  if (!TAG.test(tag)) throw new E2bHttpError(400, `'${tag.slice(0, 80)}' is not a template tag: letters, digits, '_', '.' and '-', at most 128.`);
  return { name, tag };
}

/**
 * The engine's name for a tenant's built template: `e2b/<tenant>/<name>:<tag>`, so two tenants'
 * templates of one name never meet. The tenant is written as an image path part
 * (`tenantPathPart`: `acme-` is `acme_1`), so every tenant name gives a name the engine takes.
 */
export function templateImage(tenant: string, name: string, tag: string): string {
  return `e2b/${tenantPathPart(tenant)}/${name}:${tag}`;
}

/** A UUID-shaped id from an image id, for E2B's `buildID` of a build listed from the engine. */
export function buildIdOf(imageId: string): string {
  const hex = imageId.replace(/^sha256:/, '').padEnd(32, '0');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

/** The tenant's built images of one template name (every tag), from the engine. */
export async function builtImages(deps: HttpServerDeps, tenant: string, name?: string): Promise<{ info: ImageInfo; name: string; tag: string }[]> {
  const prefix = `e2b/${tenantPathPart(tenant)}/`;
  const found: { info: ImageInfo; name: string; tag: string }[] = [];
  for (const info of await deps.sandboxes.images.list(tenant))
    for (const full of info.tags) {
      if (!full.startsWith(prefix)) continue;
      const [n, t] = full.slice(prefix.length).split(':') as [string, string | undefined];
      if (name === undefined || n === name) found.push({ info, name: n, tag: t ?? 'latest' });
    }
  return found;
}

/**
 * The create request of a template this tenant built through E2B's API (`Sandbox.create('<name>')`),
 * or undefined when it built none of that name and tag. A member or admin key reaches its own
 * tenant's templates only.
 */
export async function builtTemplate(deps: HttpServerDeps, owner: Owner | undefined, templateID: string): Promise<CreateSandboxRequest | undefined> {
  if (owner === undefined) return undefined;
  let parsed: { name: string; tag: string };
  try {
    parsed = parseTemplateName(templateID);
  } catch {
    return undefined;
  }
  const image = templateImage(owner.tenant, parsed.name, parsed.tag);
  const found = (await builtImages(deps, owner.tenant, parsed.name)).some((b) => b.info.tags.includes(image));
  return found ? { image, workspace: E2B_HOME } : undefined;
}
