import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { CappedOutput, RingOutput } from '../src/services/output.js';
import { markerOf, memberGroups, scanForTree, scanProcesses, treeMembers, type ProcEntry } from '../src/services/process-tree.js';

describe('CappedOutput', () => {
  it('keeps everything under the cap', () => {
    const out = new CappedOutput(16);
    out.push(Buffer.from('hello '));
    out.push(Buffer.from('world'));
    expect(out.text()).toBe('hello world');
    expect(out.truncated).toBe(false);
  });

  it('keeps the head and the tail with a marker naming the dropped bytes', () => {
    const out = new CappedOutput(8);
    for (const piece of ['abc', 'defg', 'hijkl', 'mnopqrstu', 'vwxyz']) out.push(Buffer.from(piece));
    expect(out.total).toBe(26);
    expect(out.truncated).toBe(true);
    expect(out.text()).toBe('abcd\n[... 18 bytes omitted ...]\nwxyz');
  });
});

describe('RingOutput', () => {
  it('addresses bytes by offset and drops the oldest beyond its capacity', () => {
    const ring = new RingOutput(10);
    ring.push(Buffer.from('0123456789'));
    ring.push(Buffer.from('abcde'));
    expect([ring.start, ring.end]).toEqual([5, 15]);
    expect(ring.read(7)).toEqual({ offset: 7, data: Buffer.from('789abcde') });
    // Asking for dropped bytes reads from the oldest held one; the offset shows the gap.
    expect(ring.read(0)).toEqual({ offset: 5, data: Buffer.from('56789abcde') });
    expect(ring.read(15)).toBeUndefined();
    expect(ring.read(5, 3)).toEqual({ offset: 5, data: Buffer.from('567') });
  });

  it('wakes a waiter on new bytes and on close', async () => {
    const ring = new RingOutput(100);
    const waiting = ring.waitBeyond(0);
    ring.push(Buffer.from('x'));
    await waiting;
    const closing = ring.waitBeyond(1);
    ring.close();
    await closing;
    expect(ring.isClosed).toBe(true);
  });
});

describe('process tree membership', () => {
  const entry = (pid: number, ppid: number, pgid: number, sid: number, marker?: string, state = 'S'): ProcEntry => ({
    pid,
    ppid,
    pgid,
    sid,
    state,
    startTicks: 0,
    marker,
  });

  it('reads the marker out of an environment block', () => {
    expect(markerOf(Buffer.from('A=1\0WARREN_EXEC_ID=abc\0B=2\0'))).toBe('abc');
    expect(markerOf(Buffer.from('XWARREN_EXEC_ID=abc\0'))).toBeUndefined();
    expect(markerOf(Buffer.alloc(0))).toBeUndefined();
  });

  it('finds marked processes, the leader session and group, and descendants of members; never pid 1, self or zombies', () => {
    const procs = [
      entry(1, 0, 1, 1),
      entry(7, 1, 7, 7), // the daemon
      entry(20, 7, 20, 20, 'm'), // the leader
      entry(21, 1, 21, 21, 'm'), // setsid + double fork: reparented to init, found by marker
      entry(22, 1, 20, 20), // scrubbed its environment but stayed in the session
      entry(23, 21, 23, 23), // scrubbed and left the session, but its parent is a member
      entry(24, 20, 20, 20, 'm', 'Z'), // a zombie: nothing to kill
      entry(30, 7, 30, 30, 'other'), // another command's tree
    ];
    expect(
      treeMembers(procs, { marker: 'm', leaderPid: 20 }, 7)
        .map((p) => p.pid)
        .sort(),
    ).toEqual([20, 21, 22, 23]);
    expect(
      treeMembers(procs, { marker: 'm' }, 7)
        .map((p) => p.pid)
        .sort(),
    ).toEqual([20, 21, 23]);
  });

  it("counts every process of a known group as a member, and signals only groups that are not the daemon's or init's", () => {
    const entry = (pid: number, ppid: number, pgid: number, sid: number): ProcEntry => ({ pid, ppid, pgid, sid, state: 'R', startTicks: 1, marker: undefined });
    // A kernel (40) that died: its fork-bomb copies, reparented to init, still hold its group.
    const procs = [entry(1, 0, 1, 1), entry(7, 1, 7, 7), entry(41, 1, 40, 40), entry(42, 1, 40, 40), entry(50, 1, 50, 50)];
    const members = treeMembers(procs, { marker: 'm', groups: [40] }, 7);
    expect(members.map((p) => p.pid)).toEqual([41, 42]);
    expect(memberGroups(members)).toEqual([40]);
    expect(memberGroups([entry(3, 1, 1, 1), entry(4, 1, 0, 0), entry(5, 1, process.pid, 1)])).toEqual([]);
  });

  describe('scanProcesses over a fake /proc', () => {
    let root: string;
    beforeAll(async () => {
      root = await mkdtemp(path.join(os.tmpdir(), 'warren-proc-'));
      await mkdir(path.join(root, '42'));
      await writeFile(path.join(root, '42', 'stat'), '42 (odd) name) S 7 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0');
      await writeFile(path.join(root, '42', 'environ'), 'PATH=/bin\0WARREN_EXEC_ID=feed\0');
      await mkdir(path.join(root, 'self'));
    });
    afterAll(() => rm(root, { recursive: true, force: true }));

    it('parses stat fields after a command name holding spaces and parentheses', () => {
      expect(scanProcesses(root)).toEqual([{ pid: 42, state: 'S', ppid: 7, pgid: 42, sid: 42, startTicks: 12345, marker: 'feed' }]);
    });

    it("for a tree's kill, skips the environment of processes whose membership it cannot change, and counts the vanished", async () => {
      const proc = await mkdtemp(path.join(os.tmpdir(), 'warren-proc-'));
      try {
        const add = async (pid: number, stat: string | undefined, environ: string) => {
          await mkdir(path.join(proc, String(pid)));
          if (stat !== undefined) await writeFile(path.join(proc, String(pid), 'stat'), stat);
          await writeFile(path.join(proc, String(pid), 'environ'), environ);
        };
        const stat = (pid: number, ppid: number, group: number) => `${pid} (sh) S ${ppid} ${group} ${group} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0`;
        await add(1, stat(1, 0, 1), 'WARREN_EXEC_ID=m\0'); // pid 1: never read, never a member
        await add(7, stat(7, 1, 7), 'WARREN_EXEC_ID=m\0'); // "self": never read
        await add(20, stat(20, 7, 20), 'WARREN_EXEC_ID=other\0'); // the leader: a member by its group, environment not read
        await add(30, stat(30, 7, 30), 'WARREN_EXEC_ID=m\0'); // escaped the group: found by its marker
        await add(31, undefined, ''); // listed, gone before its stat was read
        const scan = scanForTree(proc, { marker: 'm', leaderPid: 20 }, 7);
        expect(scan.vanished).toBe(1);
        expect(scan.entries.sort((a, b) => a.pid - b.pid).map((e) => [e.pid, e.marker])).toEqual([
          [1, undefined],
          [7, undefined],
          [20, undefined],
          [30, 'm'],
        ]);
        expect(treeMembers(scan.entries, { marker: 'm', leaderPid: 20 }, 7).map((p) => p.pid)).toEqual([20, 30]);
        // Without a selector, as before: every environment is read.
        expect(scanProcesses(proc).find((e) => e.pid === 1)?.marker).toBe('m');
      } finally {
        await rm(proc, { recursive: true, force: true });
      }
    });
  });
});
