import { mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/**
 * One cgroup per process tree, in a cgroup v1 hierarchy without controllers that the controller
 * binds into the daemon's own folder (`--tree-cgroup DIR`, the controller's docker/tree-cgroups.ts).
 *
 * A tree's marker variable, session and parent links are all things its processes can shed
 * (`setsid env -i` in a child whose parent then exits leaves none of them); cgroup membership is
 * not: a child is born in its parent's cgroup, and only root may move it, through files sandbox
 * code cannot reach (the folder is root's, under the daemon's 0700 folder). So every process a
 * command, shell, terminal or code kernel starts stays findable, and ends with its tree. The
 * hierarchy has no controllers, so membership costs nothing: no CPU, memory or pids accounting
 * changes (those stay with the container's own cgroups and {@link CpuCgroup}).
 *
 * @example
 * const trees = TreeCgroup.join('/run/warren/trees'); // the daemon now sits in DIR/daemon
 * trees.enter(marker, child.pid!);                     // before the child runs anything
 * trees.pids(marker);                                  // every live process of that tree
 */
export class TreeCgroup {
  /** Trees whose cgroup could not be removed yet (a member was still dying); retried at the next release. */
  private readonly lingering = new Set<string>();

  private constructor(private readonly dir: string) {}

  /** Moves the daemon into `DIR/daemon` (so a thread it moves for a fork has a place to come back to) and returns the handle. */
  static join(dir: string): TreeCgroup {
    mkdirSync(path.join(dir, 'daemon'), { recursive: true });
    writeFileSync(path.join(dir, 'daemon', 'cgroup.procs'), String(process.pid));
    return new TreeCgroup(dir);
  }

  /** Moves a process (with every thread) into its tree's cgroup, making the cgroup first; what it starts afterwards is born there. */
  enter(marker: string, pid: number): void {
    const folder = this.folder(marker);
    mkdirSync(folder, { recursive: true });
    writeFileSync(path.join(folder, 'cgroup.procs'), String(pid));
  }

  /**
   * Runs `fork` with the calling thread in the tree's cgroup, so the process it forks is born
   * there; for a library that forks from this thread (node-pty). Cgroup v1 moves one thread alone
   * through `tasks`.
   */
  forkIn<T>(marker: string, fork: () => T): T {
    const folder = this.folder(marker);
    mkdirSync(folder, { recursive: true });
    writeFileSync(path.join(folder, 'tasks'), String(process.pid));
    try {
      return fork();
    } finally {
      writeFileSync(path.join(this.dir, 'daemon', 'tasks'), String(process.pid));
    }
  }

  /** The processes in a tree's cgroup now; none when it has no cgroup. */
  pids(marker: string): number[] {
    let text: string;
    try {
      text = readFileSync(path.join(this.folder(marker), 'cgroup.procs'), 'utf8');
    } catch {
      return [];
    }
    return text
      .split('\n')
      .filter((line) => line !== '')
      .map(Number);
  }

  /**
   * Removes a tree's cgroup once it is empty; a cgroup that still holds a process (one that is
   * dying, or one a background tree left running) is kept and tried again at a later release.
   */
  release(marker: string): void {
    this.lingering.add(marker);
    for (const name of this.lingering) {
      try {
        rmdirSync(this.folder(name));
        this.lingering.delete(name);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') this.lingering.delete(name);
      }
    }
  }

  private folder(marker: string): string {
    if (!/^[0-9a-f]+$/.test(marker)) throw new Error(`not a tree marker: ${marker}`);
    return path.join(this.dir, `t-${marker}`);
  }
}

let current: TreeCgroup | undefined;

/** Sets the daemon's tree cgroups once, at boot (main.ts); absent, trees are found by marker, session and parent alone. */
export function useTreeCgroup(trees: TreeCgroup | undefined): void {
  current = trees;
}

/** The daemon's tree cgroups, where the controller bound a hierarchy for them. */
export function treeCgroup(): TreeCgroup | undefined {
  return current;
}
