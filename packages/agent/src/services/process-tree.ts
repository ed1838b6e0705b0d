import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { treeCgroup } from './tree-cgroup.js';

/**
 * The variable that tags every process a Warren call starts. Children inherit it through fork
 * and exec, so it survives `setsid`, `nohup` and double forks, which escape a process group.
 */
export const MARKER_VARIABLE = 'WARREN_EXEC_ID';

/** A fresh marker value: 96 random bits, so no unrelated process carries it by chance. */
export function newMarker(): string {
  return randomBytes(12).toString('hex');
}

/** One row of the process table as `/proc` shows it. */
export interface ProcEntry {
  pid: number;
  ppid: number;
  pgid: number;
  sid: number;
  state: string;
  /** Clock ticks after boot. */
  startTicks: number;
  /** The value of {@link MARKER_VARIABLE} in the process's initial environment, when readable. */
  marker: string | undefined;
  /** True when the process is in the selected tree's cgroup ({@link treeCgroup}), which it cannot leave. */
  inTreeCgroup?: boolean;
}

/** What identifies one tree: its marker, and its leader's session and group while that lives. */
export interface TreeSelector {
  marker: string;
  /** The leader's pid: the leader leads its own session and group (spawned detached). */
  leaderPid?: number | undefined;
  /**
   * Process groups known to hold only this tree's processes (a code kernel's own group), signalled
   * as whole groups before any scan: one syscall stops a fork loop in them however many copies it
   * made, even while the loop keeps the machine too busy for a scan.
   */
  groups?: readonly number[] | undefined;
}

const MARKER_PREFIX = Buffer.from(`${MARKER_VARIABLE}=`);

/**
 * Reads every process this user can see. `/proc/<pid>/environ` is readable for processes of the
 * same uid; it is the environment the process was started with, which is what a marker needs.
 */
export function scanProcesses(procRoot = '/proc'): ProcEntry[] {
  return scanForTree(procRoot).entries;
}

/** A scan of `/proc`, and how many listed processes were gone before their files could be read. */
export interface ProcScan {
  entries: ProcEntry[];
  vanished: number;
}

/**
 * {@link scanProcesses} for one tree's kill. The environment (the marker) is read only where it
 * can change the answer: not for this daemon, not for pid 1 (neither ever carries a fresh marker,
 * and neither is ever a member), not for a process the leader's session or group, or one of the
 * known groups, already makes a member. It also counts the processes that vanished between the
 * listing and their reads, which {@link killTree} needs to know whether an empty scan can be trusted.
 */
export function scanForTree(procRoot = '/proc', selector?: TreeSelector, self = process.pid): ProcScan {
  const entries: ProcEntry[] = [];
  let vanished = 0;
  let names: string[];
  try {
    names = readdirSync(procRoot);
  } catch {
    return { entries, vanished };
  }
  // Read after the listing: a process the tree forks meanwhile is either listed (and found through
  // its parent) or in the cgroup by the time it is read here.
  const inCgroup = new Set(selector === undefined ? [] : (treeCgroup()?.pids(selector.marker) ?? []));
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue;
    const entry = readEntry(procRoot, Number(name), selector, self, inCgroup);
    if (entry) entries.push(entry);
    else vanished++;
  }
  return { entries, vanished };
}

function readEntry(procRoot: string, pid: number, selector: TreeSelector | undefined, self: number, inCgroup: ReadonlySet<number>): ProcEntry | undefined {
  let stat: string;
  try {
    stat = readFileSync(`${procRoot}/${pid}/stat`, 'utf8');
  } catch {
    return undefined; // gone between readdir and read
  }
  // The command name is in parentheses and may itself hold spaces or parentheses.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const entry: ProcEntry = {
    pid,
    state: fields[0] ?? '?',
    ppid: Number(fields[1]),
    pgid: Number(fields[2]),
    sid: Number(fields[3]),
    startTicks: Number(fields[19]),
    marker: undefined,
    ...(inCgroup.has(pid) && { inTreeCgroup: true }),
  };
  const leader = selector?.leaderPid;
  const linked =
    entry.inTreeCgroup === true ||
    (leader !== undefined && (entry.sid === leader || entry.pgid === leader || pid === leader)) ||
    selector?.groups?.includes(entry.pgid) === true;
  if (selector !== undefined && (pid === self || pid === 1 || linked)) return entry;
  try {
    entry.marker = markerOf(readFileSync(`${procRoot}/${pid}/environ`));
  } catch {
    entry.marker = undefined; // another user's process, or gone
  }
  return entry;
}

