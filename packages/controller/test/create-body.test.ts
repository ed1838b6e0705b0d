import { describe, expect, it } from '@jest/globals';
import { CodedError, containerEnv } from '@warren/protocol';
import { chooseChannel } from '../src/docker/daemon-channel.js';
import { containerCreateBody } from '../src/docker/container-spec.js';
import { checkRoot, planSandbox, type PlanContext, type SandboxPlan } from '../src/sandbox-plan.js';
import { sandboxLabels } from '../src/labels.js';
import { loadConfig } from '../src/config.js';

const context: PlanContext = {
  config: {
    defaultImage: 'warren/sandbox:latest',
    limits: { memoryMb: 1024, cpus: 1, pidsLimit: 512, ttlSeconds: 3600, tmpMb: 256, openFiles: 4096, fileSizeMb: 4096, diskMb: 1024 },
    maxLimits: { memoryMb: 4096, cpus: 4, pidsLimit: 4096, ttlSeconds: 86400, tmpMb: 1024, openFiles: 8192, fileSizeMb: 8192, diskMb: 65536 },
    allowedMountRoots: ['/srv/warren-data'],
    allowBridgeNetwork: true,
    stateDir: '/var/lib/warren',
  },
  runtimes: ['runc'],
};

function bodyFor(
  plan: SandboxPlan,
  channel: Parameters<typeof containerCreateBody>[0]['channel'] = { kind: 'socket', socketDirOnHost: '/var/lib/warren/sandboxes/abc123' },
) {
  return containerCreateBody({
    id: 'abc123',
    image: plan.image,
    env: plan.env,
    labels: sandboxLabels({
      id: 'abc123',
      owner: 'owner1',
      image: plan.image,
      createdAt: new Date('2026-01-01T00:00:00Z'),
      expiresAt: new Date('2026-01-01T01:00:00Z'),
      settings: plan.settings,
      policy: plan.policy,
      labels: plan.labels,
    }),
    channel,
    runtimeVolume: 'warren-runtime-0123',
    settings: plan.settings,
  });
}

/** The hardened part of every body, whatever was asked. */
const HARDENED = {
  Init: true,
  CapDrop: ['ALL'],
  CapAdd: ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID', 'KILL', 'SYS_PTRACE', 'NET_BIND_SERVICE'],
  SecurityOpt: ['no-new-privileges=true'],
  Privileged: false,
  PidMode: '',
  IpcMode: 'private',
  Devices: [],
  AutoRemove: false,
  RestartPolicy: { Name: 'no' },
};

function refusal(body: unknown): CodedError {
  try {
    planSandbox(body, context);
  } catch (err) {
    if (err instanceof CodedError) return err;
    throw err;
  }
  throw new Error(`planSandbox accepted ${JSON.stringify(body)}`);
}

