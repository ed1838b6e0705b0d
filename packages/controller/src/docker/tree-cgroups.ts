import { execFile } from 'node:child_process';
import { mkdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { removeCgroupTree, sweepCgroups, v1Hierarchy } from './cpu-cgroups.js';

/** Where each sandbox's tree cgroups are bound inside its container; the daemon's `--tree-cgroup`. */
export const TREE_CGROUP_IN_SANDBOX = '/run/warren/trees';
/** The name of Warren's cgroup v1 hierarchy without controllers (`mount -t cgroup -o none,name=warren`). */
const HIERARCHY_NAME = 'warren';
/**
 * Where this controller mounts that hierarchy when no one has yet. It stays mounted: the engine's
 * container stats (containerd's cgroup v1 reader) fail for every container, Warren's or not, while
 * a hierarchy the containers are in has no mount point ("cannot find cgroup mount destination").
 */
const MOUNT_POINT = '/run/warren-cgroup';

/**
 * A cgroup per process tree, so that nothing a command starts can leave its tree (cgroup v1, on
 * the engine's host). The daemon finds a tree by a variable in its processes' environment, their
 * session and their parents; a child can shed all three (`setsid env -i` after its parent
 * exited). Cgroup membership it cannot shed: each sandbox gets a folder in a hierarchy of
 * Warren's own, mounted without controllers, so membership limits and accounts nothing and the
 * CPU, memory and pids caps stay where the engine and {@link CpuCgroups} put them. The folder is
 * bound at {@link TREE_CGROUP_IN_SANDBOX}, inside the daemon's own folder (root's, 0700), and the
 * daemon makes a cgroup for each tree there before the tree runs anything.
 *
 * Under the same conditions as {@link CpuCgroups}: a controller running as root beside a local
 * engine, sandboxes under runc without user-namespace remap; elsewhere {@link TreeCgroups.open}
 * answers `undefined` and trees are found as before (docs/security.md, "Process trees").
 *
 * @example
 * const trees = await TreeCgroups.open();
 * const onHost = await trees?.prepare('abc123'); // bind it at TREE_CGROUP_IN_SANDBOX
 */
export class TreeCgroups {
  private constructor(private readonly root: string) {}

  /**
   * Finds Warren's hierarchy (mounting it at {@link MOUNT_POINT} when no one has) and makes the
   * folder for sandboxes in it; `undefined` where this process may not (not root, no cgroup v1
   * support, or a mount namespace that is not the host's).
   */
  static async open(mountinfo = '/proc/self/mountinfo'): Promise<TreeCgroups | undefined> {
    if (process.getuid?.() !== 0) return undefined;
    const find = async () => v1Hierarchy(await readFile(mountinfo, 'utf8').catch(() => ''), (options) => options.includes(`name=${HIERARCHY_NAME}`));
    let mount = await find();
    if (!mount) {
      try {
        await mkdir(MOUNT_POINT, { recursive: true });
        await promisify(execFile)('mount', ['-t', 'cgroup', '-o', `none,name=${HIERARCHY_NAME}`, 'cgroup', MOUNT_POINT]);
      } catch {
        return undefined;
      }
      mount = await find();
      if (!mount) return undefined;
    }
    const root = path.join(mount.mountPoint, 'sandboxes');
    try {
      await mkdir(root, { recursive: true });
      return new TreeCgroups(root);
    } catch {
      return undefined;
    }
  }

  /** The host folder of one sandbox's tree cgroups. */
  folder(agentId: string): string {
    if (!/^[A-Za-z0-9]+$/.test(agentId)) throw new Error('A sandbox id is letters and digits only.');
    return path.join(this.root, agentId);
  }

  /** Makes (or finds) one sandbox's folder and returns it, to bind at {@link TREE_CGROUP_IN_SANDBOX}; before every start, as a host reboot empties the hierarchy. */
  async prepare(agentId: string): Promise<string> {
    const folder = this.folder(agentId);
    await mkdir(folder, { recursive: true });
    return folder;
  }

  /** Removes one sandbox's tree cgroups once its container is gone; an absent one is not an error. */
  async remove(agentId: string): Promise<void> {
    await removeCgroupTree(this.folder(agentId));
  }

  /** Removes the folders of sandboxes that no longer exist (see {@link sweepCgroups}). */
  async sweep(known: ReadonlySet<string>): Promise<void> {
    await sweepCgroups(this.root, known);
  }
}
