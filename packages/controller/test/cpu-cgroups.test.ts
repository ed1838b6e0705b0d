import { describe, expect, it } from '@jest/globals';
import { containerCreateBody } from '../src/docker/container-spec.js';
import { cpuHierarchy, CPU_CGROUP_IN_SANDBOX, DAEMON_CPUS, v1Hierarchy } from '../src/docker/cpu-cgroups.js';
import { TREE_CGROUP_IN_SANDBOX } from '../src/docker/tree-cgroups.js';

const SETTINGS = {
  cpus: 0.01,
  memoryMb: 256,
  pidsLimit: 64,
  network: 'none' as const,
  runtime: 'runc' as const,
  user: '1000:1000',
  workdir: '/workspace',
  ttlSeconds: 60,
  mounts: [],
};

function body(cpuCgroupOnHost?: string, treeCgroupOnHost?: string) {
  return containerCreateBody({
    id: 'abc123',
    image: 'warren/sandbox:latest',
    env: {},
    labels: {},
    channel: { kind: 'socket', socketDirOnHost: '/var/lib/warren/sandboxes/abc123' },
    runtimeVolume: 'warren-runtime-0123',
    settings: SETTINGS,
    cpuCgroupOnHost,
    treeCgroupOnHost,
  });
}

describe("the daemon's own CPU share (cpu-cgroups.ts)", () => {
  it('finds the cgroup v1 cpu hierarchy at its root, co-mounted with cpuacct or not', () => {
    const separate = [
      '35 25 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct',
      '34 25 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu',
    ].join('\n');
    expect(cpuHierarchy(separate)).toEqual({ mountPoint: '/sys/fs/cgroup/cpu', accountsCpu: false });
    expect(cpuHierarchy('30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct')).toEqual({
      mountPoint: '/sys/fs/cgroup/cpu,cpuacct',
      accountsCpu: true,
    });
  });

  it('refuses a hierarchy seen from inside a container, cgroup v2 alone, and cpuset (a name that starts with cpu)', () => {
    expect(cpuHierarchy('30 25 0:26 /docker/0123abcd /sys/fs/cgroup/cpu ro - cgroup cgroup rw,cpu')).toBeUndefined();
    expect(cpuHierarchy('30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate')).toBeUndefined();
    expect(cpuHierarchy('30 25 0:26 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset')).toBeUndefined();
  });

  it("binds the sandbox's cgroups into the daemon's folder, tells the daemon, and caps the container at both shares", () => {
    const split = body('/sys/fs/cgroup/cpu/warren/abc123');
    expect(split.HostConfig?.Mounts).toContainEqual({
      Type: 'bind',
      Source: '/sys/fs/cgroup/cpu/warren/abc123',
      Target: CPU_CGROUP_IN_SANDBOX,
      ReadOnly: false,
      BindOptions: { Propagation: 'rprivate' },
    });
    expect(split.Entrypoint).toEqual(expect.arrayContaining(['--cpu-cgroup', CPU_CGROUP_IN_SANDBOX]));
    expect(split.HostConfig?.NanoCpus).toBe(Math.round((0.01 + DAEMON_CPUS) * 1e9));
    // Without a share of its own the daemon is held to the sandbox's limit, as the engine sets it.
    const shared = body();
    expect(shared.HostConfig?.NanoCpus).toBe(1e7);
    expect(shared.Entrypoint).not.toContain('--cpu-cgroup');
    expect(shared.HostConfig?.Mounts?.map((m) => m.Target)).not.toContain(CPU_CGROUP_IN_SANDBOX);
  });

  it("finds Warren's own hierarchy without controllers by its name, and binds a sandbox's tree cgroups into the daemon's folder", () => {
    const mountinfo = [
      '40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd',
      '47 27 0:40 / /run/warren-cgroup rw,relatime - cgroup cgroup rw,name=warren',
    ].join('\n');
    expect(v1Hierarchy(mountinfo, (options) => options.includes('name=warren'))).toEqual({ mountPoint: '/run/warren-cgroup', options: ['rw', 'name=warren'] });
    expect(v1Hierarchy(mountinfo.split('\n')[0]!, (options) => options.includes('name=warren'))).toBeUndefined();
    const bound = body(undefined, '/run/warren-cgroup/sandboxes/abc123');
    expect(bound.HostConfig?.Mounts).toContainEqual({
      Type: 'bind',
      Source: '/run/warren-cgroup/sandboxes/abc123',
      Target: TREE_CGROUP_IN_SANDBOX,
      ReadOnly: false,
      BindOptions: { Propagation: 'rprivate' },
    });
    expect(bound.Entrypoint).toEqual(expect.arrayContaining(['--tree-cgroup', TREE_CGROUP_IN_SANDBOX]));
    expect(body().Entrypoint).not.toContain('--tree-cgroup');
  });
});