describe('the container-create body', () => {
  it('is exactly this for an empty request: commands as 1000, the daemon as root with few capabilities, no network, read-only root, limits with swap equal to memory', () => {
    const body = bodyFor(planSandbox({}, context));
    expect(body).toEqual({
      name: 'warren-abc123',
      Image: 'warren/sandbox:latest',
      Entrypoint: [
        '/opt/warren/ld-linux.so',
        '--library-path',
        '/opt/warren/lib',
        '/opt/warren/node',
        '--max-semi-space-size=1',
        '--optimize-for-size',
        '--expose-gc',
        '/opt/warren/warren-agent.mjs',
        '--socket',
        '/run/warren/agent.sock',
        '--secret-file',
        '/run/warren/secret',
        '--root',
        '/workspace',
        '--home',
        '/workspace',
        '--user',
        '1000:1000',
        '--own-root',
      ],
      Cmd: [],
      User: '0:0',
      WorkingDir: '/workspace',
      Env: containerEnv({}),
      Labels: {
        'warren.sandbox': 'abc123',
        'warren.owner': 'owner1',
        'warren.image': 'warren/sandbox:latest',
        'warren.created-at': '2026-01-01T00:00:00.000Z',
        'warren.expires-at': '2026-01-01T01:00:00.000Z',
        'warren.settings': JSON.stringify({
          cpus: 1,
          memoryMb: 1024,
          pidsLimit: 512,
          network: 'none',
          runtime: 'runc',
          user: '1000:1000',
          workdir: '/workspace',
          ttlSeconds: 3600,
          mounts: [],
          readOnlyRootfs: true,
          tmpMb: 256,
          openFiles: 4096,
          fileSizeMb: 4096,
          diskMb: 1024,
        }),
      },
      NetworkDisabled: true,
      HostConfig: {
        ...HARDENED,
        ReadonlyRootfs: true,
        Tmpfs: { '/tmp': 'rw,exec,nosuid,nodev,size=256m,mode=1777', '/run/warren-egress': 'rw,noexec,nosuid,nodev,size=2m,mode=0755' },
        Ulimits: [
          { Name: 'nofile', Soft: 4096, Hard: 4096 },
          { Name: 'fsize', Soft: 4096 * 1024 * 1024, Hard: 4096 * 1024 * 1024 },
        ],
        NetworkMode: 'none',
        PidsLimit: 512,
        Memory: 1024 * 1024 * 1024,
        MemorySwap: 1024 * 1024 * 1024,
        NanoCpus: 1e9,
        Binds: ['/var/lib/warren/sandboxes/abc123:/run/warren:rw'],
        Mounts: [
          { Type: 'volume', Source: 'warren-runtime-0123', Target: '/opt/warren', ReadOnly: true },
          { Type: 'volume', Source: '', Target: '/workspace', ReadOnly: false },
        ],
      },
    });
  });

  it('keeps every hardening setting when a request asks for all it may: bridge, resources, user, mounts', () => {
    const plan = planSandbox(
      {
        image: 'warren/test-debian:latest',
        env: { A: '1' },
        cpus: 2,
        memoryMb: 2048,
        pidsLimit: 100,
        network: 'bridge',
        user: '1234:1234',
        workdir: '/workspace/src',
        readOnlyRootfs: false,
        tmpMb: 1024,
        openFiles: 8192,
        fileSizeMb: 100,
        labels: { team: 'red' },
        mounts: [
          { hostPath: '/srv/warren-data/ds1/', path: '/mnt/ds1' },
          { hostPath: '/srv/warren-data/out', path: '/workspace/out', readOnly: false },
        ],
        policy: { root: '/workspace', readOnly: true },
      },
      context,
    );
    const body = bodyFor(plan);
    expect(body.HostConfig).toEqual({
      ...HARDENED,
      ReadonlyRootfs: false,
      Tmpfs: { '/tmp': 'rw,exec,nosuid,nodev,size=1024m,mode=1777', '/run/warren-egress': 'rw,noexec,nosuid,nodev,size=2m,mode=0755' },
      Ulimits: [
        { Name: 'nofile', Soft: 8192, Hard: 8192 },
        { Name: 'fsize', Soft: 100 * 1024 * 1024, Hard: 100 * 1024 * 1024 },
      ],
      NetworkMode: 'bridge',
      PidsLimit: 100,
      Memory: 2048 * 1024 * 1024,
      MemorySwap: 2048 * 1024 * 1024,
      NanoCpus: 2e9,
      Binds: ['/var/lib/warren/sandboxes/abc123:/run/warren:rw'],
      Mounts: [
        { Type: 'volume', Source: 'warren-runtime-0123', Target: '/opt/warren', ReadOnly: true },
        { Type: 'volume', Source: '', Target: '/workspace', ReadOnly: false },
        { Type: 'bind', Source: '/srv/warren-data/ds1', Target: '/mnt/ds1', ReadOnly: true, BindOptions: { Propagation: 'rprivate' } },
        { Type: 'bind', Source: '/srv/warren-data/out', Target: '/workspace/out', ReadOnly: false, BindOptions: { Propagation: 'rprivate' } },
      ],
    });
    expect(body).toMatchObject({
      User: '0:0',
      WorkingDir: '/workspace/src',
      Env: containerEnv({ A: '1' }),
      NetworkDisabled: false,
      Image: 'warren/test-debian:latest',
    });
    expect(body.Entrypoint?.slice(-3)).toEqual(['--user', '1234:1234', '--own-root']);
    expect(body.Labels).toMatchObject({ 'warren.label.team': 'red', 'warren.policy': JSON.stringify({ root: '/workspace', readOnly: true }) });
  });

  it("binds the egress relay's resolver file read-only over /etc/resolv.conf only when asked (the engine refuses Dns with network none)", () => {
    const plan = planSandbox({}, context);
    const spec = (resolvConfOnHost?: string) => ({
      id: 'abc123',
      image: plan.image,
      env: plan.env,
      labels: {},
      settings: plan.settings,
      channel: { kind: 'socket' as const, socketDirOnHost: '/var/lib/warren/sandboxes/abc123' },
      runtimeVolume: 'warren-runtime',
      resolvConfOnHost,
    });
    const withResolver = containerCreateBody(spec('/var/lib/warren/sandboxes/abc123/resolv.conf')).HostConfig?.Mounts ?? [];
    expect(withResolver).toContainEqual({
      Type: 'bind',
      Source: '/var/lib/warren/sandboxes/abc123/resolv.conf',
      Target: '/etc/resolv.conf',
      ReadOnly: true,
      BindOptions: { Propagation: 'rprivate' },
    });
    expect((containerCreateBody(spec()).HostConfig?.Mounts ?? []).some((m) => m.Target === '/etc/resolv.conf')).toBe(false);
    // The exec channel binds the runtime volume's copy, below the engine's root, where Docker requires rslave.
    const fromVolume = '/var/lib/docker/volumes/warren-runtime/_data/egress/resolv.conf';
    const exec = containerCreateBody({ ...spec(fromVolume), channel: { kind: 'exec', daemonSecret: 's'.repeat(43) } }).HostConfig?.Mounts ?? [];
    expect(exec).toContainEqual({ Type: 'bind', Source: fromVolume, Target: '/etc/resolv.conf', ReadOnly: true, BindOptions: { Propagation: 'rslave' } });
  });

  it('names the gVisor runtime only when asked and registered', () => {
    const plan = planSandbox({ runtime: 'runsc' }, { ...context, runtimes: ['runc', 'runsc'] });
    expect(bodyFor(plan).HostConfig?.Runtime).toBe('runsc');
    expect(bodyFor(planSandbox({}, context)).HostConfig).not.toHaveProperty('Runtime');
    expect(refusal({ runtime: 'runsc' })).toMatchObject({ code: 'INVALID_PARAMS', message: expect.stringContaining('available: runc') });
    expect(() => planSandbox({ runtime: 'runsc', network: 'bridge' }, { ...context, runtimes: ['runc', 'runsc'], networklessRuntimes: ['runsc'] })).toThrow(
      /--network=none/,
    );
  });

  it("with the exec channel binds no host folder: the daemon listens in a tmpfs of root's and takes its secret from a variable it unsets", () => {
    const body = bodyFor(planSandbox({}, context), { kind: 'exec', daemonSecret: 's'.repeat(43) });
    expect(body.HostConfig?.Binds).toEqual([]);
    expect(body.HostConfig?.Tmpfs).toMatchObject({ '/run/warren': 'rw,noexec,nosuid,nodev,size=1m,mode=0700' });
    expect(body.Entrypoint).toEqual(expect.arrayContaining(['--socket', '/run/warren/agent.sock', '--secret-env', 'WARREN_AGENT_SECRET']));
    expect(body.Entrypoint).not.toContain('--secret-file');
    expect(body.Env).toContain(`WARREN_AGENT_SECRET=${'s'.repeat(43)}`);
    expect(body.HostConfig).toMatchObject(HARDENED);
  });

  it("chooses the socket channel only where the engine certainly shares this machine's folders", () => {
    const here = { localEngine: true, engineInVm: false, sharesFolders: true };
    expect(chooseChannel('auto', here)).toBe('socket');
    expect(chooseChannel('auto', { ...here, localEngine: false })).toBe('exec');
    expect(chooseChannel('auto', { ...here, engineInVm: true })).toBe('exec');
    expect(chooseChannel('auto', { ...here, sharesFolders: false })).toBe('exec');
    expect(chooseChannel('exec', here)).toBe('exec');
    expect(chooseChannel('socket', { ...here, localEngine: false })).toBe('socket');
  });

  it('replaces the workspace volume when a host folder is mounted at /workspace', () => {
    const body = bodyFor(planSandbox({ mounts: [{ hostPath: '/srv/warren-data/repo', path: '/workspace', readOnly: false }] }, context));
    expect(body.HostConfig?.Mounts?.map((m) => m.Target)).toEqual(['/opt/warren', '/workspace']);
    expect(body.HostConfig?.Mounts?.[1]).toMatchObject({ Type: 'bind', Source: '/srv/warren-data/repo' });
    // A host folder keeps its owner: the daemon hands over only a workspace of its own.
    expect(body.Entrypoint).not.toContain('--own-root');
  });
});

