import { CodedError } from '@warren/protocol';

/**
 * Image references as the Docker engine reads them (the grammar of distribution/reference), parsed
 * before anything is pulled so the registry a pull would reach is known, and checked against the
 * operator's allow-list. Pure: no engine, no network.
 */

/** Docker Hub, as every spelling of it is normalised. */
export const DOCKER_HUB = 'docker.io';
/** Names Docker itself treats as Docker Hub (anything else, `registry-1.docker.io` included, is its own registry). */
const HUB_ALIASES = new Set(['docker.io', 'index.docker.io']);

/** One parsed reference. `registry` is lower case, with its port; `path` has `library/` for Docker Hub's official images. */
export interface ImageRef {
  registry: string;
  path: string;
  tag?: string | undefined;
  digest?: string | undefined;
  /** `registry/path[:tag][@digest]`, with `:latest` when neither is given: what is pulled and looked up. */
  canonical: string;
}

const ALNUM = '[a-z0-9]+';
const SEPARATOR = '(?:[._]|__|[-]+)';
const PATH_COMPONENT = new RegExp(`^${ALNUM}(?:${SEPARATOR}${ALNUM})*$`);
const DOMAIN_COMPONENT = /^(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])$/;
const IPV6 = /^\[[a-fA-F0-9:]+\]$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const DIGEST = /^(?:sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$/;
/** A bare image id (`sha256:<hex>`): names an image already on the engine, never pulled. */
export const IMAGE_ID = /^sha256:[a-f0-9]{64}$/;
const MAX_NAME = 255;

/** What every refusal of a reference ends with: what a reference may look like. */
const REFERENCE_FORM =
  'A reference is [registry[:port]/]path[:tag][@sha256:<64 hex>], with a lower-case path of letters, digits and single . _ - (or __) separators, e.g. alpine:3.20, docker.io/library/python:3.12, ghcr.io/org/tool@sha256:...';

function refuse(reference: string, why: string): CodedError {
  const shown = JSON.stringify(reference.slice(0, 300));
  return new CodedError('IMAGE_NOT_ALLOWED', `The image reference ${shown} is refused: ${why}. ${REFERENCE_FORM}.`, { image: reference.slice(0, 300) });
}

/** True when `host[:port]` is a valid registry host (a DNS name, an IPv4 or bracketed IPv6 address, an optional port 1-65535). */
function isRegistryHost(domain: string): boolean {
  const m = /^(.*?)(?::(\d{1,5}))?$/.exec(domain);
  if (!m) return false;
  const [, host = '', port] = m;
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65535 || port.startsWith('0'))) return false;
  if (IPV6.test(host)) return true;
  return host.split('.').every((c) => DOMAIN_COMPONENT.test(c));
}

/**
 * Parses an image reference the way the engine will, refusing (with `IMAGE_NOT_ALLOWED`) anything
 * the grammar does not allow: upper case in the path, empty or `..` parts, whitespace and control
 * characters, URLs (`https://...`), user info (`user@host/...`), bad ports, digests that are not
 * SHA-256/512 in lower-case hex, names over 255 characters, and 64-hex names that would read as ids.
 *
 * @example
 * parseImageRef('alpine'); // { registry: 'docker.io', path: 'library/alpine', canonical: 'docker.io/library/alpine:latest', ... }
 * parseImageRef('localhost:5000/team/app@sha256:' + 'a'.repeat(64)).registry; // 'localhost:5000'
 */
export function parseImageRef(reference: string): ImageRef {
  // eslint-disable-next-line no-control-regex
  if (/[\s\x00-\x1f\x7f]/.test(reference)) throw refuse(reference, 'it has whitespace or control characters');
  if (reference.length === 0 || reference.length > 512) throw refuse(reference, 'it is empty or longer than 512 characters');
  if (reference.includes('://')) throw refuse(reference, 'it is a URL; give the registry host without a scheme');
  let rest = reference;
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest)) throw refuse(reference, 'its digest is not sha256:<64 lower-case hex> (or sha512:<128>)');
  }
  let tag: string | undefined;
  const lastSlash = rest.lastIndexOf('/');
  const colon = rest.lastIndexOf(':');
  if (colon > lastSlash) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) throw refuse(reference, 'its tag is not 1-128 letters, digits, _ . - (not starting with . or -)');
  }
  if (rest.length === 0) throw refuse(reference, 'it has no name');
  if (rest.length > MAX_NAME) throw refuse(reference, `its name is longer than ${MAX_NAME} characters`);
  let domain: string | undefined;
  let remote = rest;
  const slash = rest.indexOf('/');
  if (slash >= 0) {
    const first = rest.slice(0, slash);
    // The engine's rule: a first part with a dot, a colon, upper case, or `localhost` is a registry host.
    if (/[.:]/.test(first) || first === 'localhost' || first !== first.toLowerCase()) {
      domain = first;
      remote = rest.slice(slash + 1);
    }
  }
  if (domain !== undefined && !isRegistryHost(domain)) throw refuse(reference, `'${domain}' is not a registry host[:port]`);
  const components = remote.split('/');
  for (const c of components) {
    if (c === '') throw refuse(reference, 'it has an empty path part (a leading, trailing or double /)');
    if (c !== c.toLowerCase()) throw refuse(reference, `its path part '${c}' has upper case (image names are lower case)`);
    if (!PATH_COMPONENT.test(c)) throw refuse(reference, `its path part '${c}' is not lower-case letters and digits joined by single . _ - or __`);
  }
  if (domain === undefined && components.length === 1 && /^[a-f0-9]{64}$/.test(remote))
    throw refuse(reference, 'a 64-hex name reads as an image id; name an id as sha256:<hex>');
  let registry = (domain ?? DOCKER_HUB).toLowerCase();
  if (HUB_ALIASES.has(registry)) registry = DOCKER_HUB;
  const path = registry === DOCKER_HUB && components.length === 1 ? `library/${remote}` : remote;
  const canonical = `${registry}/${path}${tag !== undefined ? `:${tag}` : digest === undefined ? ':latest' : ''}${digest !== undefined ? `@${digest}` : ''}`;
  return { registry, path, tag, digest, canonical };
}

