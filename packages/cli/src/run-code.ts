import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Command } from 'commander';
import { CODE_LANGUAGES, type CodeDisplay, type CodeLanguage } from '@warren/protocol';
import { displayImage, type CodeRunOptions } from '@warren/sdk';
import { UsageError } from './output.js';
import { connectSandbox } from './sandbox-commands.js';

export interface RunCodeOptions {
  lang?: string;
  context?: string;
  /** Seconds; the cell is interrupted after this long. */
  timeout?: number;
  /** Write images (PNG, JPEG, SVG) here instead of naming them only. */
  images?: string;
  json?: boolean;
}

const IMAGE_TYPES: Readonly<Record<string, string>> = { 'image/png': 'png', 'image/jpeg': 'jpg', 'image/svg+xml': 'svg' };

/** Reads the cell from a file, or from stdin for `-`. */
async function readSource(file: string): Promise<string> {
  if (file !== '-') return readFile(file, 'utf8');
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string));
  return Buffer.concat(chunks).toString('utf8');
}

/** The language a file's name suggests, when `--lang` is not given. */
export function languageOf(file: string, lang: string | undefined): CodeLanguage {
  const chosen =
    lang ??
    ({ '.py': 'python', '.js': 'javascript', '.mjs': 'javascript', '.cjs': 'javascript', '.ts': 'typescript' } as Record<string, string>)[path.extname(file)];
  if (chosen === undefined) return 'python';
  if (!(CODE_LANGUAGES as readonly string[]).includes(chosen))
    throw new UsageError(`Unknown language '${chosen}'.`, `Use --lang ${CODE_LANGUAGES.join(', --lang ')}.`);
  return chosen as CodeLanguage;
}

/**
 * `warren run ID [--lang python] FILE|-`: runs the file (or stdin) as one cell in the sandbox's
 * code interpreter. Output streams here as it comes, rich results are printed as text (images are
 * named, or written under `--images DIR`), an error prints its traceback. Exits 0, 1 when the code
 * raised, 124 when the cell was interrupted at its timeout.
 */
export async function runCodeCommand(id: string, file: string, options: RunCodeOptions, command: Command): Promise<number> {
  const language = languageOf(file, options.lang);
  const source = await readSource(file);
  const sandbox = await connectSandbox(command, id);
  const abort = new AbortController();
  const onSignal = () => abort.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let images = 0;
  try {
    const runOptions: CodeRunOptions = { language, signal: abort.signal };
    if (options.context !== undefined) runOptions.context = options.context;
    if (options.timeout !== undefined) runOptions.timeoutMs = Math.round(options.timeout * 1000);
    if (!options.json) {
      runOptions.onStdout = (text) => process.stdout.write(text);
      runOptions.onStderr = (text) => process.stderr.write(text);
      runOptions.onResult = (result) => void printResult(result, options.images, ++images);
      runOptions.onError = (error) => process.stderr.write(`${error.traceback || `${error.name}: ${error.value}`}\n`);
    }
    const result = await sandbox.code.run(source, runOptions);
    if (options.json) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
    if (result.timedOut)
      process.stderr.write('warren: the cell was interrupted at its timeout (pass --timeout SECONDS for longer); the context keeps its state\n');
    return result.timedOut ? 124 : result.error ? 1 : 0;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    sandbox.close();
  }
}

async function printResult(result: CodeDisplay, folder: string | undefined, index: number): Promise<void> {
  // PNG and JPEG only when they are what they claim (displayImage); SVG is text.
  const image = displayImage(result);
  const svg = result.data['image/svg+xml'];
  const found = image
    ? { mime: image.mimeType, bytes: image.bytes }
    : typeof svg === 'string'
      ? { mime: 'image/svg+xml', bytes: Buffer.from(svg, 'utf8') }
      : undefined;
  if (found) {
    if (folder === undefined) {
      process.stdout.write(`[${found.mime}, ${found.bytes.length} bytes: pass --images DIR to save it]\n`);
    } else {
      const target = path.join(folder, `output-${index}.${IMAGE_TYPES[found.mime]}`);
      await writeFile(target, found.bytes);
      process.stdout.write(`[${found.mime} saved to ${target}]\n`);
    }
    return;
  }
  const claimed = ['image/png', 'image/jpeg'].find((mime) => result.data[mime] !== undefined);
  if (claimed) process.stdout.write(`[${claimed} output that is not a valid image: left out]\n`);
  const text = result.data['text/plain'] ?? result.data['text/markdown'];
  if (typeof text === 'string') process.stdout.write(`${text}\n`);
  else if (result.data['application/json'] !== undefined) process.stdout.write(`${JSON.stringify(result.data['application/json'])}\n`);
}
