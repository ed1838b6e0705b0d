import { Readable } from 'node:stream';
import type Docker from 'dockerode';
import { CodedError } from '@warren/protocol';
import type { BuildOptions, ImageCapability, ProvidedImage, PullOptions } from '../provider.js';
import { mib, pullFailure, rethrow } from './engine-errors.js';
import type { DockerState } from './state.js';

/**
 * Images on the Docker engine, as the provider's images capability: pulls bounded in size and
 * time, classic-builder builds, and the images Warren labelled.
 *
 * @example
 * await new DockerImages(state).has('warren/sandbox:latest');
 */
export class DockerImages implements ImageCapability {
  constructor(private readonly state: DockerState) {}

  /** True when the image is present on the engine (no registry is asked). */
  async has(image: string): Promise<boolean> {
    try {
      await this.state.docker.getImage(image).inspect();
      return true;
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return false;
      return rethrow(err, `inspect image ${image}`);
    }
  }

  /**
   * Pulls an image through `docker pull`'s API, following its progress (`modem.followProgress`).
   * The sum of the layers' download sizes is checked as they become known; past `maxBytes` the
   * request is dropped, which makes the engine cancel the pull and release what it fetched. A
   * failed pull removes the name if the engine had already tagged it.
   */
  async pull(image: string, options: PullOptions): Promise<void> {
    const abort = new AbortController();
    const onAbort = () => abort.abort();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    let refusal: CodedError | undefined;
    try {
      const stream = (await this.state.docker.pull(image, { abortSignal: abort.signal }).catch((e: unknown) => {
        throw pullFailure(image, e);
      })) as Readable;
      const sizes = new Map<string, number>();
      const stop = (err: CodedError) => {
        refusal ??= err;
        abort.abort();
        stream.destroy();
      };
      await new Promise<void>((resolve, reject) => {
        this.state.docker.modem.followProgress(
          stream,
          (err: Error | null) => (err && !refusal ? reject(pullFailure(image, err)) : resolve()),
          (event: PullEvent) => {
            if (refusal) return;
            if (event.error !== undefined || event.errorDetail !== undefined) return stop(pullFailure(image, event.errorDetail?.message ?? event.error));
            const total = event.progressDetail?.total;
            if (event.id !== undefined && typeof total === 'number' && total > 0) {
              sizes.set(event.id, total);
              const sum = [...sizes.values()].reduce((a, b) => a + b, 0);
              if (sum > options.maxBytes)
                return stop(
                  new CodedError(
                    'IMAGE_TOO_LARGE',
                    `The image ${image} is larger than this controller pulls: its layers add up to more than ${mib(options.maxBytes)} MiB (images.maxPullMb). The pull was stopped and nothing of it was kept.`,
                    { image, maxBytes: options.maxBytes, seenBytes: sum },
                  ),
                );
            }
            options.onProgress({ status: event.status ?? '', layer: event.id, current: event.progressDetail?.current, total });
          },
        );
      });
      if (options.signal?.aborted) refusal ??= new CodedError('CANCELLED', `The pull of ${image} was cancelled; nothing of it was kept.`, { image });
      if (refusal) throw refusal;
    } catch (err) {
      // Whatever the engine already tagged under this name goes: a pull either completes or leaves nothing.
      await this.state.docker
        .getImage(image)
        .remove({ force: false })
        .catch(() => undefined);
      throw err;
    } finally {
      options.signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * Builds an image with the engine's classic builder (which follows no `# syntax=` directive and
   * pulls nothing the caller did not check first: its base images are on the engine already).
   * Intermediate containers are removed, even after a failed step.
   */
  async build(context: Buffer, options: BuildOptions): Promise<{ id: string }> {
    // Seen on Podman 4.3: a compat build's RUN steps ran in the host's network namespace whatever
    // `networkmode` said, so a build could reach the host and the network. Refused rather than trusted.
    if (this.state.engine?.name === 'podman')
      throw new CodedError(
        'NOT_SUPPORTED',
        `Image builds are refused on Podman ${this.state.engine.version}: its Docker-compatible build runs RUN steps on the host's network whatever images.buildNetwork says. ` +
          'Build the image with podman build on the engine host (it is then on the engine and a create can name it), or use Docker.',
        { engine: 'podman' },
      );
    const stream = (await this.state.docker
      .buildImage(Readable.from([context]), {
        t: options.tag,
        dockerfile: options.dockerfile,
        labels: options.labels,
        networkmode: options.network,
        rm: true,
        forcerm: true,
        version: '1',
        abortSignal: options.signal,
      } as Docker.ImageBuildOptions)
      .catch((e: unknown) => rethrow(e, `build the image ${options.tag}`))) as Readable;
    const tail: string[] = [];
    let failure: string | undefined;
    let id: string | undefined;
    await new Promise<void>((resolve, reject) => {
      this.state.docker.modem.followProgress(
        stream,
        (err: Error | null) => (err ? reject(err) : resolve()),
        (event: BuildEvent) => {
          if (event.stream !== undefined) {
            options.onOutput(event.stream);
            tail.push(...event.stream.split('\n').filter(Boolean));
            tail.splice(0, Math.max(0, tail.length - 40));
          }
          if (event.aux?.ID) id = event.aux.ID;
          if (event.error !== undefined || event.errorDetail !== undefined) failure ??= event.errorDetail?.message ?? event.error ?? 'the build failed';
        },
      );
    }).catch((e: unknown) => {
      if (options.signal?.aborted) throw new CodedError('CANCELLED', `The build of ${options.tag} was cancelled.`);
      rethrow(e, `build the image ${options.tag}`);
    });
    if (options.signal?.aborted) throw new CodedError('CANCELLED', `The build of ${options.tag} was cancelled.`);
    if (failure !== undefined || id === undefined) {
      const reason = failure ?? 'the engine reported no image id';
      const code = /no space left on device/i.test(reason) ? 'IMAGE_TOO_LARGE' : 'BUILD_FAILED';
      throw new CodedError(code, `The build of ${options.tag} failed: ${reason.trim()}. The last lines of its output:\n${tail.join('\n')}`, {
        tag: options.tag,
        output: tail.join('\n'),
      });
    }
    return { id };
  }

  async list(label: string): Promise<ProvidedImage[]> {
    const images = await this.state.docker.listImages({ filters: { label: [label] } }).catch((e: unknown) => rethrow(e, 'list images'));
    return images
      .map((i) => ({
        id: i.Id,
        tags: (i.RepoTags ?? []).filter((t) => t !== '<none>:<none>'),
        createdAt: new Date(i.Created * 1000).toISOString(),
        sizeBytes: i.Size,
        labels: i.Labels ?? {},
      }))
      .sort((a, b) => b.createdAt.localeCompare(a.createdAt));
  }

  async inspect(image: string): Promise<{ id: string; labels: Record<string, string>; onBuild: string[] } | undefined> {
    try {
      const info = await this.state.docker.getImage(image).inspect();
      return { id: info.Id, labels: info.Config?.Labels ?? {}, onBuild: ((info.Config?.OnBuild ?? []) as unknown[]).map(String) };
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return undefined;
      return rethrow(err, `inspect image ${image}`);
    }
  }

  async remove(image: string): Promise<void> {
    await this.state.docker
      .getImage(image)
      .remove()
      .catch((err: { statusCode?: number }) => {
        if (err.statusCode === 404) return;
        if (err.statusCode === 409) {
          const detail = (err as { json?: { message?: string } }).json?.message ?? 'it is in use';
          throw new CodedError('CONFLICT', `Could not remove the image ${image}: ${detail}. Kill the sandboxes that use it first.`, { image });
        }
        rethrow(err, `remove the image ${image}`);
      });
  }
}

/** One line of the engine's pull progress. */
interface PullEvent {
  status?: string;
  id?: string;
  progressDetail?: { current?: number; total?: number };
  error?: string;
  errorDetail?: { message?: string };
}

/** One line of the engine's build output. */
interface BuildEvent {
  stream?: string;
  aux?: { ID?: string };
  error?: string;
  errorDetail?: { message?: string };
}
