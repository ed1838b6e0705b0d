import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { Sandbox } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';
import { DaemonIdentity, HostSentinel, sandboxCode } from '../support/redteam.js';
import { execAsRoot } from '../support/host.js';

/**
 * Sandbox code attacks the daemon and, through the daemon's folder, the host. Each attack runs as
 * the sandbox user inside a real container of a real controller running as root, and each test
 * checks the documented failure, that the daemon is still the same process, and that a host
 * sentinel file (a stand-in for any host file) is untouched.
 */
// Both daemon channels: a socket in a host folder bound in, and a tmpfs of the container's own
// reached through the engine's API (where the secret comes in the daemon's environment).
describe.each(['socket', 'exec'] as const)('red team: sandbox code against the daemon and the host (daemon channel: %s)', (daemonChannel) => {
  let warren: TestController;
  let sandbox: Sandbox;
  let sentinel: HostSentinel;
  let daemon: DaemonIdentity;
  let containerId: string;

  beforeAll(async () => {
    warren = await startTestController({ config: { daemonChannel } });
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    sentinel = await HostSentinel.make();
    daemon = await DaemonIdentity.of(sandbox);
    containerId = warren.controller.sandboxes.record(sandbox.id).containerId;
  }, 60_000);

  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    await sentinel?.remove();
  });

  /** After every attack: the same daemon answers, and the host file is as it was. */
  const unharmed = async () => {
    await daemon.expectSame(sandbox);
    await sentinel.expectUnchanged();
  };

  it('cannot enter the socket folder: no link, FIFO or socket of its own can replace the secret or agent.sock', async () => {
    const run = await sandboxCode(
      sandbox,
      `ls /run/warren; echo "ls=$?"
       ln -sf ${sentinel.path} /run/warren/secret; echo "link-secret=$?"
       mkfifo /run/warren/secret2; echo "fifo=$?"
       ln -sf /var/run/docker.sock /run/warren/agent.sock; echo "link-sock=$?"
       rm -f /run/warren/agent.sock; echo "rm-sock=$?"
       python3 -c "import socket; s=socket.socket(socket.AF_UNIX); s.connect('/run/warren/agent.sock')"; echo "connect=$?"`,
    );
    expect(run.facts).toMatchObject({ ls: '2', 'link-secret': '1', fifo: '1', 'link-sock': '1', 'rm-sock': '1', connect: '1' });
    expect(run.stderr).toMatch(/Permission denied/);
    await unharmed();
  });

  it('cannot signal, trace, or read the memory, environment or files of the daemon', async () => {
    const run = await sandboxCode(
      sandbox,
      `kill -9 ${daemon.pid}; echo "kill=$?"
       kill -STOP ${daemon.pid}; echo "stop=$?"
       kill -9 1; echo "kill-init=$?"
       cat /proc/${daemon.pid}/environ >/dev/null; echo "environ=$?"
       cat /proc/${daemon.pid}/maps >/dev/null; echo "maps=$?"
       ls /proc/${daemon.pid}/fd >/dev/null; echo "fd=$?"
       python3 - <<'PY'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH = 16
print("ptrace=%d errno=%d" % (libc.ptrace(PTRACE_ATTACH, ${daemon.pid}, 0, 0), ctypes.get_errno()))
try:
    with open("/proc/${daemon.pid}/mem", "rb") as mem:
        mem.read(1)
    print("mem=read")
except OSError as e:
    print("mem=%s" % e.errno)
try:
    fd = os.pidfd_open(${daemon.pid})
    os.pidfd_send_signal = getattr(os, "pidfd_send_signal", None)
    print("pidfd=opened")
except OSError as e:
    print("pidfd=%s" % e.errno)
PY`,
    );
    // kill: EPERM (exit 1); /proc entries of another uid's non-dumpable process: EACCES; ptrace: EPERM (1).
    expect(run.facts).toMatchObject({ kill: '1', stop: '1', 'kill-init': '1', environ: '1', maps: '1', fd: '2', mem: '13' });
    expect(run.facts.ptrace).toBe('-1 errno=1');
    await unharmed();
  });

  it('cannot change the image, the runtime or the daemon (its boot file, bundle and code cache): the root file system and /opt/warren are read-only', async () => {
    const run = await sandboxCode(
      sandbox,
      `touch /etc/profile.d/evil.sh; echo "etc=$?"
       cp /bin/sh /usr/local/bin/x; echo "usr=$?"
       touch /opt/warren/warren-agent.mjs; echo "runtime=$?"
       touch /opt/warren/warren-agent.cjs; echo "bundle=$?"
       cp /dev/null /opt/warren/warren-agent.code-cache; echo "code-cache=$?"
       echo x > /workspace/ok; echo "workspace=$?"
       echo x > /tmp/ok; echo "tmp=$?"`,
    );
    expect(run.facts).toMatchObject({ etc: '1', usr: '1', runtime: '1', bundle: '1', 'code-cache': '1', workspace: '0', tmp: '0' });
    expect(run.stderr).toMatch(/Read-only file system/);
    await unharmed();
  });

  it('cannot fill memory through /tmp or exceed the file-size and open-file limits; the daemon answers throughout', async () => {
    const run = await sandboxCode(
      sandbox,
      `dd if=/dev/zero of=/tmp/fill bs=1M count=400 2>/dev/null; echo "tmp-fill=$?"; echo "tmp-size=$(stat -c %s /tmp/fill)"; rm -f /tmp/fill
       python3 -c "
import resource
print('nofile=%d' % resource.getrlimit(resource.RLIMIT_NOFILE)[1])
print('fsize=%d' % resource.getrlimit(resource.RLIMIT_FSIZE)[1])
files = []
try:
    while True: files.append(open('/dev/null'))
except OSError as e:
    print('open-errno=%d' % e.errno)
"`,
    );
    expect(run.facts['tmp-fill']).not.toBe('0');
    expect(Number(run.facts['tmp-size'])).toBeLessThanOrEqual(256 * 1024 * 1024);
    expect(run.facts).toMatchObject({ nofile: '4096', fsize: String(4096 * 1024 * 1024), 'open-errno': '24' });
    await unharmed();
  });

  it('a write past the file-size limit fails with EFBIG for sandbox code and a typed error through the file API, and the daemon lives', async () => {
    await using small = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, fileSizeMb: 1 });
    const pid = (await small.daemonInfo()).pid;
    const run = await sandboxCode(small, `head -c 2000000 /dev/zero > /workspace/big; echo "dd=$?"; echo "size=$(stat -c %s /workspace/big)"`);
    expect(run.facts).toMatchObject({ dd: '153', size: String(1024 * 1024) }); // 128 + SIGXFSZ (25)
    await expect(small.files.write('api-big.bin', Buffer.alloc(2 * 1024 * 1024))).rejects.toMatchObject({
      code: expect.stringMatching(/^(TOO_LARGE|RESOURCE_EXHAUSTED|FILE_TOO_LARGE|DISK_FULL)$/),
    });
    expect((await small.daemonInfo()).pid).toBe(pid);
  });

  it("on the host, the daemon is the container's root as the engine maps it, and what sandbox code writes is the sandbox user's mapped uid", async () => {
    const ready = (await (await fetch(`${warren.url}/readyz`)).json()) as { isolation: { usernsRemap: { uid: number; gid: number } | null } };
    const base = ready.isolation.usernsRemap?.uid ?? 0;
    if (process.env.WARREN_TEST_ENGINE === 'userns-remap') expect(base).toBeGreaterThan(0);
    const inspect = await new Docker().getContainer(containerId).inspect();
    const initStatus = await readFile(`/proc/${inspect.State.Pid}/status`, 'utf8');
    expect(/Uid:\s+(\d+)/.exec(initStatus)?.[1]).toBe(String(base));
    await sandboxCode(sandbox, 'echo mine > /workspace/owned-by-me');
    const workspace = inspect.Mounts.find((m) => m.Destination === '/workspace')!;
    expect((await stat(path.join(workspace.Source, 'owned-by-me'))).uid).toBe(base + 1000);
  });

  it('sees the daemon run as root only from the host: from inside, its processes hold no capability', async () => {
    const inside = await sandboxCode(sandbox, `echo "uid=$(id -u)"; grep -E '^CapEff' /proc/self/status | tr -d '\\t' | tr ':' '='`);
    expect(inside.facts).toMatchObject({ uid: '1000', CapEff: '0000000000000000' });
    const host = await execAsRoot(containerId, ['sh', '-c', `grep -E '^(Uid|CapEff)' /proc/${daemon.pid}/status`]);
    expect(host.stdout).toMatch(/Uid:\s+0\s/);
    expect(host.stdout).toMatch(/CapEff:\s+00000000000804eb/);
  });

  it("never sees the daemon's secret: not in its environment, not in init's or the daemon's, and not on the container's file system", async () => {
    const secret = warren.controller.sandboxes.agentSecret(sandbox.id);
    const run = await sandboxCode(
      sandbox,
      `env | grep -c WARREN_AGENT_SECRET; echo "env=$?"
       cat /proc/1/environ >/dev/null; echo "init-environ=$?"
       cat /proc/${daemon.pid}/environ >/dev/null; echo "daemon-environ=$?"
       grep -rls -- "${secret}" /tmp /workspace /run 2>/dev/null | head -1; echo "found=$(grep -rls -- "${secret}" /tmp /workspace /run 2>/dev/null | wc -l)"`,
    );
    expect(run.facts).toMatchObject({ env: '1', 'init-environ': '1', 'daemon-environ': '1', found: '0' });
    expect(run.stdout).not.toContain(secret);
    await unharmed();
  });

  it("a create's env cannot reach into the daemon (NODE_OPTIONS, LD_PRELOAD): blanked for it, kept for commands", async () => {
    // The env is often the agent's to choose. Were NODE_OPTIONS the daemon's, `--title` would rename it
    // (and `--require` would run sandbox files inside it, as root, beside the secret).
    const hostile = await Sandbox.create({
      baseUrl: warren.url,
      apiKey: warren.apiKey,
      env: { NODE_OPTIONS: '--title=warren-pwned', LD_PRELOAD: '/nonexistent/warren-pwn.so', GCONV_PATH: '/tmp/warren-gconv', KEEP_ME: 'yes' },
    });
    try {
      const { pid } = await hostile.daemonInfo();
      const run = await hostile.commands.run(
        `echo "title=$(cat /proc/${pid}/comm)"
         echo "opts=$NODE_OPTIONS"; echo "pre=$LD_PRELOAD"; echo "gconv=$GCONV_PATH"; echo "keep=$KEEP_ME"
         env | grep -c WARREN_SANDBOX_ENV; echo "handover=$?"`,
      );
      expect(run.stdout).toMatch(/^title=\S+$/m);
      expect(run.stdout).not.toMatch(/^title=warren-pwned$/m);
      expect(run.stdout).toContain('opts=--title=warren-pwned');
      expect(run.stdout).toContain('pre=/nonexistent/warren-pwn.so');
      expect(run.stdout).toContain('gconv=/tmp/warren-gconv');
      expect(run.stdout).toContain('keep=yes');
      expect(run.stdout).toContain('handover=1');
    } finally {
      await hostile.kill();
    }
    await unharmed();
  });
});
