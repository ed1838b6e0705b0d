import { listedTenant } from '../tenancy/reach.js';
import { operatorBuildName, tenantBuildName } from '../tenancy/image-names.js';
import { SHARED_BUILD } from '../image-service.js';
import { buildTag } from '../image-ref.js';
import type { Caller } from '../grants.js';
import type { ImageService } from '../image-service.js';
import { BuildImageQuery, ImageEvent, ListImagesResponse, PullImageRequest } from '@warren/protocol';
import { z } from 'zod';
import { eventStream, readContext, sendJson } from './io.js';
import { defineRoute, type Route } from './route.js';

/** `DELETE /v1/images`: the image to remove, by id or name. */
const RemoveImageQuery = z.object({
  image: z
    .string({ error: 'Name the image to remove: DELETE /v1/images?image=<id or name>.' })
    .min(1, { error: 'Name the image to remove: DELETE /v1/images?image=<id or name>.' })
    .max(512, { error: 'The image is named by at most 512 characters: its id (sha256:...) or name, as GET /v1/images lists it.' }),
});

/** The images sandboxes start from: the ones Warren built, pulls ahead of a create, and builds from a Dockerfile. */
export const IMAGE_ROUTES: readonly Route[] = [
  defineRoute({
    method: 'GET',
    path: '/v1/images',
    operationId: 'listImages',
    summary: "The images Warren built (labelled warren.build), newest first: a member key's tenant's own builds; every build for an admin key.",
    tag: 'images',
    access: 'operator',
    responses: { 200: { description: 'The built images.', schema: ListImagesResponse } },
    handle: async ({ deps, res, caller }) => sendJson(res, 200, { images: await deps.sandboxes.images.list(listedTenant(caller)) }),
  }),
  defineRoute({
    method: 'DELETE',
    path: '/v1/images',
    operationId: 'removeImage',
    summary: "Remove an image Warren built, by id or name; other images are refused. A member key's name is its own tenant's build first.",
    tag: 'images',
    access: 'operator',
    query: { schema: RemoveImageQuery, parameters: { image: 'The image id (sha256:...) or name, as GET /v1/images lists it.' } },
    responses: { 204: { description: 'Gone.' } },
    handle: async ({ deps, res, query, caller }) => {
      await deps.sandboxes.images.remove(await meant(deps.sandboxes.images, caller, query.image), listedTenant(caller));
      res.writeHead(204).end();
    },
  }),
  defineRoute({
    method: 'POST',
    path: '/v1/images/pull',
    operationId: 'pullImage',
    summary:
      'Pull an image onto the engine ahead of a create, with progress. Refused before anything is fetched when its registry is not allowed. ' +
      'The answer is NDJSON: progress lines, then one done or error line.',
    tag: 'images',
    access: 'operator',
    scope: 'images',
    body: { schema: PullImageRequest, what: 'pull request', hint: 'Send { "image": "<reference>" }.' },
    responses: { 200: { description: 'One ImageEvent per line: progress, then done or error.', contentType: 'application/x-ndjson', schema: ImageEvent } },
    handle: async ({ deps, res, body, caller }) => {
      const stream = eventStream(res);
      await stream.run(async () => {
        await deps.sandboxes.images.ensure(
          await meant(deps.sandboxes.images, caller, body.image),
          {
            onStart: stream.start,
            onProgress: (p) => stream.send({ type: 'progress', ...p }),
          },
          listedTenant(caller),
        );
        return { type: 'done', image: body.image };
      });
    },
  }),
  defineRoute({
    method: 'POST',
    path: '/v1/images/build',
    operationId: 'buildImage',
    summary:
      'Build a template image from a Dockerfile; the body is the build context as a tar archive (application/x-tar), checked before the build. ' +
      "A member key's build is named warren-built/<tenant>/<tag>, its tenant's own; an admin key's is named <tag> and shared by every tenant. " +
      'The answer is NDJSON: the build output, then one done or error line.',
    tag: 'images',
    access: 'operator',
    scope: 'images',
    rawBody: {
      contentType: 'application/x-tar',
      description: 'The build context: a tar archive of regular files, folders and relative links that stay inside it.',
    },
    query: {
      schema: BuildImageQuery,
      parameters: {
        tag: 'The name the image gets, name[:tag] without a registry host.',
        dockerfile: "The Dockerfile's path inside the context (default Dockerfile).",
      },
      what: 'build request',
      hint: 'Use ?tag=<name[:tag]>&dockerfile=<path>.',
    },
    responses: { 200: { description: 'One ImageEvent per line: output, then done or error.', contentType: 'application/x-ndjson', schema: ImageEvent } },
    handle: async ({ deps, req, res, query, caller }) => {
      const images = deps.sandboxes.images;
      // The slot is taken before the body is read, so waiting builds hold no context in memory.
      await images.withBuildSlot(async () => {
        const context = await readContext(req, deps.config.images.maxBuildContextMb);
        const abort = new AbortController();
        res.once('close', () => res.writableFinished || abort.abort());
        const stream = eventStream(res);
        await stream.run(async () => {
          const built = await images.build(
            context,
            { ...query, tag: buildName(caller, query.tag) },
            {
              onStart: stream.start,
              onProgress: (p) => stream.send({ type: 'progress', ...p }),
              onOutput: (text) => stream.send({ type: 'output', text }),
              signal: abort.signal,
            },
            listedTenant(caller) ?? SHARED_BUILD,
            listedTenant(caller),
          );
          return { type: 'done', image: built.image, id: built.id };
        });
      });
    },
  }),
];

/**
 * The engine name of a build of `tag`: under a member key's tenant's prefix (`warren-built/<tenant>/`),
 * so tenants' names never meet; as asked for an admin key (an operator's image, shared).
 */
function buildName(caller: Caller | undefined, tag: string): string {
  const tenant = listedTenant(caller);
  return tenant === undefined ? operatorBuildName(buildTag(tag)) : tenantBuildName(tenant, buildTag(tag));
}

/** The image a caller means by a name: a member key's own tenant's build of that name first (`ImageService.resolve`). */
async function meant(images: ImageService, caller: Caller | undefined, image: string): Promise<string> {
  const tenant = listedTenant(caller);
  return tenant === undefined ? image : images.resolve(image, tenant);
}
