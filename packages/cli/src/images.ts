import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { Command } from 'commander';
import { wantsJson } from './args.js';
import { CliError, printJson, table, withSpinner } from './output.js';

// Colour codes (ESC [ ... m), left out of the one-line status.
// eslint-disable-next-line no-control-regex
const COLOUR_CODES = /\x1b\[[0-9;]*m/g;

/** The label every image scripts/build-images makes carries (the hash of its inputs). */
export const IMAGE_LABEL = 'warren.inputs-hash';

/** One Warren image on the Docker engine. */
export interface ImageRow {
  image: string;
  id: string;
  created: string;
  size: string;
}

/** scripts/build-images of the checkout this CLI runs from. */
export function buildScriptPath(): string {
  return path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../scripts/build-images');
}

/** `warren images own ls`: the images scripts/build-images made, from `docker images`. */
export async function imagesListCommand(_options: unknown, command: Command): Promise<void> {
  let stdout: string;
  try {
    ({ stdout } = await promisify(execFile)('docker', ['images', '--filter', `label=${IMAGE_LABEL}`, '--format', '{{json .}}']));
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: string };
    if (e.code === 'ENOENT')
      throw new CliError(
        'The docker command is not installed on this machine.',
        'Install the Docker CLI (apt-get install docker.io), or list images where Warren runs.',
      );
    throw new CliError(`docker images failed: ${(e.stderr ?? e.message).trim()}`, 'Check that the Docker engine runs (docker info).');
  }
  const rows: ImageRow[] = stdout
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const raw = JSON.parse(line) as { Repository: string; Tag: string; ID: string; CreatedAt: string; Size: string };
      return { image: `${raw.Repository}:${raw.Tag}`, id: raw.ID, created: raw.CreatedAt.replace(/ [+-]\d{4} \w+$/, ''), size: raw.Size };
    })
    .sort((a, b) => a.image.localeCompare(b.image));
  if (wantsJson(command)) return printJson(rows);
  process.stdout.write(
    table(
      ['IMAGE', 'ID', 'CREATED', 'SIZE'],
      rows.map((r) => [r.image, r.id, r.created, r.size]),
    ),
  );
  if (rows.length === 0) process.stderr.write('warren: no Warren images yet; build them with warren images own build\n');
}

/**
 * `warren images own build`: runs scripts/build-images. On a terminal a spinner shows the step it is
 * on and the full output appears only if it fails; elsewhere the output passes through as it is.
 */
export async function imagesBuildCommand(options: { force?: boolean }): Promise<number> {
  const script = buildScriptPath();
  if (!existsSync(script))
    throw new CliError(
      `warren images own build runs scripts/build-images from a Warren checkout, and there is none at ${script}.`,
      'Run it from the repository: scripts/build-images.',
    );
  const args = options.force ? ['--force'] : [];
  if (!process.stdout.isTTY || !process.stderr.isTTY) {
    const child = spawn(script, args, { stdio: 'inherit' });
    return new Promise((resolve, reject) => {
      child.on('error', reject);
      child.on('close', (code) => resolve(code ?? 1));
    });
  }
  let output = '';
  const status = await withSpinner(
    'Building images',
    (update) => {
      const child = spawn(script, args, { stdio: ['ignore', 'pipe', 'pipe'] });
      const take = (chunk: Buffer) => {
        output += chunk.toString('utf8');
        const last = output.trimEnd().split('\n').pop()?.replace(COLOUR_CODES, '').trim();
        if (last) update(`Building images: ${last.slice(0, Math.max(20, (process.stderr.columns || 80) - 25))}`);
      };
      child.stdout.on('data', take);
      child.stderr.on('data', take);
      return new Promise<number>((resolve, reject) => {
        child.on('error', reject);
        child.on('close', (code) => resolve(code ?? 1));
      });
    },
    'Images built',
  );
  if (status !== 0) {
    process.stderr.write(output.trimEnd().split('\n').slice(-30).join('\n') + '\n');
    throw new CliError(
      `scripts/build-images failed (exit ${status}); the end of its output is above.`,
      'Fix what it names and run warren images own build again.',
      status,
    );
  }
  process.stdout.write(output);
  return 0;
}
