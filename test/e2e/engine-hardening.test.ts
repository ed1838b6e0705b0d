import { describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Images, Sandbox } from '@warren/sdk';
import { testEngine } from '../support/engine.js';
import { startTestController } from '../support/fixtures.js';
import { execAsRoot } from '../support/host.js';

// The same hardening on every engine Warren drives (scripts/test runs this on Docker and, in its
// Podman pass, on Podman): asked of the engine as it stored the container, and seen from inside.
describe('sandbox hardening as the engine applies it', () => {
  it('read-only root, no capabilities for commands, no-new-privileges, the sandbox user, limits, and a root daemon the sandbox user cannot touch', async () => {
    const engine = await testEngine();
    await using warren = await startTestController();
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, memoryMb: 256, pidsLimit: 128 });
    const containerId = warren.controller.sandboxes.record(sandbox.id).containerId;
    const inspect = await new Docker().getContainer(containerId).inspect();
    const host = inspect.HostConfig;
    expect(host.ReadonlyRootfs).toBe(true);
    expect(host.Privileged).toBe(false);
    // Engines store CapDrop differently (Podman lists the defaults it dropped): the bounding set, below, is what counts.
    // The current spelling only: Docker deprecated `no-new-privileges:true` and logs a warning per create for it.
    expect((host.SecurityOpt as string[] | undefined)?.some((o) => /^no-new-privileges(=true)?$/.test(o))).toBe(true);
    expect(host.Memory).toBe(256 * 1024 * 1024);
    expect(host.PidsLimit).toBe(128);
    expect(inspect.Config.User).toBe('0:0');

    const probe = await sandbox.commands.run([
      'sh',
      '-c',
      'id -u; grep -E "^(CapEff|CapPrm|NoNewPrivs)" /proc/self/status; touch /usr/warren-probe 2>&1 || true; cat /proc/1/comm',
    ]);
    const [uid, capPrm, capEff, noNewPrivs, touched, init] = probe.stdout.trim().split('\n');
    expect(uid).toBe('1000');
    expect(capPrm).toMatch(/CapPrm:\s+0000000000000000/);
    expect(capEff).toMatch(/CapEff:\s+0000000000000000/);
    expect(noNewPrivs).toMatch(/NoNewPrivs:\s+1/);
    expect(touched).toMatch(/Read-only file system/);
    // An init reaps orphans (docker-init on Docker, catatonit as podman-init on Podman), not the daemon as pid 1.
    expect(init).toMatch(engine.name === 'podman' ? /podman-init|catatonit/ : /docker-init|tini/);

    // The daemon runs as the container's root; the sandbox user can neither signal it nor read its environment.
    const { pid } = await sandbox.daemonInfo();
    const daemon = await execAsRoot(containerId, ['sh', '-c', `awk '/^(Uid|CapBnd):/ {print $2}' /proc/${pid}/status`]);
    // Uid 0, bounded by exactly CHOWN, DAC_OVERRIDE, FOWNER, KILL, SETGID, SETUID and SYS_PTRACE (bits 0 1 3 5 6 7 19).
    expect(daemon.stdout.trim().split('\n')).toEqual(['0', '00000000000804eb']);
    const attack = await sandbox.commands.run(['sh', '-c', `kill -TERM ${pid}; echo kill=$?; cat /proc/${pid}/environ >/dev/null 2>&1; echo read=$?`]);
    expect(attack.stdout).toMatch(/kill=1\nread=1\n/);
    expect((await sandbox.commands.run('echo alive')).stdout).toBe('alive\n');

    // No namespaces of its own: a user namespace would give sandbox code root's reach into kernel code
    // (Podman's default seccomp allows it; Warren gives Podman sandboxes a profile that does not).
    const namespaces = await sandbox.commands.run([
      'sh',
      '-c',
      'for flags in -U -Ur -n -m -p; do unshare $flags true 2>/dev/null && echo "$flags ok" || echo "$flags refused"; done; ' +
        'python3 -c "import os; os.unshare(os.CLONE_NEWUSER)" 2>/dev/null && echo "py ok" || echo "py refused"',
    ]);
    expect(namespaces.stdout).toBe('-U refused\n-Ur refused\n-n refused\n-m refused\n-p refused\npy refused\n');

    // The memory and pids limits hold from inside (cgroup v1 or v2 files).
    const limits = await sandbox.commands.run(
      'cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes; cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max',
    );
    expect(limits.stdout.trim().split('\n')).toEqual([String(256 * 1024 * 1024), '128']);
  });

  // Podman 4.3's compat build ran RUN steps on the host's network whatever networkmode said (seen
  // here): Warren refuses builds there. Docker's builds are tested in images-build.test.ts.
  it('refuses image builds on Podman with NOT_SUPPORTED, and starts none', async () => {
    const engine = await testEngine();
    if (engine.name !== 'podman') {
      console.warn(`skipped on ${engine.name}: its builds are tested in images-build.test.ts`);
      return;
    }
    await using warren = await startTestController();
    const context = await mkdtemp(path.join(os.tmpdir(), 'warren-podman-build-'));
    try {
      await writeFile(path.join(context, 'Dockerfile'), 'FROM warren/test-busybox:latest\nRUN ls /sys/class/net\n');
      const images = new Images({ baseUrl: warren.url, apiKey: warren.apiKey });
      const tag = `warren-e2e-podman/refused:${process.pid}`;
      await expect(images.build({ context, tag })).rejects.toMatchObject({ code: 'NOT_SUPPORTED', message: expect.stringMatching(/host's network/) });
      expect((await images.list()).some((i) => i.tags.some((t) => t.endsWith(tag)))).toBe(false);
    } finally {
      await rm(context, { recursive: true, force: true });
    }
  });
});