describe('hostile create requests are refused with a clear error', () => {
  const forbidden: [string, unknown][] = [
    ['privileged mode', { privileged: true }],
    ['privileged: false is still not an accepted field', { privileged: false }],
    ['added capabilities', { capAdd: ['SYS_ADMIN'] }],
    ['the host PID namespace', { pidMode: 'host' }],
    ['the host IPC namespace', { ipc: 'host' }],
    ['the host network', { network: 'host' }],
    ["another container's network", { network: 'container:abc' }],
    ['a raw networkMode', { networkMode: 'host' }],
    ['raw binds', { binds: ['/var/run/docker.sock:/var/run/docker.sock'] }],
    ['a raw HostConfig', { HostConfig: { Privileged: true } }],
    ['devices', { devices: ['/dev/kvm'] }],
    ['security options', { securityOpt: ['seccomp=unconfined'] }],
    ['the root user', { user: '0' }],
    ['the root user by name', { user: 'root' }],
    ['gid 0', { user: '1000:0' }],
    ['a bind of the Docker socket', { mounts: [{ hostPath: '/var/run/docker.sock', path: '/var/run/docker.sock' }] }],
    ['a bind of the Docker socket below an allowed folder', { mounts: [{ hostPath: '/srv/warren-data/docker.sock', path: '/mnt/d' }] }],
    ['a host path outside the allowed folders', { mounts: [{ hostPath: '/etc', path: '/mnt/etc' }] }],
    ['a sibling of an allowed folder sharing its prefix', { mounts: [{ hostPath: '/srv/warren-data2', path: '/mnt/x' }] }],
    ['.. out of an allowed folder', { mounts: [{ hostPath: '/srv/warren-data/../../etc', path: '/mnt/x' }] }],
    ['a mount over the runtime', { mounts: [{ hostPath: '/srv/warren-data/x', path: '/opt/warren' }] }],
    ['a mount over the daemon socket folder', { mounts: [{ hostPath: '/srv/warren-data/x', path: '/run/warren/x' }] }],
    ['a mount over /', { mounts: [{ hostPath: '/srv/warren-data/x', path: '/' }] }],
    ['a mount over /proc', { mounts: [{ hostPath: '/srv/warren-data/x', path: '/proc' }] }],
  ];
  it.each(forbidden)('refuses %s with FORBIDDEN', (_name, body) => {
    const err = refusal(body);
    expect(err.code).toBe('FORBIDDEN');
    expect(err.message).toMatch(/^Refused|allows no|does not allow/);
  });

  it('refuses every host mount when the operator allowed none', () => {
    expect(() =>
      planSandbox({ mounts: [{ hostPath: '/srv/warren-data/x', path: '/mnt/x' }] }, { ...context, config: { ...context.config, allowedMountRoots: [] } }),
    ).toThrow(/allows no host mounts/);
  });

  it('refuses the state folder even below an allowed folder', () => {
    const err = (() => {
      try {
        planSandbox({ mounts: [{ hostPath: '/var/lib', path: '/mnt/x' }] }, { ...context, config: { ...context.config, allowedMountRoots: ['/var'] } });
      } catch (e) {
        return e as CodedError;
      }
      return undefined;
    })();
    expect(err).toMatchObject({ code: 'FORBIDDEN', message: expect.stringContaining('state folder') });
  });

  const invalid: [string, unknown][] = [
    ['an unknown field', { colour: 'blue' }],
    ['cpus above the maximum', { cpus: 16 }],
    ['memory above the maximum', { memoryMb: 999_999 }],
    ['a non-numeric user', { user: 'warren' }],
    ['a relative workdir', { workdir: 'src' }],
    ['a relative mount path', { mounts: [{ hostPath: '/srv/warren-data/x', path: 'mnt' }] }],
    ['a bad policy', { policy: { root: 'relative' } }],
    ['a body that is not an object', [1, 2]],
  ];
  it.each(invalid)('refuses %s with INVALID_PARAMS that names what is allowed', (_name, body) => {
    const err = refusal(body);
    expect(err.code).toBe('INVALID_PARAMS');
  });

  it('refuses bridge unless the operator turned it on: a bridge sandbox is past the egress gateway', () => {
    expect(loadConfig({}).allowBridgeNetwork).toBe(false);
    expect(loadConfig({ WARREN_ALLOW_BRIDGE_NETWORK: 'true' }).allowBridgeNetwork).toBe(true);
    expect(() => planSandbox({ network: 'bridge' }, { ...context, config: { ...context.config, allowBridgeNetwork: false } })).toThrow(
      /does not allow network 'bridge'/,
    );
  });
});

