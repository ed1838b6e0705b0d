import type { ImageEvent, ImageInfo } from '@warren/protocol';
import { packBuildContext } from './build-context.js';
import { resolveControllerOptions, RestClient, type ControllerOptions } from './rest.js';

/** One progress line of a pull (also sent while a build pulls its base images). */
export type PullProgressEvent = Extract<ImageEvent, { type: 'progress' }>;

/** What {@link Images.pull} takes besides the image. */
export interface PullImageOptions {
  /** Called with each progress line of the engine (`Downloading`, `Pull complete`, ...). */
  onProgress?: ((event: PullProgressEvent) => void) | undefined;
  signal?: AbortSignal | undefined;
}

/** What {@link Images.build} builds, and where its output goes. */
export interface BuildImageOptions {
  /** The folder packed as the build context. */
  context: string;
  /** The image's name, `name[:tag]` without a registry host. */
  tag: string;
  /** The Dockerfile's path inside the context; default `Dockerfile`. */
  dockerfile?: string | undefined;
  /** The most bytes of file content packed (default 256 MiB); the controller has its own cap too. */
  maxContextBytes?: number | undefined;
  /** Called with the build's output as it comes (`Step 2/4 : RUN ...`). */
  onOutput?: ((text: string) => void) | undefined;
  /** Called with progress lines while the build's base images are pulled. */
  onProgress?: ((event: PullProgressEvent) => void) | undefined;
  signal?: AbortSignal | undefined;
}

/**
 * Images on the controller's engine: pull ahead of a create with progress, build templates from
 * a Dockerfile, list and remove what Warren built. Needs the API key (these are operator calls).
 * A create of an image the engine lacks pulls it too, and simply waits; pull first when you want
 * to show progress.
 *
 * @example
 * const images = new Images({ baseUrl: 'http://127.0.0.1:7420', apiKey });
 * await images.pull('python:3.12-slim', { onProgress: (p) => console.log(p.status, p.layer ?? '') });
 * const { image } = await images.build({ context: './template', tag: 'py-tools:1', onOutput: (t) => process.stdout.write(t) });
 * const sandbox = await Sandbox.create({ image });
 */
export class Images {
  private readonly rest: RestClient;

  constructor(options: ControllerOptions = {}) {
    const { baseUrl, apiKey } = resolveControllerOptions(options);
    this.rest = new RestClient(baseUrl, apiKey);
  }

  /** Pulls `image` unless the engine has it; resolves once it is there. Refused before any pull when its registry is not allowed. */
  async pull(image: string, options: PullImageOptions = {}): Promise<{ image: string }> {
    const done = await this.rest.pullImage(image, (event) => event.type === 'progress' && options.onProgress?.(event), options.signal);
    return { image: done.image };
  }

  /**
   * Packs `context` ({@link packBuildContext}: links never followed, links out of the folder and
   * special files refused, a size cap) and builds it on the controller, streaming the output.
   * Resolves with the image's name and id: with a member key the name is in its tenant's
   * namespace (`warren-built/<tenant>/<tag>`; a create may still name it by `tag`), with an admin
   * key it is `tag`. A failed step throws `BuildFailedError` with the end of the output in `details.output`.
   */
  async build(options: BuildImageOptions): Promise<{ image: string; id: string | undefined }> {
    const packed = await packBuildContext(options.context, { dockerfile: options.dockerfile, maxBytes: options.maxContextBytes, signal: options.signal });
    const done = await this.rest.buildImage(
      packed.archive,
      { tag: options.tag, dockerfile: packed.dockerfile },
      (event) => {
        if (event.type === 'output') options.onOutput?.(event.text);
        else if (event.type === 'progress') options.onProgress?.(event);
      },
      options.signal,
    );
    return { image: done.image, id: done.id };
  }

  /** The images Warren built, newest first: a member key's tenant's own builds, every build for an admin key. */
  async list(options: { signal?: AbortSignal | undefined } = {}): Promise<ImageInfo[]> {
    return this.rest.listImages(options.signal);
  }

  /** Removes an image Warren built, by id or name; other images are refused (`ForbiddenError`). */
  async remove(image: string, options: { signal?: AbortSignal | undefined } = {}): Promise<void> {
    await this.rest.removeImage(image, options.signal);
  }
}
