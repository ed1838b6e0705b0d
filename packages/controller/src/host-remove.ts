import { spawn } from 'node:child_process';
import { lstat, unlink } from 'node:fs/promises';
import { CodedError } from '@warren/protocol';

/** How long one removal may take before its process is killed (a tree of millions of entries, a stalled disk). */
export const REMOVE_TIMEOUT_MS = 10 * 60_000;

/** The most of a removal's error output kept for its error (a hostile tree can make millions of lines). */
const MAX_ERROR_TEXT = 4096;

/** A fixed PATH and the C locale: the controller's environment picks no other `rm` and no translated messages. */
const COMMAND_ENV = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', LC_ALL: 'C' };

interface Outcome {
  ok: boolean;
  text: string;
}

/** Runs a command with no input or output but a bounded capture of its errors, killed after `timeoutMs`. */
function runBounded(command: string, args: string[], timeoutMs: number): Promise<Outcome> {
  return new Promise((resolve) => {
    let text = '';
    let timedOut = false;
    const child = spawn(command, args, { stdio: ['ignore', 'ignore', 'pipe'], env: COMMAND_ENV });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    timer.unref();
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk: string) => {
      if (text.length < MAX_ERROR_TEXT) text += chunk.slice(0, MAX_ERROR_TEXT - text.length);
    });
    child.once('error', (err) => {
      clearTimeout(timer);
      resolve({ ok: false, text: err.message });
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (timedOut) resolve({ ok: false, text: `it took longer than ${Math.round(timeoutMs / 1000)} s and was stopped` });
      else resolve({ ok: code === 0, text: text || (signal ? `killed by ${signal}` : `exit code ${code}`) });
    });
  });
}

/**
 * Removes a host folder whose contents a sandbox (its daemon, its workspace) could have written,
 * so every name, depth, type and mode in it is hostile. The work is done by GNU `rm -rf
 * --one-file-system` in a child process, never in the controller's event loop: it walks by
 * descriptors (so a tree nested past PATH_MAX is no obstacle), removes a symbolic link itself and
 * never follows it, and does not cross into another file system mounted inside. A tree it cannot
 * remove whole because folders in it refuse their owner (mode 000) is given `u+rwx` on its folders
 * (found by `find -P -xdev`, links never followed) and removed once more. Bounded by `timeoutMs`,
 * then the process is killed. A tree that still stands fails with `INTERNAL` naming the reason
 * (first part of the tool's own error output); callers log it and go on. A missing path is no
 * error; a file or link in place of the folder is unlinked.
 *
 * The caller makes sure nothing writes the tree meanwhile (its container is removed, or stopped
 * and the tree renamed away), so the chmod pass, which acts by path, cannot be redirected.
 *
 * @example
 * await removeHostTree('/var/lib/warren/sandboxes/.trash-abc-1f2e');
 */
export async function removeHostTree(target: string, options: { timeoutMs?: number } = {}): Promise<void> {
  const timeoutMs = options.timeoutMs ?? REMOVE_TIMEOUT_MS;
  const info = await lstat(target).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined;
    throw err;
  });
  if (!info) return;
  if (!info.isDirectory()) {
    await unlink(target).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
    return;
  }
  const started = Date.now();
  let outcome = await runBounded('rm', ['-rf', '--one-file-system', '--', target], timeoutMs);
  // busybox's rm has no --one-file-system: the controller's image is Debian's, but a host may not be.
  if (!outcome.ok && /unrecognized option|invalid option|illegal option/i.test(outcome.text))
    outcome = await runBounded('rm', ['-rf', '--', target], timeoutMs);
  if (outcome.ok) return;
  if ((await lstat(target).catch(() => undefined)) === undefined) return;
  const left = Math.max(1000, timeoutMs - (Date.now() - started));
  if (!/longer than/.test(outcome.text)) {
    // Folders that refuse their owner: open them up (links are never followed), then try once more.
    await runBounded('find', ['-P', target, '-xdev', '-type', 'd', '!', '-perm', '-u=rwx', '-exec', 'chmod', 'u+rwx', '--', '{}', '+'], left);
    const again = await runBounded('rm', ['-rf', '--one-file-system', '--', target], left);
    if (again.ok || (await lstat(target).catch(() => undefined)) === undefined) return;
    outcome = again;
  }
  throw new CodedError('INTERNAL', `Could not remove a folder of the controller's: ${outcome.text.trim().slice(0, 400)}`);
}
