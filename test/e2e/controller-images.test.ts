import { chown, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';

// Any image with /bin/sh runs the agent from the read-only runtime volume, with a writable
// /workspace for the sandbox user even when the image has none; and the container is hardened.
describe('sandboxes on three images, hardened', () => {
  let warren: TestController;
  const sandboxes: Sandbox[] = [];

  let mountRoot: string;

  beforeAll(async () => {
    mountRoot = await mkdtemp(path.join(os.tmpdir(), 'warren-mounts-'));
    warren = await startTestController({ config: { allowedMountRoots: [mountRoot] } });
  });
  afterAll(async () => {
    for (const s of sandboxes) await s.kill().catch(() => undefined);
    await warren?.[Symbol.asyncDispose]();
    await rm(mountRoot, { recursive: true, force: true });
  });

  const create = async (options: Parameters<typeof Sandbox.create>[0] = {}) => {
    const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, ...options });
    sandboxes.push(sandbox);
    return sandbox;
  };

  it.each([
    ['the default image', 'warren/sandbox:latest'],
    ['plain Debian (no /workspace in the image)', 'warren/test-debian:latest'],
    ['busybox without glibc (no /workspace in the image)', 'warren/test-busybox:latest'],
  ])('%s runs the agent: write, read back, exec', async (_name, image) => {
    const sandbox = await create({ image });
    const text = `hello from ${image}\n`;
    await sandbox.files.write('/workspace/hello.txt', text);
    expect(await sandbox.files.read('/workspace/hello.txt')).toBe(text);
    const run = await sandbox.commands.run(['sh', '-c', 'cat /workspace/hello.txt; id -u; touch /workspace/made-by-shell && echo ok']);
    expect(run).toMatchObject({ exitCode: 0, stdout: `${text}1000\nok\n` });
    expect((await sandbox.info()).image).toBe(image);
  });

  it('applies user, workdir and resource options, and /workspace belongs to that user', async () => {
    const sandbox = await create({ image: 'warren/test-busybox:latest', user: '2000:2000', workdir: '/workspace', memoryMb: 256, pidsLimit: 64, cpus: 0.5 });
    const run = await sandbox.commands.run([
      'sh',
      '-c',
      'id -u; id -g; stat -c %u /workspace; cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes',
    ]);
    const lines = run.stdout.trim().split('\n');
    expect(lines.slice(0, 3)).toEqual(['2000', '2000', '2000']);
    expect(lines).toContain(String(256 * 1024 * 1024));
    if (lines.length >= 6) {
      expect(lines[4]).toBe('64');
      expect(lines[5]).toBe('50000 100000');
    }
    expect((await sandbox.info()).settings).toMatchObject({ user: '2000:2000', memoryMb: 256, pidsLimit: 64, cpus: 0.5, network: 'none', runtime: 'runc' });
  });

  it('probes from inside: uid 1000, no capabilities, no-new-privileges, seccomp filter, no docker socket, no network, mount and unshare refused, read-only root, capped /tmp, no setuid programs', async () => {
    const sandbox = await create();
    const script = [
      'echo uid=$(id -u)',
      'grep -E "^(CapEff|CapPrm|CapInh|CapAmb|CapBnd|NoNewPrivs|Seccomp):" /proc/self/status',
      'touch /etc/x 2>/dev/null && echo rootfs=writable || echo rootfs=read-only',
      'touch /tmp/x && echo tmp=writable || echo tmp=read-only',
      'echo tmpsize=$(df -k /tmp | tail -1 | tr -s " " | cut -d" " -f2)',
      'echo nofile=$(ulimit -n)',
      'echo fsize=$(ulimit -f)',
      'test -e /var/run/docker.sock && echo docker-sock=present || echo docker-sock=absent',
      'test -e /run/docker.sock && echo run-docker-sock=present || echo run-docker-sock=absent',
      'echo nets=$(ls /sys/class/net | tr "\\n" " ")',
      'python3 -c "import socket; s=socket.socket(); s.settimeout(2); s.connect((\'1.1.1.1\', 80))" 2>/dev/null && echo net=reachable || echo net=unreachable',
      'mount -t tmpfs none /tmp 2>/dev/null && echo mount=ok || echo mount=refused',
      'unshare -U -r true 2>/dev/null && echo unshare-user=ok || echo unshare-user=refused',
      'unshare -m true 2>/dev/null && echo unshare-mount=ok || echo unshare-mount=refused',
      'touch /opt/warren/x 2>/dev/null && echo runtime=writable || echo runtime=read-only',
      // The default image keeps no setuid or setgid program (images/sandbox/Dockerfile).
      'echo setid=$(find / -xdev -perm /6000 -type f 2>/dev/null | wc -l)',
    ].join('; ');
    const { stdout } = await sandbox.commands.run(['sh', '-c', script]);
    const facts = Object.fromEntries(
      stdout
        .trim()
        .split('\n')
        .map((line) => {
          const [key, ...rest] = line.split(/[=:]/);
          return [key!.trim(), rest.join(':').trim()];
        }),
    );
    expect(facts).toMatchObject({
      uid: '1000',
      CapEff: '0000000000000000',
      CapPrm: '0000000000000000',
      CapInh: '0000000000000000',
      CapAmb: '0000000000000000',
      // The bounding set is the daemon's few (see DAEMON_CAPABILITIES); a command holds none of
      // them and, with no-new-privileges, no exec can give them back.
      CapBnd: '00000000000804eb',
      NoNewPrivs: '1',
      Seccomp: '2',
      'docker-sock': 'absent',
      'run-docker-sock': 'absent',
      nets: 'lo',
      net: 'unreachable',
      mount: 'refused',
      'unshare-user': 'refused',
      'unshare-mount': 'refused',
      runtime: 'read-only',
      setid: '0',
      rootfs: 'read-only',
      tmp: 'writable',
      tmpsize: String(256 * 1024),
      nofile: '4096',
      fsize: String(4096 * 1024 * 2),
    });
  });

  it('refuses hostile create requests over REST with the same error shape, and starts nothing', async () => {
    const before = warren.controller.sandboxes.list().length;
    const post = (body: unknown) =>
      fetch(`${warren.url}/v1/sandboxes`, {
        method: 'POST',
        headers: { authorization: `Bearer ${warren.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    for (const body of [
      { privileged: true },
      { capAdd: ['SYS_ADMIN'] },
      { network: 'host' },
      { pidMode: 'host' },
      { mounts: [{ hostPath: '/var/run/docker.sock', path: '/var/run/docker.sock' }] },
      { mounts: [{ hostPath: '/etc', path: '/mnt/etc' }] },
      { user: '0' },
    ]) {
      const res = await post(body);
      expect(res.status).toBe(403);
      const json = (await res.json()) as { error: { code: string; message: string; suggestion: string } };
      expect(json.error).toMatchObject({ code: 'FORBIDDEN', message: expect.stringMatching(/Refused|allows no/), suggestion: expect.any(String) });
    }
    const bad = await post({ cpus: 1000 });
    expect(bad.status).toBe(400);
    expect(warren.controller.sandboxes.list().length).toBe(before);
  });

  it('mounts host folders below the allowed folders, read-only or read-write, and refuses a symlink that leads out', async () => {
    const ro = path.join(mountRoot, 'data');
    const rw = path.join(mountRoot, 'out');
    await mkdir(ro);
    await mkdir(rw);
    await writeFile(path.join(ro, 'input.csv'), 'a,b\n');
    if (process.getuid?.() === 0) await chown(rw, 1000, 1000);
    const sandbox = await create({
      image: 'warren/test-busybox:latest',
      mounts: [
        { hostPath: ro, path: '/mnt/data' },
        { hostPath: rw, path: '/mnt/out', readOnly: false },
      ],
    });
    const run = await sandbox.commands.run([
      'sh',
      '-c',
      'cat /mnt/data/input.csv; touch /mnt/data/x 2>/dev/null && echo ro=writable || echo ro=read-only; echo made > /mnt/out/result.txt',
    ]);
    expect(run.stdout).toBe('a,b\nro=read-only\n');
    expect(await readFile(path.join(rw, 'result.txt'), 'utf8')).toBe('made\n');
    expect((await sandbox.info()).settings.mounts).toEqual([
      { hostPath: ro, path: '/mnt/data', readOnly: true },
      { hostPath: rw, path: '/mnt/out', readOnly: false },
    ]);

    await symlink('/etc', path.join(mountRoot, 'escape'));
    const res = await fetch(`${warren.url}/v1/sandboxes`, {
      method: 'POST',
      headers: { authorization: `Bearer ${warren.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ mounts: [{ hostPath: path.join(mountRoot, 'escape'), path: '/mnt/etc' }] }),
    });
    expect(res.status).toBe(403);
    expect(((await res.json()) as { error: { message: string } }).error.message).toContain("resolves to '/etc'");
  });

  it('runs under gVisor when the engine has runsc', async () => {
    if (!warren.controller.sandboxes.runtimes.includes('runsc')) {
      console.warn('skipped: gVisor (runsc) is not registered with this Docker engine; install runsc and add it to /etc/docker/daemon.json to run this case');
      return;
    }
    const sandbox = await create({ runtime: 'runsc' });
    await sandbox.files.write('/workspace/g.txt', 'under gVisor');
    expect(await sandbox.files.read('/workspace/g.txt')).toBe('under gVisor');
    const run = await sandbox.commands.run(['sh', '-c', 'dmesg 2>/dev/null | head -3; id -u']);
    expect(run.stdout).toMatch(/gVisor/);
    expect(run.stdout).toMatch(/^1000$/m);
    expect((await sandbox.info()).settings.runtime).toBe('runsc');
  });
});
