import { lstat, readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { CodedError, type Result } from '@warren/protocol';

/** The most workspace entries {@link workspaceBytes} counts before it gives up (a sample must stay cheap). */
export const WORKSPACE_ENTRY_CAP = 50_000;

type Usage = Result<'system.usage'>;

/**
 * What the daemon's own container uses, from its cgroup files and its network namespace: the
 * figures the Kubernetes provider serves as a sandbox's metrics without a cluster metrics
 * pipeline. cgroup v2 (`cpu.stat`, `memory.current`, ...) when `/sys/fs/cgroup/cgroup.controllers`
 * exists, else v1 (`cpuacct.usage`, `memory.usage_in_bytes`, ... in each controller's folder, which
 * the runtime mounts as the container's own). Memory leaves out the page cache the kernel can
 * drop (`inactive_file`), as `docker stats` does. NOT_SUPPORTED when neither layout is readable.
 *
 * @example
 * await readUsage('/sys/fs/cgroup', '/proc/net/dev', '/workspace'); // { cgroup: 'v2', cpuSeconds: 1.2, ... }
 */
export async function readUsage(cgroupRoot = '/sys/fs/cgroup', netDev = '/proc/net/dev', workspace?: string): Promise<Usage> {
  const usage = (await readV2(cgroupRoot)) ?? (await readV1(cgroupRoot));
  if (!usage)
    throw new CodedError('NOT_SUPPORTED', `The daemon cannot read its container's cgroup under ${cgroupRoot} (neither cgroup v2 nor v1 files are there).`);
  const network = await readNetwork(netDev);
  const bytes = workspace === undefined ? undefined : await workspaceBytes(workspace);
  return { ...usage, ...(network ? { network } : {}), ...(bytes === undefined ? {} : { workspaceBytes: bytes }) };
}

async function text(file: string): Promise<string | undefined> {
  return readFile(file, 'utf8').then(
    (t) => t.trim(),
    () => undefined,
  );
}

async function int(file: string): Promise<number | undefined> {
  const raw = await text(file);
  if (raw === undefined || !/^\d+$/.test(raw)) return undefined;
  return Number(raw);
}

function keyed(raw: string | undefined): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of (raw ?? '').split('\n')) {
    const [key, value] = line.split(/\s+/);
    if (key && value && /^\d+$/.test(value)) out.set(key, Number(value));
  }
  return out;
}

/** A cgroup limit: v2 writes `max`, v1 a huge number, for none. */
function limit(value: number | undefined): number | undefined {
  return value === undefined || value >= 2 ** 62 ? undefined : value;
}

async function readV2(root: string): Promise<Omit<Usage, 'network' | 'workspaceBytes'> | undefined> {
  if ((await text(path.join(root, 'cgroup.controllers'))) === undefined) return undefined;
  const cpu = keyed(await text(path.join(root, 'cpu.stat')));
  const memory = await int(path.join(root, 'memory.current'));
  if (memory === undefined || !cpu.has('usage_usec')) return undefined;
  const stat = keyed(await text(path.join(root, 'memory.stat')));
  const memoryLimit = limit(await int(path.join(root, 'memory.max')));
  const peak = await int(path.join(root, 'memory.peak'));
  const pidsLimit = limit(await int(path.join(root, 'pids.max')));
  return {
    cgroup: 'v2',
    cpuSeconds: cpu.get('usage_usec')! / 1e6,
    memoryBytes: Math.max(0, memory - (stat.get('inactive_file') ?? 0)),
    ...(memoryLimit === undefined ? {} : { memoryLimitBytes: memoryLimit }),
    ...(peak === undefined ? {} : { memoryPeakBytes: peak }),
    pids: (await int(path.join(root, 'pids.current'))) ?? 0,
    ...(pidsLimit === undefined ? {} : { pidsLimit }),
  };
}

async function readV1(root: string): Promise<Omit<Usage, 'network' | 'workspaceBytes'> | undefined> {
  const first = async (names: string[]) => {
    for (const name of names) {
      const value = await int(path.join(root, name));
      if (value !== undefined) return value;
    }
    return undefined;
  };
  const cpuNs = await first(['cpuacct/cpuacct.usage', 'cpu,cpuacct/cpuacct.usage', 'cpuacct,cpu/cpuacct.usage']);
  const memory = await int(path.join(root, 'memory/memory.usage_in_bytes'));
  if (cpuNs === undefined || memory === undefined) return undefined;
  const stat = keyed(await text(path.join(root, 'memory/memory.stat')));
  const memoryLimit = limit(await int(path.join(root, 'memory/memory.limit_in_bytes')));
  const peak = await int(path.join(root, 'memory/memory.max_usage_in_bytes'));
  const pidsLimit = limit(await int(path.join(root, 'pids/pids.max')));
  return {
    cgroup: 'v1',
    cpuSeconds: cpuNs / 1e9,
    memoryBytes: Math.max(0, memory - (stat.get('total_inactive_file') ?? 0)),
    ...(memoryLimit === undefined ? {} : { memoryLimitBytes: memoryLimit }),
    ...(peak === undefined ? {} : { memoryPeakBytes: peak }),
    pids: (await int(path.join(root, 'pids/pids.current'))) ?? 0,
    ...(pidsLimit === undefined ? {} : { pidsLimit }),
  };
}

/** Bytes received and sent on every interface but loopback, from `/proc/net/dev` of the daemon's (the pod's) network namespace. */
async function readNetwork(file: string): Promise<{ rxBytes: number; txBytes: number } | undefined> {
  const raw = await text(file);
  if (raw === undefined) return undefined;
  let rxBytes = 0;
  let txBytes = 0;
  for (const line of raw.split('\n').slice(2)) {
    const [name, rest] = line.split(':');
    if (!name || rest === undefined || name.trim() === 'lo') continue;
    const fields = rest.trim().split(/\s+/).map(Number);
    if (Number.isFinite(fields[0]) && Number.isFinite(fields[8])) {
      rxBytes += fields[0]!;
      txBytes += fields[8]!;
    }
  }
  return { rxBytes, txBytes };
}

/**
 * The workspace's allocated bytes, counted with lstat (links are not followed, other mounts are
 * not entered); undefined past {@link WORKSPACE_ENTRY_CAP} entries, so a sandbox with a million
 * files cannot make every sample slow.
 */
export async function workspaceBytes(root: string, cap = WORKSPACE_ENTRY_CAP): Promise<number | undefined> {
  let top;
  try {
    top = await lstat(root);
  } catch {
    return undefined;
  }
  let total = top.blocks * 512;
  let seen = 0;
  const folders = [root];
  for (let folder = folders.pop(); folder !== undefined; folder = folders.pop()) {
    let names: string[];
    try {
      names = await readdir(folder);
    } catch {
      continue;
    }
    for (const name of names) {
      if (++seen > cap) return undefined;
      const full = path.join(folder, name);
      try {
        const info = await lstat(full);
        total += info.blocks * 512;
        if (info.isDirectory() && info.dev === top.dev) folders.push(full);
      } catch {
        // gone meanwhile
      }
    }
  }
  return total;
}
