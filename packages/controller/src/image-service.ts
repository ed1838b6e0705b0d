import { DEFAULT_TENANT } from './tenancy/principals.js';
import { isTenantRootRef, TENANT_ROOTS, tenantBuildsPrefix } from './tenancy/image-names.js';
import path from 'node:path';
import { CodedError, readCheckedTar, type ImageInfo } from '@warren/protocol';
import type { ImageSettings } from './config.js';
import { checkOnBuildTriggers, dockerfileNeeds } from './dockerfile-check.js';
import { buildTag, checkAllowed, IMAGE_ID, parseAllowList, parseImageRef, type AllowedRegistry } from './image-ref.js';
import { Slots } from './limiter.js';
import type { Logger } from './logger.js';
import { requireCapability, type ImageCapability, type PullProgress, type SandboxProvider } from './provider.js';

/** The label on every image Warren built; its value is when. `GET /v1/images` lists these, and only these may be removed through Warren. */
export const BUILD_LABEL = 'warren.build';

/**
 * The label naming the tenant whose key built an image (docs/tenancy.md): a member key lists,
 * removes, replaces and starts sandboxes from its own tenant's builds only. Builds from before
 * tenants have none and belong to the tenant `default`. Warren sets it on the build, over any
 * `LABEL` of the same name in the Dockerfile.
 */
export const BUILD_TENANT_LABEL = 'warren.build-tenant';

/**
 * The value of {@link BUILD_TENANT_LABEL} on an admin key's build through `POST /v1/images/build`:
 * an operator's image, named as asked (no tenant prefix) and usable by every tenant, like the
 * images the operator pulled or put on the engine. No tenant name can be `*`.
 */
export const SHARED_BUILD = '*';

/** The tenant a Warren-built image belongs to ({@link SHARED_BUILD} for an operator's), from its labels; undefined for an image Warren did not build. */
function builtFor(labels: Record<string, string>): string | undefined {
  if (labels[BUILD_LABEL] === undefined) return undefined;
  return labels[BUILD_TENANT_LABEL] ?? DEFAULT_TENANT;
}

/** One pull under way, shared by every caller that asked for the same image meanwhile. */
interface Pull {
  done: Promise<void>;
  listeners: Set<(p: PullProgress) => void>;
}

export interface ImageServiceOptions {
  provider: SandboxProvider;
  settings: ImageSettings;
  logger?: Logger | undefined;
  /** Builds that run at once (each holds its context in memory); 2 by default. */
  buildsAtOnce?: number | undefined;
  /** Builds that may wait for one of those; more are refused at once (`RESOURCE_EXHAUSTED`). 4 by default. */
  buildsWaiting?: number | undefined;
}

/** What a pull or a build tells its caller as it goes. */
export interface ImageWatch {
  /** Called once every check passed and the long part starts (a streamed answer sends its status here). */
  onStart?: (() => void) | undefined;
  onProgress?: ((p: PullProgress) => void) | undefined;
  onOutput?: ((text: string) => void) | undefined;
  signal?: AbortSignal | undefined;
}

/**
 * Images on demand: makes sure the image a create names is on the engine (pulling it when it is
 * missing and its registry is allowed), pulls ahead with progress, and builds templates from a
 * checked context. Concurrent requests for the same missing image share one pull.
 *
 * @example
 * const images = new ImageService({ provider, settings: config.images, logger });
 * await images.ensure('python:3.12-slim'); // pulled from docker.io if the engine lacks it
 */
export class ImageService {
  private readonly provider: SandboxProvider;
  readonly settings: ImageSettings;
  private readonly allowed: AllowedRegistry[];
  private readonly logger: Logger | undefined;
  private readonly pulls = new Map<string, Pull>();
  private readonly buildSlots: Slots;
  private readonly buildsWaiting: number;
  /** Images (by name as the Dockerfile writes it, and by id) that builds under way start or copy from, with how many. */
  private readonly inUse = new Map<string, number>();

  constructor(options: ImageServiceOptions) {
    this.provider = options.provider;
    this.settings = options.settings;
    this.allowed = parseAllowList(options.settings.allowedRegistries);
    this.logger = options.logger;
    this.buildSlots = new Slots(options.buildsAtOnce ?? 2);
    this.buildsWaiting = options.buildsWaiting ?? 4;
  }

