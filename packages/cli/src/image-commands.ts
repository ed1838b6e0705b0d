import type { Command } from 'commander';
import { Images, type PullProgressEvent } from '@warren/sdk';
import { controllerOptions, wantsJson } from './args.js';
import { printJson, shortTime, table } from './output.js';

/** The Images client for a command's `--url` / `--api-key` (or WARREN_URL / WARREN_API_KEY). */
function images(command: Command): Images {
  return new Images(controllerOptions(command));
}

/**
 * Writes a pull's progress to stderr: one line each time a layer's status changes (the engine
 * repeats `Downloading` many times a second; those are shown once, with the layer's size).
 */
function progressPrinter(): (event: PullProgressEvent) => void {
  const last = new Map<string, string>();
  return (event) => {
    const key = event.layer ?? '';
    if (last.get(key) === event.status) return;
    last.set(key, event.status);
    const size = event.total ? ` (${(event.total / 1024 / 1024).toFixed(1)} MB)` : '';
    process.stderr.write(`${event.layer ? `${event.layer}: ` : ''}${event.status}${size}\n`);
  };
}

/** Every abort signal a long command takes: Ctrl-C stops the pull or build on the controller. */
function interruptSignal(): AbortSignal {
  const abort = new AbortController();
  process.once('SIGINT', () => abort.abort());
  return abort.signal;
}

/** `warren images pull IMAGE`: pulls onto the controller's engine, progress on stderr. */
export async function imagePullCommand(image: string, _options: unknown, command: Command): Promise<void> {
  const done = await images(command).pull(image, { onProgress: progressPrinter(), signal: interruptSignal() });
  if (wantsJson(command)) return printJson(done);
  process.stdout.write(`${done.image}\n`);
}

export interface ImageBuildOptions {
  tag: string;
  file?: string;
  maxContextMb?: number;
}

/** `warren images build CONTEXT --tag NAME`: packs the folder, builds it on the controller, output streamed to stderr; prints the image's name. */
export async function imageBuildCommand(context: string, options: ImageBuildOptions, command: Command): Promise<void> {
  const built = await images(command).build({
    context,
    tag: options.tag,
    dockerfile: options.file,
    maxContextBytes: options.maxContextMb === undefined ? undefined : options.maxContextMb * 1024 * 1024,
    onOutput: (text) => process.stderr.write(text),
    onProgress: progressPrinter(),
    signal: interruptSignal(),
  });
  if (wantsJson(command)) return printJson(built);
  process.stdout.write(`${built.image}\n`);
}

/** `warren images ls`: the images Warren built on the controller's engine. */
export async function imageListCommand(_options: unknown, command: Command): Promise<void> {
  const rows = await images(command).list();
  if (wantsJson(command)) return printJson(rows);
  process.stdout.write(
    table(
      ['IMAGE', 'ID', 'CREATED', 'SIZE'],
      rows.map((r) => [
        r.tags.join(', ') || '<none>',
        r.id.replace(/^sha256:/, '').slice(0, 12),
        shortTime(r.createdAt),
        `${(r.sizeBytes / 1e6).toFixed(1)} MB`,
      ]),
    ),
  );
}

/** `warren images rm IMAGE`: removes an image Warren built. */
export async function imageRemoveCommand(image: string, _options: unknown, command: Command): Promise<void> {
  await images(command).remove(image);
  if (!wantsJson(command)) process.stderr.write(`removed ${image}\n`);
}