/** Finds the marker's value in a NUL-separated environment block. */
export function markerOf(environ: Buffer): string | undefined {
  let start = 0;
  while (start < environ.length) {
    let end = environ.indexOf(0, start);
    if (end < 0) end = environ.length;
    if (end - start > MARKER_PREFIX.length && environ.subarray(start, start + MARKER_PREFIX.length).equals(MARKER_PREFIX)) {
      return environ.subarray(start + MARKER_PREFIX.length, end).toString('latin1');
    }
    start = end + 1;
  }
  return undefined;
}

/**
 * The live members of one tree: every process in the tree's cgroup or carrying the marker, in the
 * leader's session or group or in one of the known groups, or descending from one of those; never
 * this daemon, never pid 1, never a zombie.
 */
export function treeMembers(procs: ProcEntry[], selector: TreeSelector, self = process.pid): ProcEntry[] {
  const members = new Set<number>();
  for (const p of procs) {
    if (p.inTreeCgroup === true || p.marker === selector.marker || selector.groups?.includes(p.pgid)) members.add(p.pid);
    else if (selector.leaderPid !== undefined && (p.sid === selector.leaderPid || p.pgid === selector.leaderPid || p.pid === selector.leaderPid))
      members.add(p.pid);
  }
  // Descendants of members: a child that cleared its environment still has its parent.
  let grew = true;
  while (grew) {
    grew = false;
    for (const p of procs) {
      if (!members.has(p.pid) && members.has(p.ppid)) {
        members.add(p.pid);
        grew = true;
      }
    }
  }
  return procs.filter((p) => members.has(p.pid) && p.pid !== self && p.pid !== 1 && p.state !== 'Z');
}

/** Sends a signal to one pid, ignoring processes that are already gone. */
export function signalPid(pid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(pid, signal);
    return true;
  } catch {
    return false;
  }
}

export interface KillTreeOptions {
  signal?: NodeJS.Signals;
  /** How many scan-and-kill rounds before giving up (a fork bomb needs several). */
  maxRounds?: number;
  procRoot?: string;
}

/**
 * Kills a whole tree: scans `/proc` for its members and signals each, again and again until a
 * scan finds none (or `maxRounds` pass), so processes forked between two scans are caught by the
 * next. With a signal other than SIGKILL it makes one round: the processes may handle it.
 * Returns the pids signalled.
 */
export async function killTree(selector: TreeSelector, options: KillTreeOptions = {}): Promise<number[]> {
  const signal = options.signal ?? 'SIGKILL';
  const maxRounds = signal === 'SIGKILL' ? (options.maxRounds ?? 200) : 1;
  const killed = new Set<number>();
  if (signal === 'SIGKILL' && freezeThenKill(selector, options.procRoot, killed) === 'none') {
    treeCgroup()?.release(selector.marker);
    return [];
  }
  for (let round = 0; round < maxRounds; round++) {
    // The known groups first, in one syscall each: it stops a fork loop in them before the scan.
    signalGroups(knownGroups(selector), signal);
    const members = treeMembers(scanForTree(options.procRoot, selector).entries, selector);
    if (members.length === 0) break;
    if (signal === 'SIGKILL') signalGroups(memberGroups(members), signal);
    for (const p of members) if (signalPid(p.pid, signal)) killed.add(p.pid);
    if (signal !== 'SIGKILL') break;
    await new Promise((resolve) => setTimeout(resolve, round < 5 ? 2 : 10));
  }
  // The tree is over: its cgroup goes once the last member is reaped.
  if (signal === 'SIGKILL') treeCgroup()?.release(selector.marker);
  return [...killed];
}