  /**
   * Runs one build's work (reading its context, then {@link ImageService.build}) in one of the
   * build slots: a few builds at once, a few more waiting, and the rest refused with
   * `RESOURCE_EXHAUSTED` and a retry time, so uploads cannot pile up in memory.
   */
  async withBuildSlot<T>(work: () => Promise<T>): Promise<T> {
    return this.buildSlots.run(work, {
      maxWaiting: this.buildsWaiting,
      timeoutMs: this.settings.timeoutMs,
      refuse: (why) =>
        new CodedError(
          'RESOURCE_EXHAUSTED',
          why === 'queue-full'
            ? `This controller is already running and queueing as many builds as it takes (${this.buildSlots.busy} running, ${this.buildsWaiting} waiting); retry in a minute.`
            : `This build waited ${this.settings.timeoutMs} ms (images.timeoutMs) for a build slot and gave up; retry in a minute.`,
          { retryAfterSeconds: 60 },
        ),
    });
  }

  /** The allow-list as configured, for `/readyz` and error messages. */
  get allowedRegistries(): readonly string[] {
    return this.settings.allowedRegistries;
  }

  /**
   * Makes sure `image` is on the engine: an image already there is used as it is (whatever its
   * name); a missing one is pulled when `images.pull` is `missing` and its registry is allowed,
   * else refused with `IMAGE_NOT_ALLOWED` before anything is fetched. Resolves with whether it
   * was pulled.
   */
  async ensure(image: string, watch: ImageWatch = {}, tenant?: string): Promise<{ pulled: boolean }> {
    if (tenant !== undefined) await this.checkUsable(image, tenant);
    if (IMAGE_ID.test(image)) {
      if (await this.has(image)) return { pulled: false };
      throw new CodedError('IMAGE_NOT_ALLOWED', `No image with the id ${image} is on the engine, and an id cannot be pulled; name the image by reference.`, {
        image,
      });
    }
    const ref = parseImageRef(image);
    if (await this.has(image)) return { pulled: false };
    // A tenant's build exists on this engine or nowhere: never fetched from a registry of that name.
    if (isTenantRootRef(ref)) throw notForTenant(image);
    if (this.settings.pull === 'never')
      throw new CodedError(
        'IMAGE_NOT_ALLOWED',
        `The image '${image}' is not on the engine, and this controller pulls nothing (images.pull is never); use an image already on the engine, or build one with warren images build.`,
        { image },
      );
    checkAllowed(ref, this.allowed, image);
    // A digest pins the content: pull by it alone (the engine ignores the tag of `name:tag@digest`).
    const target = ref.digest !== undefined ? `${ref.registry}/${ref.path}@${ref.digest}` : ref.canonical;
    watch.onStart?.();
    await this.join(target, watch.onProgress);
    return { pulled: true };
  }

  /**
   * Refuses another tenant's build to a member key's tenant (`tenant`) with {@link notForTenant},
   * and a name under a tenants' root that is on the engine for no one with the very same refusal,
   * at the same point, so another tenant's builds are not told from names that do not exist. Operators' builds ({@link SHARED_BUILD}) are usable by all.
   */
  private async checkUsable(image: string, tenant: string): Promise<void> {
    const info = await this.provider.images?.inspect(image).catch(() => undefined);
    if (info === undefined && this.provider.images !== undefined && isTenantRootName(image)) throw notForTenant(image);
    const owner = info === undefined ? undefined : builtFor(info.labels);
    if (owner !== undefined && owner !== SHARED_BUILD && owner !== tenant) throw notForTenant(image);
  }

  /**
   * The image a member key of `tenant` means by `image`: its own tenant's build of that name
   * (`warren-built/<tenant>/<name>:<tag>`) when there is one, else `image` as it is (an operator's
   * or a pulled image, or a full name). Only this tenant's prefix is looked at, so the answer says
   * nothing of other tenants' builds.
   *
   * @example
   * await images.resolve('myimg:1', 'acme'); // 'warren-built/acme/myimg:1' once acme built myimg:1
   */
  async resolve(image: string, tenant: string): Promise<string> {
    let tag: string;
    try {
      tag = buildTag(image);
    } catch {
      return image;
    }
    if (TENANT_ROOTS.some((root) => tag.startsWith(`${root}/`))) return image;
    const own = `${tenantBuildsPrefix(tenant)}${tag}`;
    const info = await this.provider.images?.inspect(own).catch(() => undefined);
    return info !== undefined && builtFor(info.labels) === tenant ? own : image;
  }