describe('the workspace folder', () => {
  it('moves the disk, the policy root, the working folder and HOME together; reserved places are refused', () => {
    const plan = planSandbox({ workspace: '/home/user/' }, context);
    expect(plan.settings).toMatchObject({ workspace: '/home/user', workdir: '/home/user' });
    expect(plan.policy).toEqual({ root: '/home/user', readOnly: false });
    const body = bodyFor(plan);
    expect(body.HostConfig?.Mounts?.find((m) => m.Target === '/home/user')).toMatchObject({ Type: 'volume' });
    expect(body.HostConfig?.Mounts?.some((m) => m.Target === '/workspace')).toBe(false);
    expect(body.Entrypoint).toEqual(expect.arrayContaining(['--root', '/home/user', '--home', '/home/user', '--own-root']));
    // The default stays as it was: no workspace setting, no policy of the plan's own.
    expect(planSandbox({}, context).settings).not.toHaveProperty('workspace');
    expect(planSandbox({}, context).policy).toBeUndefined();
    for (const bad of ['/', '/tmp/x', '/opt/warren', '/run/warren/y', '/proc', '/dev/shm', '/opt', '/run', '/home/user/../../run'])
      expect(() => planSandbox({ workspace: bad }, context)).toThrow(/Refused workspace/);
  });

  it('gives a root sandbox root on request, sudo and a writable root file system, and no capability that reaches past its user namespace', () => {
    const plan = planSandbox({ root: true }, context);
    expect(plan.settings).toMatchObject({ root: true, readOnlyRootfs: false, user: '1000:1000' });
    expect(planSandbox({ root: true, readOnlyRootfs: true }, context).settings.readOnlyRootfs).toBe(true);
    const body = bodyFor(plan);
    expect(body.HostConfig!.CapAdd).toEqual([...HARDENED.CapAdd, 'FSETID', 'SETFCAP', 'SETPCAP', 'SYS_CHROOT', 'AUDIT_WRITE']);
    expect(body.HostConfig!.SecurityOpt).toEqual([]);
    expect(body.HostConfig!.ReadonlyRootfs).toBe(false);
    expect(body.Entrypoint).toContain('--allow-root');
    // Without root: none of it.
    const plain = bodyFor(planSandbox({}, context));
    expect(plain.Entrypoint).not.toContain('--allow-root');
    expect(plain.HostConfig).toMatchObject({ CapAdd: HARDENED.CapAdd, SecurityOpt: HARDENED.SecurityOpt, ReadonlyRootfs: true });
  });

  it('allows root only to a tenant the operator allowed, and only behind user-namespace remap, rootless or gVisor', () => {
    const root = { root: true, runtime: 'runc' } as const;
    expect(() => checkRoot(root, 'acme', undefined, { engine: 'user-namespace remap' })).toThrow(/allowRoot/);
    expect(() => checkRoot(root, 'acme', false, { engine: 'rootless' })).toThrow(/allowRoot/);
    expect(() => checkRoot(root, 'acme', true, {})).toThrow(/host's root/);
    expect(() => checkRoot(root, 'acme', true, { unsupported: 'the kubernetes provider does not run root sandboxes yet' })).toThrow(/kubernetes/);
    checkRoot(root, 'acme', true, { engine: 'user-namespace remap' });
    checkRoot(root, 'acme', true, { engine: 'rootless' });
    checkRoot({ root: true, runtime: 'runsc' }, 'acme', true, {});
    checkRoot({ runtime: 'runc' }, 'acme', undefined, {});
  });
});
