import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { CodedError } from '@warren/protocol';

const run = promisify(execFile);

/**
 * Copies the contents of folder `from` into folder `to` (which exists) with GNU cp: owners, modes,
 * times, links and hard links kept, symbolic links copied as links and never followed, holes of
 * sparse files kept as holes, and blocks shared where the file system can (`--reflink=auto`).
 * Both folders are the controller's own (a sandbox's workspace as the host sees it, a snapshot's
 * copy); what lies inside is the sandbox's and is treated as data only. A full disk is
 * `RESOURCE_EXHAUSTED`.
 *
 * @example
 * await copyTree('/var/lib/docker/volumes/abc/_data', '/var/lib/warren/snapshots/.tmp-x/workspace');
 */
export async function copyTree(from: string, to: string, what: string): Promise<void> {
  try {
    await run('cp', ['-a', '--sparse=always', '--reflink=auto', '--no-target-directory', '--', `${from}/.`, to], { maxBuffer: 1024 * 1024 });
  } catch (err) {
    const stderr = errorText(err);
    if (/No space left|Disk quota exceeded/i.test(stderr))
      throw new CodedError(
        'RESOURCE_EXHAUSTED',
        `No space left to ${what}: ${stderr.trim()}. Free disk space, delete snapshots (warren snapshot prune), or ask for a larger diskMb.`,
      );
    throw new CodedError('INTERNAL', `Could not ${what}: ${stderr.trim()}`);
  }
}

/** Empties folder `dir` (the folder itself stays), without following links. */
export async function emptyTree(dir: string): Promise<void> {
  await run('find', [dir, '-mindepth', '1', '-delete']).catch((err: unknown) => {
    throw new CodedError('INTERNAL', `Could not empty ${dir}: ${errorText(err)}`);
  });
}

/** Bytes a folder takes on disk (allocated blocks, so holes count as nothing), as `du` counts them. */
export async function diskBytes(dir: string): Promise<number> {
  const { stdout } = await run('du', ['-s', '--block-size=1', '-x', '--', dir]);
  return Number(stdout.split('\t')[0]) || 0;
}

/** What a failed command said (its stderr), or the error's message; at most 400 characters. */
function errorText(err: unknown): string {
  const stderr = (err as { stderr?: unknown }).stderr;
  return (typeof stderr === 'string' && stderr !== '' ? stderr : err instanceof Error ? err.message : 'unknown error').slice(0, 400);
}