  /** Whether `image` can start without a pull here: always, on a backend that fetches images itself (no images capability). */
  private async has(image: string): Promise<boolean> {
    return this.provider.images ? this.provider.images.has(image) : true;
  }

  /** Joins the pull of `target` under way, or starts it. */
  private async join(target: string, onProgress: ((p: PullProgress) => void) | undefined): Promise<void> {
    let pull = this.pulls.get(target);
    if (!pull) {
      // The caller listens before the pull starts, so it sees the first line too.
      const listeners = new Set<(p: PullProgress) => void>(onProgress ? [onProgress] : []);
      const started = performance.now();
      this.logger?.info({ image: target }, 'image.pull.started');
      const done = requireCapability(this.provider, 'images', `pull ${target}`)
        .pull(target, {
          maxBytes: this.settings.maxPullMb * 1024 * 1024,
          signal: AbortSignal.timeout(this.settings.timeoutMs),
          onProgress: (p) => {
            if (p.status === 'Pull complete' || p.status === 'Already exists' || p.status.startsWith('Digest:') || p.status.startsWith('Status:'))
              this.logger?.info({ image: target, layer: p.layer, status: p.status }, 'image.pull.progress');
            else this.logger?.debug({ image: target, ...p }, 'image.pull.progress');
            for (const listener of listeners) listener(p);
          },
        })
        .then(
          () => this.logger?.info({ image: target, ms: Math.round(performance.now() - started) }, 'image.pulled'),
          (err: unknown) => {
            const timedOut = (err as CodedError).code === 'CANCELLED';
            const failure = timedOut
              ? new CodedError(
                  'IMAGE_PULL_FAILED',
                  `The pull of ${target} took longer than ${this.settings.timeoutMs} ms (images.timeoutMs) and was stopped.`,
                  {
                    image: target,
                  },
                )
              : err;
            this.logger?.warn({ image: target, code: (failure as CodedError).code, message: (failure as Error).message }, 'image.pull.failed');
            throw failure;
          },
        )
        .finally(() => this.pulls.delete(target));
      pull = { done, listeners };
      this.pulls.set(target, pull);
    }
    if (onProgress) pull.listeners.add(onProgress);
    try {
      await pull.done;
    } finally {
      if (onProgress) pull.listeners.delete(onProgress);
    }
  }

