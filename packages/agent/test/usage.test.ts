import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from '@jest/globals';
import { readUsage, workspaceBytes } from '../src/services/usage.js';

const dirs: string[] = [];
async function tree(files: Record<string, string>): Promise<string> {
  const root = await mkdtemp(path.join(os.tmpdir(), 'warren-usage-'));
  dirs.push(root);
  for (const [name, content] of Object.entries(files)) {
    await mkdir(path.dirname(path.join(root, name)), { recursive: true });
    await writeFile(path.join(root, name), content);
  }
  return root;
}
afterEach(async () => {
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

const netDev = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:   999       9    0    0    0     0          0         0      999       9    0    0    0     0       0          0
  eth0:  1000      10    0    0    0     0          0         0     2000      20    0    0    0     0       0          0
`;

describe('the daemon reading its own cgroup', () => {
  it('reads cgroup v2: cpu in microseconds, memory without inactive file pages, no limit where max', async () => {
    const root = await tree({
      'cgroup.controllers': 'cpu memory pids',
      'cpu.stat': 'usage_usec 2500000\nuser_usec 2000000\n',
      'memory.current': '104857600',
      'memory.stat': 'anon 1\ninactive_file 4857600\n',
      'memory.max': '268435456',
      'memory.peak': '209715200',
      'pids.current': '7',
      'pids.max': 'max',
      'net/dev': netDev,
    });
    expect(await readUsage(root, path.join(root, 'net/dev'))).toEqual({
      cgroup: 'v2',
      cpuSeconds: 2.5,
      memoryBytes: 100_000_000,
      memoryLimitBytes: 268435456,
      memoryPeakBytes: 209715200,
      pids: 7,
      network: { rxBytes: 1000, txBytes: 2000 },
    });
  });

  it('reads cgroup v1 from each controller folder, and treats the huge number as no limit', async () => {
    const root = await tree({
      'cpu,cpuacct/cpuacct.usage': '3000000000',
      'memory/memory.usage_in_bytes': '50000000',
      'memory/memory.stat': 'cache 10\ntotal_inactive_file 10000000\n',
      'memory/memory.limit_in_bytes': '9223372036854771712',
      'memory/memory.max_usage_in_bytes': '60000000',
      'pids/pids.current': '3',
      'pids/pids.max': '1024',
    });
    expect(await readUsage(root, path.join(root, 'no-net'))).toEqual({
      cgroup: 'v1',
      cpuSeconds: 3,
      memoryBytes: 40_000_000,
      memoryPeakBytes: 60_000_000,
      pids: 3,
      pidsLimit: 1024,
    });
  });

  it('says NOT_SUPPORTED where no cgroup is readable', async () => {
    const root = await tree({ 'unrelated.txt': 'x' });
    await expect(readUsage(root)).rejects.toMatchObject({ code: 'NOT_SUPPORTED' });
  });

  it('counts the workspace without following links, and gives up past the cap', async () => {
    const root = await tree({ 'a.bin': 'x'.repeat(64 * 1024), 'deep/b.bin': 'y'.repeat(16 * 1024) });
    // A link to a big folder outside must not be counted.
    await symlink('/usr', path.join(root, 'usr-link'));
    const bytes = (await workspaceBytes(root))!;
    expect(bytes).toBeGreaterThanOrEqual(80 * 1024);
    expect(bytes).toBeLessThan(1024 * 1024);
    expect(await workspaceBytes(root, 2)).toBeUndefined();
    expect(await workspaceBytes(path.join(root, 'missing'))).toBeUndefined();
  });
});