/**
 * The first round of a SIGKILL: stops the tree (SIGSTOP) before killing any of it, so no member
 * exits while the tree is gathered. Killing a parent first would orphan its children, and a child
 * that cleared its environment (`env -i`) and left the session (`setsid`) is linked to the tree
 * by its parent alone: frozen, it is found through that parent and killed with it. The known
 * groups, then the group of each member found, are stopped whole, so copies a fork loop makes
 * between two scans are stopped with their group. Synchronous, so nothing runs between the stop
 * and the kill.
 *
 * Answers `none` when its first scan found no member and no listed process vanished before it was
 * read: then no member lived when `/proc` was listed (one that did would have been read, or counted
 * as vanished), so none can have forked since, and the caller's further scans would find nothing.
 * That is the common end of a command (`true` leaves nothing behind) and costs one scan instead
 * of two. A scan with a vanished process proves nothing, and the rounds go on as before.
 */
function freezeThenKill(selector: TreeSelector, procRoot: string | undefined, killed: Set<number>): 'none' | 'some' {
  const groups = new Set(knownGroups(selector));
  signalGroups(groups, 'SIGSTOP');
  const frozen = new Set<number>();
  let firstScanEmpty = false;
  for (let round = 0; round < 50; round++) {
    let grew = false;
    const scan = scanForTree(procRoot, selector);
    const members = treeMembers(scan.entries, selector);
    if (round === 0) firstScanEmpty = members.length === 0 && scan.vanished === 0;
    const fresh = memberGroups(members).filter((g) => !groups.has(g));
    signalGroups(fresh, 'SIGSTOP');
    for (const g of fresh) groups.add(g);
    for (const p of members) {
      if (frozen.has(p.pid)) continue;
      frozen.add(p.pid);
      signalPid(p.pid, 'SIGSTOP');
      grew = true;
    }
    if (!grew) break;
  }
  signalGroups(groups, 'SIGKILL');
  for (const pid of frozen) if (signalPid(pid, 'SIGKILL')) killed.add(pid);
  return firstScanEmpty ? 'none' : 'some';
}

/** The groups a selector names: the leader's (while it lives) and the known ones. */
function knownGroups(selector: TreeSelector): number[] {
  return [...(selector.leaderPid === undefined ? [] : [selector.leaderPid]), ...(selector.groups ?? [])].filter(isForeignGroup);
}

/**
 * The process groups members are in. A group lives inside one session and a session only holds
 * descendants of the process that made it, so the group of a member holds the tree's own
 * processes: children the tree started, never this daemon (every child starts in a session of its
 * own) and never init.
 */
export function memberGroups(members: readonly ProcEntry[]): number[] {
  return [...new Set(members.map((p) => p.pgid))].filter(isForeignGroup);
}

let ownGroup: number | undefined;
/** False for this daemon's own group, init's, and group ids that are not real (0, negative, NaN). */
function isForeignGroup(pgid: number): boolean {
  if (ownGroup === undefined) {
    try {
      const stat = readFileSync('/proc/self/stat', 'utf8');
      ownGroup = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
    } catch {
      ownGroup = -1;
    }
  }
  return Number.isInteger(pgid) && pgid > 1 && pgid !== ownGroup && pgid !== process.pid;
}

/** Sends a signal to each process group, ignoring groups that are gone. */
function signalGroups(groups: Iterable<number>, signal: NodeJS.Signals): void {
  for (const pgid of groups) signalPid(-pgid, signal);
}

/**
 * Makes a process the first choice of the kernel's OOM killer (1000 is the highest score). An
 * unprivileged process may raise a score of its own uid's processes, never lower it; its
 * children inherit it, so a memory bomb dies before the daemon, whose score stays 0.
 */
export function preferForOomKill(pid: number, procRoot = '/proc'): void {
  try {
    writeFileSync(`${procRoot}/${pid}/oom_score_adj`, '1000');
  } catch {
    // the process already exited, or /proc is not writable here: nothing to protect
  }
}
