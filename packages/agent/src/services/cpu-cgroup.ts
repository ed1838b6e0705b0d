import { mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/**
 * The sandbox's CPU cgroups as the controller binds them into the daemon's own folder (cgroup v1,
 * `--cpu-cgroup DIR`): `DIR/code`, capped at the sandbox's `cpus`, where every process the daemon
 * starts runs, and `DIR/daemon`, the daemon's own share. The daemon moves itself into `daemon` at
 * boot; sandbox code cannot reach `DIR` (the folder is root's, mode 0700) and so cannot leave
 * `code` or take the daemon's share.
 *
 * @example
 * const cgroup = CpuCgroup.join('/run/warren/cpu'); // the daemon now runs in DIR/daemon
 * cgroup.moveToTree(child.pid!, marker);
 */
export class CpuCgroup {
  private constructor(private readonly dir: string) {}

  /** Moves the daemon (every thread of it) into its own cgroup and returns the handle. Throws where the folder is not a writable cgroup. */
  static join(dir: string): CpuCgroup {
    const cgroup = new CpuCgroup(dir);
    writeFileSync(path.join(dir, 'daemon', 'cgroup.procs'), String(process.pid));
    return cgroup;
  }

  /**
   * Moves a process, with every thread it has, into a cgroup of its own tree below sandbox code's
   * (`code/t-<marker>`, capped by `code`): what it starts afterwards is born there, whatever
   * session or environment it gives itself, so the tree's kill finds it ({@link treePids}).
   */
  moveToTree(pid: number, marker: string): void {
    const tree = this.makeTree(marker);
    writeFileSync(path.join(tree, 'cgroup.procs'), String(pid));
    this.sweepNowAndThen();
  }

  /** The processes in a tree's cgroup now; `undefined` where it has none. */
  treePids(marker: string): Set<number> | undefined {
    try {
      const text = readFileSync(path.join(this.treeDir(marker), 'cgroup.procs'), 'utf8');
      return new Set(text.split('\n').filter(Boolean).map(Number));
    } catch {
      return undefined;
    }
  }

  /** Removes a tree's cgroup once it is empty; one still in use stays for the next sweep. */
  removeTree(marker: string): void {
    try {
      rmdirSync(this.treeDir(marker));
    } catch {
      // not empty yet (a killed process still exiting), or gone already
    }
  }

  /** Makes a tree's cgroup inside `code`, never `code` itself: without its cap, commands must not start. */
  private makeTree(marker: string): string {
    const tree = this.treeDir(marker);
    try {
      mkdirSync(tree);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    return tree;
  }

  private treeDir(marker: string): string {
    if (!/^[0-9a-f]+$/.test(marker)) throw new Error('a tree marker is hexadecimal');
    return path.join(this.dir, 'code', `t-${marker}`);
  }

  private lastSweep = Date.now();
  /** Removes the empty tree cgroups of trees that ended on their own, at most once a minute. */
  private sweepNowAndThen(): void {
    if (Date.now() - this.lastSweep < 60_000) return;
    this.lastSweep = Date.now();
    for (const name of readdirSync(path.join(this.dir, 'code'))) {
      if (!name.startsWith('t-')) continue;
      try {
        rmdirSync(path.join(this.dir, 'code', name));
      } catch {
        // still has processes
      }
    }
  }

  /**
   * Runs `fork` with the calling thread in the tree's cgroup ({@link moveToTree}), so a process it
   * forks is born there, with no moment outside; for a library that forks from this thread and does
   * not wait for the child's exec (node-pty). Cgroup v1 lets one thread move alone (`tasks`).
   */
  forkInTree<T>(marker: string, fork: () => T): T {
    const tree = this.makeTree(marker);
    // The main thread's id is the process id.
    writeFileSync(path.join(tree, 'tasks'), String(process.pid));
    try {
      return fork();
    } finally {
      writeFileSync(path.join(this.dir, 'daemon', 'tasks'), String(process.pid));
    }
  }
}

let current: CpuCgroup | undefined;

/** Sets the daemon's cgroups once, at boot (main.ts); absent, processes share the daemon's cgroup. */
export function useCpuCgroup(cgroup: CpuCgroup | undefined): void {
  current = cgroup;
}

/** The daemon's cgroups, where the controller gave it a share of its own. */
export function cpuCgroup(): CpuCgroup | undefined {
  return current;
}
