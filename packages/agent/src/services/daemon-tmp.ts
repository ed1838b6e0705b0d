import { randomBytes } from 'node:crypto';
import { closeSync, constants, fchownSync, mkdirSync, openSync, writeSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { SandboxUser } from './process-table.js';

// One folder per purpose and daemon start: `/tmp/warren-<purpose>-<random>`.
const folders = new Map<string, string>();

/**
 * A folder in /tmp where only the daemon can create or remove entries (root-owned, mode 0711,
 * made new with a random name, so sandbox code can neither have made it first nor swap it for a
 * link; /tmp's sticky bit keeps sandbox code from removing it). Files the daemon makes there for
 * the sandbox user (shell scripts, saved command output) are made by {@link createUserFile}.
 */
export function daemonFolder(purpose: string, base = os.tmpdir()): string {
  const known = folders.get(purpose);
  if (known !== undefined) {
    try {
      mkdirSync(known, { mode: 0o711 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return known;
      throw err;
    }
    return known;
  }
  const folder = path.join(base, `warren-${purpose}-${randomBytes(8).toString('hex')}`);
  mkdirSync(folder, { mode: 0o711 });
  folders.set(purpose, folder);
  return folder;
}

/**
 * Creates a new file in a daemon folder (never an existing one, never through a link), writes
 * `content` and gives it to the sandbox user, mode 0600. Returns the open descriptor when `keepOpen`.
 */
export function createUserFile(file: string, user: SandboxUser | undefined, content?: string | Buffer): void;
export function createUserFile(file: string, user: SandboxUser | undefined, content: string | Buffer | undefined, keepOpen: true): number;
export function createUserFile(file: string, user: SandboxUser | undefined, content?: string | Buffer, keepOpen = false): number | void {
  const fd = openSync(file, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    if (user) fchownSync(fd, user.uid, user.gid);
    if (content !== undefined) writeSync(fd, typeof content === 'string' ? Buffer.from(content) : content);
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  if (keepOpen) return fd;
  closeSync(fd);
}
