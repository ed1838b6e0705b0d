import { randomBytes, randomUUID, timingSafeEqual, createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { gunzipSync } from 'node:zlib';
import { CodedError, readCheckedTar } from '@warren/protocol';
import { z } from 'zod';
import { callerFor, type Caller } from '../../grants.js';
import type { HttpServerDeps } from '../../server-context.js';
import { packTar, type TarEntry } from '../../tar.js';
import { ownerOf, type Owner } from '../../tenancy/owner.js';
import { requireScope } from '../../tenancy/scopes.js';
import { ENVD_VERSION } from '../templates.js';
import { E2bHttpError, toE2bHttpError } from '../errors.js';
import { json, parse, readJson } from '../http-util.js';
import { builtImages, builtTemplate, buildIdOf, parseTemplateName, templateImage } from './names.js';
import { dockerfileFor, filesFolder, TemplateBuildStart, type TemplateBase } from './dockerfile.js';

/** The image E2B's SDK starts a template from when none is named (`Template()`, `fromBaseImage()`). */
export const E2B_DEFAULT_BASE_IMAGE = 'e2bdev/base';
/** The image label holding a built template's E2B build id. */
const BUILD_ID_LABEL = 'warren.e2b-build';
/** How long a build's record (its status and logs, or its uploads while it waits to start) is kept. */
const RECORD_TTL_MS = 60 * 60 * 1000;
/** Builds of one tenant that may be waiting or running at once through E2B's API. */
const BUILDS_PER_TENANT = 4;

/** `POST /v3/templates` (`TemplateBuildRequestV3`) and `POST /v2/templates` (`TemplateBuildRequestV2`, `alias`). */
const TemplateRequest = z.looseObject({
  name: z.string().min(1).max(256).optional(),
  alias: z.string().min(1).max(256).optional(),
  tags: z.array(z.string().max(256)).max(16).nullish(),
  cpuCount: z.number().int().min(1).max(64).nullish(),
  memoryMB: z.number().int().min(128).nullish(),
});

/** The calling API key: its tenant owns what it builds. */
type Who = Owner & { caller: Caller };

interface LogEntry {
  timestamp: string;
  level: 'debug' | 'info' | 'warn' | 'error';
  message: string;
  step?: string;
}

/** One build through E2B's API: requested, given its files, started, and then ready or failed. */
interface Build {
  id: string;
  tenant: string;
  name: string;
  tag: string;
  status: 'waiting' | 'building' | 'ready' | 'error';
  logs: LogEntry[];
  reason?: { message: string; step?: string };
  /** The secret of this build's upload links (which the SDK fetches without its API key). */
  uploadToken: string;
  uploads: Map<string, Buffer>;
  uploadBytes: number;
  createdAt: number;
}

/**
 * Templates through E2B's API (docs/e2b.md#templates): `Template.build` of the `e2b` SDK becomes a
 * build of Warren's {@link ImageService} for the calling key's tenant, under the image name
 * {@link templateImage}. A build's status and logs live here, in memory, for an hour; the built
 * templates themselves are the engine's images, listed again from it.
 *
 * @example
 * const templates = new TemplateBuilds(deps);
 * if (await templates.serve(req, res, path, query)) return;
 */
export class TemplateBuilds {
  private readonly builds = new Map<string, Build>();

  constructor(
    private readonly deps: HttpServerDeps,
    private readonly now: () => number = Date.now,
  ) {}

  /** Serves one template request; false when the path is not one of these routes (the control plane then answers it). */
  async serve(req: IncomingMessage, res: ServerResponse, path: string, query: URLSearchParams): Promise<boolean> {
    const method = req.method ?? 'GET';
    this.prune();
    let m: RegExpExecArray | null;
    // The upload link: authenticated by its own secret, as the SDK sends no API key to it.
    if (method === 'PUT' && (m = /^\/templates\/([^/]+)\/files\/([a-f0-9]{64})$/.exec(path))) {
      await this.upload(req, res, decodeURIComponent(m[1]!), m[2]!, query);
      return true;
    }
    // `Template.removeTags` shares the delete route's shape; Warren keeps one tag per build and moves none.
    if (method === 'DELETE' && path === '/templates/tags')
      throw new E2bHttpError(
        501,
        "Removing template tags (Template.removeTags) is not supported by Warren's E2B gateway; delete the tag's template with DELETE /templates/<name>:<tag>.",
      );
    const routes: [string, RegExp, (m: RegExpExecArray, owner: Who) => Promise<void>][] = [
      ['POST', /^\/v3\/templates$/, (_m, owner) => this.request(req, res, owner, 'v3')],
      ['POST', /^\/v2\/templates$/, (_m, owner) => this.request(req, res, owner, 'v2')],
      ['GET', /^\/templates\/([^/]+)\/files\/([^/]+)$/, (m, owner) => this.uploadLink(req, res, owner, m[1]!, m[2]!)],
      ['POST', /^\/v2\/templates\/([^/]+)\/builds\/([^/]+)$/, (m, owner) => this.start(req, res, owner, m[1]!, m[2]!)],
      ['GET', /^\/templates\/([^/]+)\/builds\/([^/]+)\/status$/, (m, owner) => this.status(res, owner, m[1]!, m[2]!, query)],
      ['GET', /^\/templates$/, (_m, owner) => this.list(res, owner)],
      ['GET', /^\/templates\/aliases\/([^/]+)$/, (m, owner) => this.alias(res, owner, m[1]!)],
      ['GET', /^\/templates\/([^/]+)\/tags$/, (m, owner) => this.tags(res, owner, m[1]!)],
      ['GET', /^\/templates\/([^/]+)$/, (m, owner) => this.describe(res, owner, m[1]!)],
      ['DELETE', /^\/templates\/([^/]+)$/, (m, owner) => this.remove(res, owner, m[1]!)],
    ];
    for (const [verb, pattern, handle] of routes) {
      if (verb !== method) continue;
      const match = pattern.exec(path);
      if (!match) continue;
      const owner = this.authenticate(req);
      const decoded = match.map((part) => (part === undefined ? part : safeDecode(part))) as unknown as RegExpExecArray;
      try {
        await handle(decoded, owner);
      } catch (err) {
        if (err instanceof NotMine) return false;
        throw err;
      }
      return true;
    }
    return false;
  }

  /** The calling API key's owner; a sandbox token or no key is E2B's 401, as on the rest of the control plane. */
  private authenticate(req: IncomingMessage): Who {
    const key = req.headers['x-api-key'];
    const caller = typeof key === 'string' ? callerFor(this.deps.credentials, key, undefined) : undefined;
    const owner = ownerOf(caller);
    if (caller === undefined || owner === undefined)
      throw new E2bHttpError(401, 'Missing or invalid API key: set E2B_API_KEY to a Warren API key (it travels as X-API-Key).');
    return { ...owner, caller };
  }

  /** Building and deleting templates need the `images` scope, as Warren's own builds do. */
  private requireImages(owner: Who, what: string): void {
    requireScope(owner.caller, 'images', what);
  }

  /** `POST /v3/templates` (and `/v2/templates`): a new build of `name[:tag]` for the caller's tenant, waiting for its files and start. */
  private async request(req: IncomingMessage, res: ServerResponse, owner: Who, version: 'v2' | 'v3'): Promise<void> {
    this.requireImages(owner, 'Building a template (Template.build)');
    const body = parse(TemplateRequest, await readJson(req), 'template request');
    const given = body.name ?? body.alias;
    if (given === undefined) throw new E2bHttpError(400, 'Name the template: Template.build(template, "<name>") (the request needs name).');
    const { name, tag } = parseTemplateName(given);
    const tags = [...new Set([...(given.includes(':') ? [tag] : []), ...(body.tags ?? [])])];
    if (tags.length > 1)
      throw new E2bHttpError(501, `Warren builds one tag per build; build '${name}' once per tag (${tags.slice(0, 4).join(', ')}), or leave tags out.`);
    const finalTag = tags[0] ?? tag;
    parseTemplateName(`${name}:${finalTag}`);
    if (Object.hasOwn(this.deps.config.e2bTemplates, name))
      throw new E2bHttpError(409, `'${name}' is a template configured on this controller (e2bTemplates); choose another name for your template.`);
    // A new request of a name replaces that name's build still waiting for its start (an abandoned Template.build).
    for (const [id, b] of this.builds) if (b.tenant === owner.tenant && b.name === name && b.status === 'waiting') this.builds.delete(id);
    const open = [...this.builds.values()].filter((b) => b.tenant === owner.tenant && (b.status === 'waiting' || b.status === 'building'));
    if (open.length >= BUILDS_PER_TENANT)
      throw new E2bHttpError(
        429,
        `This tenant already has ${open.length} template builds waiting or running (at most ${BUILDS_PER_TENANT}); wait for one to finish.`,
      );
    const build: Build = {
      id: randomUUID(),
      tenant: owner.tenant,
      name,
      tag: finalTag,
      status: 'waiting',
      logs: [],
      uploadToken: randomBytes(24).toString('base64url'),
      uploads: new Map(),
      uploadBytes: 0,
      createdAt: this.now(),
    };
    this.builds.set(build.id, build);
    this.deps.logger.info({ template: name, tag: finalTag, buildId: build.id, tenant: owner.tenant }, 'e2b.template.requested');
    if (version === 'v3') json(res, 202, { templateID: name, buildID: build.id, public: false, names: [name], aliases: [name], tags: [finalTag] });
    else json(res, 202, { ...this.templateObject(name, build.id, new Date(build.createdAt).toISOString(), 'waiting'), buildStatus: undefined });
  }

  /** This tenant's build of this template, or E2B's 404 (another tenant's build reads exactly as none). */
  private buildOf(owner: Who, templateID: string, buildID: string): Build {
    const build = this.builds.get(buildID);
    if (build === undefined || build.tenant !== owner.tenant || build.name !== templateID)
      throw new E2bHttpError(404, `Template build '${buildID.slice(0, 64)}' of '${templateID.slice(0, 64)}' not found.`);
    return build;
  }

  /** The tenant's build of `templateID` that waits for its files (the newest). */
  private waitingBuild(owner: Who, templateID: string): Build {
    const build = [...this.builds.values()]
      .filter((b) => b.tenant === owner.tenant && b.name === templateID && b.status === 'waiting')
      .sort((a, b) => b.createdAt - a.createdAt)[0];
    if (build === undefined)
      throw new E2bHttpError(404, `No build of template '${templateID.slice(0, 64)}' is waiting for files; request one with Template.build.`);
    return build;
  }

  /** `GET /templates/{id}/files/{hash}`: where the SDK uploads the tar of one COPY step's files, or `present` when this build has them. */
  private async uploadLink(req: IncomingMessage, res: ServerResponse, owner: Who, templateID: string, hash: string): Promise<void> {
    this.requireImages(owner, 'Uploading template files');
    if (!/^[a-f0-9]{64}$/.test(hash)) throw new E2bHttpError(400, 'The files hash must be 64 lower-case hex digits (the SDK computes it).');
    const build = this.waitingBuild(owner, templateID);
    if (build.uploads.has(hash)) return json(res, 201, { present: true });
    const host = req.headers.host ?? '127.0.0.1';
    const scheme = req.headers['x-forwarded-proto'] === 'https' ? 'https' : 'http';
    const prefix = (req.url ?? '').startsWith('/e2b/') ? '/e2b' : '';
    const url = `${scheme}://${host}${prefix}/templates/${encodeURIComponent(templateID)}/files/${hash}?build=${build.id}&token=${build.uploadToken}`;
    json(res, 201, { present: false, url });
  }

  /** `PUT <upload link>`: one COPY step's files as a (gzipped) tar, kept with the build until it starts. */
  private async upload(req: IncomingMessage, res: ServerResponse, templateID: string, hash: string, query: URLSearchParams): Promise<void> {
    const build = this.builds.get(query.get('build') ?? '');
    const token = query.get('token') ?? '';
    const valid =
      build !== undefined &&
      build.name === templateID &&
      build.status === 'waiting' &&
      timingSafeEqual(createHash('sha256').update(token).digest(), createHash('sha256').update(build.uploadToken).digest());
    if (!valid) {
      req.resume();
      throw new E2bHttpError(403, 'This upload link is not valid (wrong or expired, or its build already started); ask for a new one by building again.');
    }
    const max = this.deps.config.images.maxBuildContextMb * 1024 * 1024;
    // Uploads wait in memory for their build's start: one build holds at most a build context's worth, all of them twice that.
    const held = () => [...this.builds.values()].reduce((sum, b) => sum + b.uploadBytes, 0);
    const previous = build.uploads.get(hash)?.length ?? 0;
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (build.uploadBytes - previous + size > max)
        throw new E2bHttpError(413, `The template's files exceed ${this.deps.config.images.maxBuildContextMb} MiB (images.maxBuildContextMb).`);
      if (held() - previous + size > 2 * max)
        throw new E2bHttpError(429, 'This controller holds as many uploaded template files as it takes for builds not started yet; retry in a minute.');
      chunks.push(chunk);
    }
    build.uploads.set(hash, Buffer.concat(chunks));
    build.uploadBytes += size - previous;
    res.writeHead(200, { 'content-length': 0 }).end();
  }

  /** `POST /v2/templates/{id}/builds/{buildID}`: checks the steps, then builds in the background (poll the status for logs). */
  private async start(req: IncomingMessage, res: ServerResponse, owner: Who, templateID: string, buildID: string): Promise<void> {
    this.requireImages(owner, 'Building a template (Template.build)');
    const build = this.buildOf(owner, templateID, buildID);
    if (build.status !== 'waiting') throw new E2bHttpError(409, `Template build '${buildID}' has already started.`);
    try {
      await this.begin(req, owner, build);
    } catch (err) {
      // A refused start ends the build: its status says why, and its upload links die with it.
      const { message } = toE2bHttpError(err);
      build.uploads.clear();
      build.uploadBytes = 0;
      build.status = 'error';
      build.reason = { message };
      this.log(build, 'error', message);
      throw err;
    }
    // An empty answer says so: the SDK's client parses any body it is not told is empty.
    res.writeHead(202, { 'content-length': 0 }).end();
  }

  /** Checks a build's steps and files, then starts it in the background. */
  private async begin(req: IncomingMessage, owner: Who, build: Build): Promise<void> {
    const spec = parse(TemplateBuildStart, await readJson(req), 'template build');
    if (spec.fromImageRegistry !== undefined && spec.fromImageRegistry !== null)
      throw new E2bHttpError(
        501,
        "Registry credentials (fromImage with credentials, fromAWSRegistry, fromGCPRegistry) are not supported: Warren pulls with the engine's own logins, from the registries its operator allows (images.allowedRegistries).",
      );
    if (spec.startCmd || spec.readyCmd)
      throw new E2bHttpError(
        501,
        "Start and ready commands (setStartCmd, setReadyCmd, a Dockerfile's CMD or ENTRYPOINT) are not supported by Warren's templates; start the process with sandbox.commands.run(cmd, { background: true }) after Sandbox.create.",
      );
    const base = await this.baseOf(owner, spec);
    const dockerfile = dockerfileFor(spec, base, { [BUILD_ID_LABEL]: build.id });
    const missing = dockerfile.copies.filter((hash) => !build.uploads.has(hash));
    if (missing.length > 0)
      throw new E2bHttpError(
        400,
        `The files of ${missing.length} copy step(s) were not uploaded (hash ${missing[0]!.slice(0, 12)}...); build again with Template.build.`,
      );
    const context = await this.context(build, dockerfile.text, dockerfile.copies);
    build.uploads.clear();
    build.uploadBytes = 0;
    build.status = 'building';
    this.log(build, 'info', `Building ${templateImage(build.tenant, build.name, build.tag)} from ${base.image}`);
    for (const warning of dockerfile.warnings) this.log(build, 'warn', warning);
    void this.run(build, context, dockerfile.steps);
  }

  /** The image a build starts from: E2B's default base is the `base` template; another template by name; any other image through Warren's pull rules. */
  private async baseOf(owner: Who, spec: TemplateBuildStart): Promise<TemplateBase> {
    const templates = this.deps.config.e2bTemplates;
    const configured = (name: string) => templates[name]?.create?.image ?? this.deps.config.defaultImage;
    if (spec.fromTemplate !== undefined) {
      if (Object.hasOwn(templates, spec.fromTemplate)) return { image: configured(spec.fromTemplate), user: 'user' };
      const built = await builtTemplate(this.deps, owner, spec.fromTemplate);
      if (built?.image !== undefined) return { image: built.image, user: 'user' };
      throw new E2bHttpError(
        400,
        `fromTemplate('${spec.fromTemplate.slice(0, 64)}'): no such template. This Warren serves ${Object.keys(templates).join(', ')} and the templates this tenant built.`,
      );
    }
    const image = spec.fromImage ?? E2B_DEFAULT_BASE_IMAGE;
    if (image === E2B_DEFAULT_BASE_IMAGE || image.startsWith(`${E2B_DEFAULT_BASE_IMAGE}:`)) {
      if (!Object.hasOwn(templates, 'base'))
        throw new E2bHttpError(400, `${image} maps to the 'base' template, which this controller does not configure; name an image with fromImage.`);
      return { image: configured('base'), user: 'user' };
    }
    if (/\s|"/.test(image)) throw new E2bHttpError(400, `'${image.slice(0, 80)}' is not an image reference.`);
    // Another tenant's build (a template or a Warren build, by name or id) is no base: its files are that tenant's. An operator's build is shared.
    const images = this.deps.sandboxes.images;
    // The engine also takes a short id (a prefix of the hex), so a hex name is compared as one.
    const hex = /^(?:sha256:)?[a-f0-9]{4,64}$/.test(image) ? image.replace(/^sha256:/, '') : undefined;
    const named = (info: { id: string; tags: string[] }) =>
      info.id === image ||
      info.tags.includes(image) ||
      info.tags.includes(`${image}:latest`) ||
      (hex !== undefined && info.id.replace(/^sha256:/, '').startsWith(hex));
    const theirs = (await images.list()).filter(named);
    if (theirs.length > 0 && !(await images.list(owner.tenant, { withShared: true })).some(named))
      throw new E2bHttpError(
        400,
        `fromImage('${image.slice(0, 80)}'): the image is not on the engine for this tenant; name an image from an allowed registry, or one of this tenant's templates with fromTemplate.`,
      );
    return { image, user: 'root' };
  }

  /** The build context: the Dockerfile, and each COPY step's uploaded tar (gzipped or not) unpacked, checked, under its own folder. */
  private async context(build: Build, dockerfile: string, copies: string[]): Promise<Buffer> {
    const max = this.deps.config.images.maxBuildContextMb * 1024 * 1024;
    const entries: TarEntry[] = [{ header: { name: 'Dockerfile', type: 'file', mode: 0o644 }, content: dockerfile }];
    for (const hash of copies) {
      const upload = build.uploads.get(hash)!;
      let archive: Buffer;
      try {
        archive = upload[0] === 0x1f && upload[1] === 0x8b ? gunzipSync(upload, { maxOutputLength: max }) : upload;
      } catch {
        throw new E2bHttpError(
          413,
          `The files of a copy step do not unpack within ${this.deps.config.images.maxBuildContextMb} MiB (images.maxBuildContextMb), or are not gzip.`,
        );
      }
      const folder = filesFolder(hash);
      entries.push({ header: { name: `${folder}/`, type: 'directory', mode: 0o755 } });
      try {
        for (const { entry, data } of readCheckedTar(archive)) {
          const name = `${folder}/${entry.name}`;
          if (entry.kind === 'directory') entries.push({ header: { name: `${name}/`, type: 'directory', mode: entry.mode } });
          else if (entry.kind === 'symlink') entries.push({ header: { name, type: 'symlink', mode: entry.mode, linkname: entry.linkname ?? '' } });
          else entries.push({ header: { name, type: 'file', mode: entry.mode, size: data.length }, content: Buffer.from(data) });
        }
      } catch (err) {
        throw new E2bHttpError(400, `The files of a copy step are not an archive Warren takes: ${toE2bHttpError(err).message}`);
      }
    }
    return packTar(entries);
  }

  /** Runs the build in one of Warren's build slots, turning its output into E2B log entries tagged with the step that printed them. */
  private async run(build: Build, context: Buffer, steps: string[]): Promise<void> {
    const images = this.deps.sandboxes.images;
    let step = 'base';
    let pending = '';
    const onOutput = (text: string) => {
      pending += text;
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const line of lines) {
        const at = /^Step (\d+)\/\d+ :/.exec(line);
        if (at) step = steps[Number(at[1]) - 1] ?? step;
        if (line.trim() !== '') this.log(build, 'info', line, step);
      }
    };
    try {
      const built = await images.withBuildSlot(() =>
        images.build(context, { tag: templateImage(build.tenant, build.name, build.tag), dockerfile: 'Dockerfile' }, { onOutput }, build.tenant),
      );
      if (pending.trim() !== '') this.log(build, 'info', pending, step);
      this.log(build, 'info', `Built ${built.image} (${built.id.slice(0, 19)})`);
      build.status = 'ready';
      this.deps.logger.info({ template: build.name, buildId: build.id, tenant: build.tenant, image: built.image }, 'e2b.template.built');
    } catch (err) {
      if (pending.trim() !== '') this.log(build, 'info', pending, step);
      const message = err instanceof CodedError && err.code === 'BUILD_FAILED' ? `${err.message}` : toE2bHttpError(err).message;
      this.log(build, 'error', message, step);
      build.reason = { message, step };
      build.status = 'error';
      this.deps.logger.warn({ template: build.name, buildId: build.id, tenant: build.tenant, message: message.split('\n')[0] }, 'e2b.template.failed');
    }
  }

  private log(build: Build, level: LogEntry['level'], message: string, step?: string): void {
    build.logs.push({ timestamp: new Date(this.now()).toISOString(), level, message, ...(step === undefined ? {} : { step }) });
    if (build.logs.length > 10_000) build.logs.splice(0, build.logs.length - 10_000);
  }

  /** `GET /templates/{id}/builds/{buildID}/status`: `TemplateBuildInfo` with the log entries from `logsOffset` on. */
  private async status(res: ServerResponse, owner: Who, templateID: string, buildID: string, query: URLSearchParams): Promise<void> {
    const build = this.buildOf(owner, templateID, buildID);
    const offset = Math.max(0, Number.parseInt(query.get('logsOffset') ?? '0', 10) || 0);
    const limit = Math.min(100, Math.max(0, Number.parseInt(query.get('limit') ?? '100', 10) || 100));
    const entries = build.logs.slice(offset, offset + limit);
    json(res, 200, {
      templateID: build.name,
      buildID: build.id,
      status: build.status,
      logs: entries.map((e) => `${e.timestamp} ${e.message}`),
      logEntries: entries,
      ...(build.reason === undefined ? {} : { reason: { ...build.reason, logEntries: build.logs.filter((e) => e.level === 'error') } }),
    });
  }

  /** `GET /templates`: the configured templates (every tenant's) and this tenant's built ones. */
  private async list(res: ServerResponse, owner: Who): Promise<void> {
    const started = new Date(0).toISOString();
    const configured = Object.keys(this.deps.config.e2bTemplates).map((name) => ({
      ...this.templateObject(name, buildIdOf(name), started, 'ready'),
      public: true,
    }));
    const built = new Map<string, Record<string, unknown>>();
    for (const { info, name } of await builtImages(this.deps, owner.tenant))
      if (!built.has(name)) built.set(name, this.templateObject(name, buildIdOf(info.id), info.createdAt, 'ready', info.sizeBytes));
    json(res, 200, [...configured, ...built.values()]);
  }

  /** E2B's `Template` object. */
  private templateObject(name: string, buildID: string, createdAt: string, status: Build['status'], sizeBytes?: number): Record<string, unknown> {
    const template = this.deps.config.e2bTemplates[name]?.create;
    return {
      templateID: name,
      buildID,
      cpuCount: Math.max(1, Math.round(template?.cpus ?? this.deps.config.limits.cpus)),
      memoryMB: template?.memoryMb ?? this.deps.config.limits.memoryMb,
      diskSizeMB: sizeBytes === undefined ? 0 : Math.ceil(sizeBytes / 1024 / 1024),
      public: false,
      aliases: [name],
      names: [name],
      createdAt,
      updatedAt: createdAt,
      createdBy: null,
      lastSpawnedAt: null,
      spawnCount: 0,
      buildCount: 1,
      envdVersion: ENVD_VERSION,
      buildStatus: status,
    };
  }

  /** `GET /templates/{id}`: `TemplateWithBuilds` for a configured template or one this tenant built; anything else (another tenant's too) 404. */
  private async describe(res: ServerResponse, owner: Who, templateID: string): Promise<void> {
    const { name } = safeName(templateID);
    if (Object.hasOwn(this.deps.config.e2bTemplates, templateID)) {
      const started = new Date(0).toISOString();
      return json(res, 200, {
        templateID,
        public: true,
        aliases: [templateID],
        names: [templateID],
        createdAt: started,
        updatedAt: started,
        lastSpawnedAt: null,
        spawnCount: 0,
        builds: [],
      });
    }
    const found = name === undefined ? [] : await builtImages(this.deps, owner.tenant, name);
    if (found.length === 0) throw notFound(templateID);
    const newest = found.map((f) => f.info).sort((a, b) => b.createdAt.localeCompare(a.createdAt));
    json(res, 200, {
      templateID: name,
      public: false,
      aliases: [name],
      names: [name],
      createdAt: newest.at(-1)!.createdAt,
      updatedAt: newest[0]!.createdAt,
      lastSpawnedAt: null,
      spawnCount: 0,
      builds: newest.map((info) => ({
        buildID: buildIdOf(info.id),
        status: 'ready',
        createdAt: info.createdAt,
        updatedAt: info.createdAt,
        finishedAt: info.createdAt,
        cpuCount: this.deps.config.limits.cpus,
        memoryMB: this.deps.config.limits.memoryMb,
        diskSizeMB: Math.ceil((info.sizeBytes ?? 0) / 1024 / 1024),
        envdVersion: ENVD_VERSION,
      })),
    });
  }

  /** `GET /templates/aliases/{alias}` (`Template.exists`): 200 for a configured template or one of this tenant's, else 404. */
  private async alias(res: ServerResponse, owner: Who, alias: string): Promise<void> {
    if (Object.hasOwn(this.deps.config.e2bTemplates, alias)) return json(res, 200, { templateID: alias, public: true });
    const { name } = safeName(alias);
    if (name === undefined || (await builtImages(this.deps, owner.tenant, name)).length === 0) throw notFound(alias);
    json(res, 200, { templateID: name, public: false });
  }

  /** `GET /templates/{id}/tags` (`Template.getTags`): the tags of this tenant's built template. */
  private async tags(res: ServerResponse, owner: Who, templateID: string): Promise<void> {
    const { name } = safeName(templateID);
    const found = name === undefined ? [] : await builtImages(this.deps, owner.tenant, name);
    if (found.length === 0) throw notFound(templateID);
    json(
      res,
      200,
      found.map((f) => ({ tag: f.tag, buildID: buildIdOf(f.info.id), createdAt: f.info.createdAt })),
    );
  }

  /**
   * `DELETE /templates/{id}`: removes every tag of this tenant's built template of that name (an image a sandbox
   * still uses: 409). Anything else goes on to the control plane, where the same route deletes snapshots.
   */
  private async remove(res: ServerResponse, owner: Who, templateID: string): Promise<void> {
    const parsed = safeName(templateID);
    if (parsed.name === undefined || Object.hasOwn(this.deps.config.e2bTemplates, templateID)) throw new NotMine();
    const found = (await builtImages(this.deps, owner.tenant, parsed.name)).filter((f) => parsed.explicitTag === undefined || f.tag === parsed.explicitTag);
    if (found.length === 0) throw new NotMine();
    this.requireImages(owner, 'Deleting a template');
    for (const f of found) await this.deps.sandboxes.images.remove(templateImage(owner.tenant, f.name, f.tag), owner.tenant);
    this.deps.logger.info({ template: parsed.name, tenant: owner.tenant }, 'e2b.template.deleted');
    res.writeHead(204).end();
  }

  /** Forgets builds older than {@link RECORD_TTL_MS} (a waiting one's uploads with it). */
  private prune(): void {
    const cutoff = this.now() - RECORD_TTL_MS;
    for (const [id, build] of this.builds) if (build.createdAt < cutoff && build.status !== 'building') this.builds.delete(id);
  }
}

/** Thrown by a handler whose path belongs to another service (a snapshot's delete). */
class NotMine extends Error {}

function notFound(templateID: string): E2bHttpError {
  return new E2bHttpError(404, `Template '${templateID.slice(0, 80)}' not found.`);
}

function safeName(text: string): { name?: string; explicitTag?: string } {
  try {
    const { name, tag } = parseTemplateName(text);
    return { name, ...(text.includes(':') ? { explicitTag: tag } : {}) };
  } catch {
    return {};
  }
}

function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new E2bHttpError(400, `'${segment.slice(0, 64)}' in the path is not valid percent-encoding.`);
  }
}