  /**
   * Builds a template image from a tar of its context: the archive is read by the strict reader
   * (no absolute or `..` names, no links that leave the context, no hard links or special files),
   * the Dockerfile must be a regular file inside it and pass {@link dockerfileNeeds} (nothing the
   * engine would fetch by itself), its images go through {@link ensure} (so the allow-list holds),
   * the `ONBUILD` triggers of its base images pass the same rules, and the image is labelled
   * {@link BUILD_LABEL}, and {@link BUILD_TENANT_LABEL} `tenant` (a tenant, or {@link SHARED_BUILD}
   * for an operator's). `request.tag` is the engine's name: a member's build is named under its
   * tenant's prefix by the caller (`tenantBuildName`). The build's `RUN` steps get `images.buildNetwork`. An image of the same
   * name that Warren did not build is not replaced (`CONFLICT`). With `usableBy` (a member key's
   * tenant), no image the Dockerfile names (`FROM`, `COPY --from`) may be another tenant's build:
   * the same refusal as a create's, so one tenant's files never reach another's template.
   */
  async build(
    context: Buffer,
    request: { tag: string; dockerfile?: string | undefined },
    watch: ImageWatch = {},
    tenant: string = DEFAULT_TENANT,
    usableBy?: string,
  ): Promise<{ image: string; id: string }> {
    const images = requireCapability(this.provider, 'images', 'build images');
    const tag = buildTag(request.tag);
    const dockerfile = dockerfilePath(request.dockerfile ?? 'Dockerfile');
    const entries = readCheckedTar(context);
    const found = entries.find((e) => e.entry.name === dockerfile);
    if (!found)
      throw new CodedError(
        'INVALID_PARAMS',
        `The build context has no file '${dockerfile}'; put the Dockerfile inside the context folder, or name it with dockerfile.`,
        {
          dockerfile,
        },
      );
    if (found.entry.kind !== 'file')
      throw new CodedError('INVALID_PARAMS', `The Dockerfile '${dockerfile}' is a ${found.entry.kind}; it must be a regular file.`);
    const needs = dockerfileNeeds(found.data);
    // Images already here are checked before the answer starts too, so that refusal is an ordinary error answer.
    if (usableBy !== undefined) for (const image of needs.images) await this.checkUsable(image, usableBy);
    for (const image of needs.bases) {
      const info = await images.inspect(image).catch(() => undefined);
      if (info !== undefined) checkOnBuildTriggers(image, info.onBuild ?? []);
    }
    const existing = await images.inspect(tag);
    if (existing !== undefined && existing.labels[BUILD_LABEL] === undefined)
      throw new CodedError(
        'CONFLICT',
        `An image named ${tag} is already on the engine and Warren did not build it; a build does not replace it. Choose another name (e.g. templates/${tag}).`,
        { image: tag },
      );
    // A member's build is named under its own tenant's prefix, so this guards E2B templates' names; an
    // operator's build (an admin key's) may replace any build, as an admin reaches every tenant.
    if (existing !== undefined && tenant !== SHARED_BUILD && builtFor(existing.labels) !== tenant)
      throw new CodedError('CONFLICT', `The name ${tag} is taken by another tenant's build; a build does not replace it. Choose another name.`, {
        image: tag,
      });
    // Held until the build ends, so `remove` cannot take an image away and leave the engine to pull it itself, unchecked.
    const held = [...needs.images];
    this.hold(held);
    try {
      watch.onStart?.();
      for (const image of needs.images) {
        const { pulled } = await this.ensure(image, { onProgress: watch.onProgress }, usableBy);
        if (pulled) watch.onOutput?.(`Pulled ${image}\n`);
        const info = await images.inspect(image);
        if (info !== undefined) {
          this.hold([info.id]);
          held.push(info.id);
        }
        if (needs.bases.includes(image)) checkOnBuildTriggers(image, info?.onBuild ?? []);
      }
      return await this.runBuild(images, context, { tag, dockerfile, existing, tenant }, watch);
    } finally {
      this.release(held);
    }
  }

  /** Runs the checked build on the engine and replaces the earlier build of its name. */
  private async runBuild(
    images: ImageCapability,
    context: Buffer,
    { tag, dockerfile, existing, tenant }: { tag: string; dockerfile: string; existing: { id: string } | undefined; tenant: string },
    watch: ImageWatch,
  ): Promise<{ image: string; id: string }> {
    const started = performance.now();
    this.logger?.info({ image: tag, contextBytes: context.length }, 'image.build.started');
    const signals = [AbortSignal.timeout(this.settings.timeoutMs), ...(watch.signal ? [watch.signal] : [])];
    try {
      const { id } = await images.build(context, {
        tag,
        dockerfile,
        labels: { [BUILD_LABEL]: new Date().toISOString(), [BUILD_TENANT_LABEL]: tenant },
        network: this.settings.buildNetwork,
        onOutput: (text) => watch.onOutput?.(text),
        signal: AbortSignal.any(signals),
      });
      this.logger?.info({ image: tag, id, ms: Math.round(performance.now() - started) }, 'image.built');
      // The earlier build of this name lost its name to this one: remove it unless a sandbox still uses it.
      if (existing !== undefined && existing.id !== id)
        await images.remove(existing.id).then(
          () => this.logger?.info({ image: tag, id: existing.id }, 'image.replaced'),
          () => undefined,
        );
      return { image: tag, id };
    } catch (err) {
      this.logger?.warn({ image: tag, code: (err as CodedError).code, message: (err as Error).message.split('\n')[0] }, 'image.build.failed');
      throw err;
    }
  }

  private hold(keys: readonly string[]): void {
    for (const key of keys) this.inUse.set(key, (this.inUse.get(key) ?? 0) + 1);
  }

