import { writeFileSync } from 'node:fs';
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
 * cgroup.moveToCode(child.pid!);
 */
export class CpuCgroup {
  private constructor(private readonly dir: string) {}

  /** Moves the daemon (every thread of it) into its own cgroup and returns the handle. Throws where the folder is not a writable cgroup. */
  static join(dir: string): CpuCgroup {
    const cgroup = new CpuCgroup(dir);
    writeFileSync(path.join(dir, 'daemon', 'cgroup.procs'), String(process.pid));
    return cgroup;
  }

  /** Moves a process, with every thread it has, into sandbox code's cgroup; what it starts afterwards is born there. */
  moveToCode(pid: number): void {
    writeFileSync(path.join(this.dir, 'code', 'cgroup.procs'), String(pid));
  }

  /**
   * Runs `fork` with the calling thread in sandbox code's cgroup, so a process it forks is born
   * there, with no moment outside; for a library that forks from this thread and does not wait
   * for the child's exec (node-pty). Cgroup v1 lets one thread move alone (`tasks`).
   */
  forkInCode<T>(fork: () => T): T {
    // The main thread's id is the process id.
    writeFileSync(path.join(this.dir, 'code', 'tasks'), String(process.pid));
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