/** One allow-list entry: a registry, and optionally a path below which images may come from it. */
export interface AllowedRegistry {
  registry: string;
  pathPrefix?: string | undefined;
}

/**
 * Reads the operator's `allowedRegistries` entries (`docker.io`, `ghcr.io/my-org`, `127.0.0.1:5000`):
 * host lower-cased, Docker Hub's aliases folded into `docker.io`. Throws a plain `Error` naming a
 * bad entry (it is configuration, read at start-up).
 *
 * @example
 * parseAllowList(['docker.io/library', 'ghcr.io/acme']); // official images from Docker Hub, and acme's from GHCR
 */
export function parseAllowList(entries: readonly string[]): AllowedRegistry[] {
  return entries.map((entry) => {
    const slash = entry.indexOf('/');
    const host = (slash < 0 ? entry : entry.slice(0, slash)).toLowerCase();
    const prefix = slash < 0 ? undefined : entry.slice(slash + 1).replace(/\/+$/, '');
    if (!isRegistryHost(host)) throw new Error(`allowedRegistries: '${entry}' does not start with a registry host[:port] (e.g. docker.io, ghcr.io/org).`);
    if (prefix !== undefined && (prefix === '' || !prefix.split('/').every((c) => PATH_COMPONENT.test(c))))
      throw new Error(`allowedRegistries: the path of '${entry}' is not a lower-case image path (e.g. ghcr.io/my-org).`);
    return { registry: HUB_ALIASES.has(host) ? DOCKER_HUB : host, pathPrefix: prefix };
  });
}

/** True when the allow-list lets a pull of `ref` happen (path prefixes match whole path parts). */
export function isAllowed(ref: ImageRef, allowed: readonly AllowedRegistry[]): boolean {
  return allowed.some(
    (a) => a.registry === ref.registry && (a.pathPrefix === undefined || ref.path === a.pathPrefix || ref.path.startsWith(`${a.pathPrefix}/`)),
  );
}

/**
 * Throws `IMAGE_NOT_ALLOWED` unless the allow-list lets `ref` be pulled, naming what is allowed.
 *
 * @example
 * checkAllowed(parseImageRef('evil.com/library/alpine'), parseAllowList(['docker.io'])); // throws IMAGE_NOT_ALLOWED
 */
export function checkAllowed(ref: ImageRef, allowed: readonly AllowedRegistry[], original: string): void {
  // Warren's own images (warren/sandbox, warren/e2b-base, ...) are built on the engine, never
  // fetched: a missing one pulled from Docker Hub would be whatever someone published there.
  if (ref.registry === 'docker.io' && ref.path.startsWith('warren/'))
    throw new CodedError(
      'IMAGE_NOT_ALLOWED',
      `The image '${original.slice(0, 300)}' is one of Warren's own, which are built on the engine and never pulled, and it is not on this engine. Build it with scripts/build-images (or docker compose --profile images build).`,
      { image: original.slice(0, 300) },
    );
  if (isAllowed(ref, allowed)) return;
  const list = allowed.map((a) => (a.pathPrefix ? `${a.registry}/${a.pathPrefix}` : a.registry));
  throw new CodedError(
    'IMAGE_NOT_ALLOWED',
    `The image '${original.slice(0, 300)}' is not on the engine and would be pulled from ${ref.registry}/${ref.path}, which this controller does not pull from. ` +
      (list.length === 0
        ? 'This controller pulls nothing (allowedRegistries is empty): use an image already on the engine.'
        : `It pulls only from: ${list.join(', ')}; use an image from one of those, or one already on the engine.`),
    { image: original.slice(0, 300), registry: ref.registry, allowedRegistries: list },
  );
}

/**
 * Checks the name a build gives its image: `name[:tag]` with a lower-case path and no registry
 * host (a built template lives on this engine only, and cannot pose as an image of a registry's
 * host). Throws `INVALID_PARAMS` saying what is allowed; returns the name with `:latest` added
 * when it has no tag.
 *
 * @example
 * buildTag('my-template'); // 'my-template:latest'
 */
export function buildTag(name: string): string {
  const fail = (why: string) =>
    new CodedError(
      'INVALID_PARAMS',
      `The image name ${JSON.stringify(name.slice(0, 300))} is refused: ${why}. A built image is named name[:tag] with a lower-case path and no registry host, e.g. my-template:1 or team/python-tools.`,
    );
  let ref: ImageRef;
  try {
    ref = parseImageRef(name);
  } catch (err) {
    throw fail((err as Error).message.replace(/^.*? is refused: /, '').replace(/\. A reference is .*$/, ''));
  }
  if (ref.digest !== undefined) throw fail('a digest names an existing image, not a new one');
  if (ref.registry !== DOCKER_HUB || /^(?:docker\.io|index\.docker\.io)\//i.test(name)) throw fail('it names a registry host');
  // Warren's own repositories name what only Warren makes (a snapshot's image).
  if (/^(?:library\/)?warren-snapshot\//.test(ref.path)) throw fail("the repository warren-snapshot/ holds Warren's snapshots");
  return name.includes(':') ? name : `${name}:latest`;
}