  private release(keys: readonly string[]): void {
    for (const key of keys) {
      const left = (this.inUse.get(key) ?? 1) - 1;
      if (left > 0) this.inUse.set(key, left);
      else this.inUse.delete(key);
    }
  }

  /**
   * The images Warren built (one tenant's when given, and with `withShared` the operators' builds
   * too), newest first: none on a backend without images of its own.
   */
  async list(tenant?: string, { withShared = false }: { withShared?: boolean } = {}): Promise<ImageInfo[]> {
    if (!this.provider.images) return [];
    return (await this.provider.images.list(BUILD_LABEL))
      .filter((i) => tenant === undefined || builtFor(i.labels) === tenant || (withShared && builtFor(i.labels) === SHARED_BUILD))
      .map(({ id, tags, createdAt, sizeBytes }) => ({ id, tags, createdAt, sizeBytes }));
  }

  /** Removes an image Warren built (by id or name); any other image is refused with `FORBIDDEN`, one a build under way starts or copies from with `CONFLICT`. */
  async remove(image: string, tenant?: string): Promise<void> {
    const images = requireCapability(this.provider, 'images', `remove the image ${image}`);
    const found = await images.inspect(image);
    const owner = found === undefined ? undefined : builtFor(found.labels);
    // Another tenant's build is not on the engine, to a member key.
    const info = tenant !== undefined && owner !== undefined && owner !== SHARED_BUILD && owner !== tenant ? undefined : found;
    if (info === undefined) throw new CodedError('NOT_FOUND', `No image '${image}' is on the engine; GET /v1/images lists the images Warren built.`, { image });
    if (tenant !== undefined && owner === SHARED_BUILD)
      throw new CodedError('FORBIDDEN', `The image '${image}' is an operator's build, shared by every tenant; only an admin key removes it.`, { image });
    if (info.labels[BUILD_LABEL] === undefined)
      throw new CodedError('FORBIDDEN', `The image '${image}' was not built by Warren; Warren removes only the images it built (GET /v1/images lists them).`, {
        image,
      });
    if (this.inUse.has(image) || this.inUse.has(info.id))
      throw new CodedError('CONFLICT', `The image '${image}' is used by a build under way (FROM or COPY --from); remove it once that build ends.`, { image });
    await images.remove(image);
    this.logger?.info({ image }, 'image.removed');
  }
}

/** The Dockerfile's path inside the context, as the archive names it; refused when it would leave the context. */
function dockerfilePath(given: string): string {
  if (given.includes('\0') || given.includes('\\'))
    throw new CodedError('INVALID_PARAMS', `The Dockerfile path '${given.slice(0, 200)}' has a NUL or a backslash.`);
  if (path.posix.isAbsolute(given))
    throw new CodedError('INVALID_PARAMS', `The Dockerfile path '${given.slice(0, 200)}' is absolute; give it relative to the context folder.`);
  const normal = path.posix.normalize(given);
  if (normal === '..' || normal.startsWith('../') || normal === '.')
    throw new CodedError(
      'INVALID_PARAMS',
      `The Dockerfile path '${given.slice(0, 200)}' is outside the context; the Dockerfile must be inside the context folder.`,
    );
  return normal.replace(/\/+$/, '');
}

/** Whether `image` is a name under a tenants' root (`isTenantRootRef`); false for what is no reference at all (refused elsewhere). */
function isTenantRootName(image: string): boolean {
  try {
    return isTenantRootRef(parseImageRef(image));
  } catch {
    return false;
  }
}

/**
 * The one refusal of an image a tenant may not start: another tenant's build, or a name under a
 * tenants' root that is on the engine for no one (such names are never pulled). Alike, so the
 * refusal tells nothing of what other tenants built.
 */
function notForTenant(image: string): CodedError {
  return new CodedError(
    'IMAGE_NOT_ALLOWED',
    `The image '${image.slice(0, 300)}' is not on the engine for this tenant (names under ${TENANT_ROOTS.map((r) => `${r}/`).join(' and ')} are tenants' own builds, never pulled): build it with this tenant's key (warren images build), or name an image from an allowed registry.`,
    { image: image.slice(0, 300) },
  );
}
