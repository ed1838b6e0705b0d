import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { lstat, mkdir, open, readdir, rename, unlink } from 'node:fs/promises';
import path from 'node:path';
import { CodedError } from '@warren/protocol';
import { removeHostTree } from '../host-remove.js';

/** Host uid and gid; `undefined` fields mean "leave as created". */
export interface HostIdentity {
  uid: number;
  gid: number;
}

const SECRET_FILE = 'secret';
const SOCKET_FILE = 'agent.sock';
/** The prefix of a daemon folder set aside for removal (never a valid agent id: those are letters and digits). */
const TRASH_PREFIX = '.trash-';

/**
 * The host side of each sandbox's daemon folder (`<state>/sandboxes/<agentId>`, bind-mounted at
 * `/run/warren`): made fresh by the controller for every start, mode 0700, and owned by the
 * daemon's identity (the container's root as the engine maps it), so sandbox code, which runs as
 * the sandbox user, cannot enter it. Everything the controller does there is done without
 * following links: the folder is made new (never reused), the secret file is created exclusively
 * with `O_NOFOLLOW` (so neither a link nor a FIFO is ever opened) and chowned through its
 * descriptor, and the daemon's socket is checked with `lstat` before each connect (see
 * `agent-link.ts`). The daemon hands its socket to the folder's owner, so a controller that is
 * not root can connect too.
 *
 * The daemon is the container's root, so a compromised one fills its folder with anything: trees
 * nested past PATH_MAX, millions of entries, links to host files, FIFOs, folders of mode 000. An
 * old folder is therefore first renamed aside (`.trash-<agentId>-<random>`, in the controller's
 * own `sandboxes` folder, which no container sees), so a new one can be made at once whatever
 * the old one holds, then removed with {@link removeHostTree} (`rm -rf --one-file-system` in a
 * child process, bounded in time, never following a link). A removal that fails is reported to
 * `onError` and left for {@link AgentDirs.sweep}; it never fails the start or the kill.
 *
 * @example
 * const dirs = new AgentDirs('/var/lib/warren', { uid: 100000, gid: 100000 });
 * const folder = await dirs.prepare(agentId, secret);
 */
export class AgentDirs {
  /**
   * @param stateDir the controller's state folder
   * @param daemonOwner who the daemon is on the host (container root after any user-namespace
   *   remap); `undefined` leaves the folder with the controller, which is what a controller
   *   that is not root can do.
   */
  constructor(
    private readonly stateDir: string,
    private readonly daemonOwner: HostIdentity | undefined,
    /** Told of a folder that could not be removed (it stays set aside; the next sweep tries again). */
    private readonly onError?: (folder: string, error: unknown) => void,
  ) {}

  /** The host folder of one daemon. */
  folder(agentId: string): string {
    if (!/^[A-Za-z0-9]+$/.test(agentId)) throw new CodedError('INVALID_PARAMS', 'A sandbox id is letters and digits only.');
    return path.join(this.stateDir, 'sandboxes', agentId);
  }

  /** The host path of one daemon's socket. */
  socketPath(agentId: string): string {
    return path.join(this.folder(agentId), SOCKET_FILE);
  }

  /**
   * Makes the folder anew (whatever was there, including anything a daemon left, is removed
   * without following links) and puts the daemon's one-time secret in it. Call it before each
   * start of the container: the engine binds the folder by path when the container starts.
   */
  async prepare(agentId: string, secret: string): Promise<string> {
    const dir = this.folder(agentId);
    await mkdir(path.dirname(dir), { recursive: true, mode: 0o700 });
    await this.discard(dir);
    await mkdir(dir, { mode: 0o700 });
    const folder = await open(dir, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
    try {
      if (this.daemonOwner) await folder.chown(this.daemonOwner.uid, this.daemonOwner.gid);
    } finally {
      await folder.close();
    }
    const file = await open(
      path.join(dir, SECRET_FILE),
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW | constants.O_NONBLOCK,
      0o600,
    );
    try {
      await file.writeFile(secret);
      if (this.daemonOwner) await file.chown(this.daemonOwner.uid, this.daemonOwner.gid);
    } finally {
      await file.close();
    }
    return dir;
  }

  /** Removes one daemon's folder (links inside are removed, never followed); a failure is reported, never thrown. */
  async remove(agentId: string): Promise<void> {
    const dir = this.folder(agentId);
    await this.discard(dir).catch((err: unknown) => this.onError?.(dir, err));
  }

  /** Removes the folders earlier removals set aside and could not remove (a crash, a timeout). */
  async sweep(): Promise<void> {
    const parent = path.join(this.stateDir, 'sandboxes');
    const names = await readdir(parent).catch(() => [] as string[]);
    for (const name of names) if (name.startsWith(TRASH_PREFIX)) await this.removeAside(path.join(parent, name));
  }

  /** Sets `dir` aside under a name of its own (so a new one can be made at once) and removes it. */
  private async discard(dir: string): Promise<void> {
    const info = await lstat(dir).catch(() => undefined);
    if (!info) return;
    if (!info.isDirectory()) {
      await unlink(dir);
      return;
    }
    const aside = path.join(path.dirname(dir), `${TRASH_PREFIX}${path.basename(dir)}-${randomBytes(6).toString('hex')}`);
    await rename(dir, aside);
    await this.removeAside(aside);
  }

  private async removeAside(aside: string): Promise<void> {
    try {
      await removeHostTree(aside);
    } catch (err) {
      this.onError?.(aside, err);
    }
  }
}
