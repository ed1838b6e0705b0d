import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';
import { execAsRoot } from '../support/host.js';
import { HostSentinel } from '../support/redteam.js';

/**
 * The second line of defence: suppose sandbox code did become the container's root (the daemon's
 * identity, which owns the socket folder). What it plants in that folder must still never make
 * the controller, root on the host, write, chown, block on or connect to anything else. These
 * tests plant each kind of file as root inside the container, then make the controller use the
 * folder (a restart after the daemon dies, a new connection).
 */
describe('red team: a hostile daemon folder against the controller', () => {
  let warren: TestController;
  let sentinel: HostSentinel;
  let hostDir: string;
  let listener: Server;
  let listenerPath: string;
  let hostConnections = 0;

  beforeAll(async () => {
    warren = await startTestController();
    sentinel = await HostSentinel.make();
    hostDir = await mkdtemp(path.join(os.tmpdir(), 'warren-redteam-sock-'));
    listenerPath = path.join(hostDir, 'host.sock');
    listener = createServer((socket) => {
      hostConnections++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => listener.listen(listenerPath, resolve));
  }, 60_000);

  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    await sentinel?.remove();
    await new Promise<void>((resolve) => listener.close(() => resolve()));
    await rm(hostDir, { recursive: true, force: true });
  });

  const containerOf = (sandbox: Sandbox) => warren.controller.sandboxes.record(sandbox.id).containerId;

  /**
   * Kills the daemon as root inside the container; the controller starts the sandbox again. The
   * new daemon may get the same pid (a fresh pid namespace), so it is told apart by its uptime.
   */
  const killDaemonAndWaitForRestart = async (sandbox: Sandbox, pid: number) => {
    const killedAt = Date.now();
    await execAsRoot(containerOf(sandbox), ['sh', '-c', `kill -9 ${pid}`]).catch(() => undefined);
    const deadline = Date.now() + 60_000;
    for (;;) {
      const info = await sandbox.daemonInfo({ timeoutMs: 5_000 }).catch(() => undefined);
      if (info && info.uptimeMs < Date.now() - killedAt) return info;
      if (Date.now() > deadline) throw new Error('the sandbox did not come back after its daemon was killed');
      await new Promise((r) => setTimeout(r, 250));
    }
  };

  it.each([
    ['a link to a host file in place of the secret', `rm -f /run/warren/secret; ln -s ${'SENTINEL'} /run/warren/secret`],
    ['a FIFO in place of the secret', 'rm -f /run/warren/secret; mkfifo /run/warren/secret'],
    ['a link to a host folder in place of the whole listing', `ln -s ${'SENTINEL_DIR'} /run/warren/escape; ln -s ${'SENTINEL'} /run/warren/agent.sock.tmp`],
  ])('%s: the restart neither follows, blocks on, nor chowns anything', async (_name, plant) => {
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    await sandbox.files.write('kept.txt', 'still here');
    const before = (await sandbox.daemonInfo()).pid;
    const script = plant.replaceAll('SENTINEL_DIR', path.dirname(sentinel.path)).replaceAll('SENTINEL', sentinel.path);
    expect((await execAsRoot(containerOf(sandbox), ['sh', '-c', script])).exitCode).toBe(0);
    await killDaemonAndWaitForRestart(sandbox, before);
    expect(await sandbox.files.read('kept.txt')).toBe('still here');
    await sentinel.expectUnchanged();
  });

  it('a folder nested past PATH_MAX, crowded, with links out, a FIFO and folders of mode 000 is removed at the restart and at the kill, and no link is followed', async () => {
    // The controller removed the old folder with fs.rm, which walks by path: a tree past PATH_MAX
    // made it throw (ENAMETOOLONG), so the restart failed and the kill left the folder behind.
    const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    const record = warren.controller.sandboxes.record(sandbox.id);
    const parent = path.join(warren.controller.config.stateDir, 'sandboxes');
    const hostFolder = path.join(parent, record.agentId);
    try {
      await sandbox.files.write('kept.txt', 'still here');
      const plant = [
        'import os',
        'os.chdir("/run/warren"); os.mkdir("junk"); os.chdir("junk")',
        'for i in range(1500):',
        '    os.mkdir("ddd"); os.chdir("ddd")',
        'open("leaf", "w").write("deep"); os.chmod(".", 0)',
        'os.chdir("/run/warren/junk"); os.mkdir("many")',
        'for i in range(20000):',
        '    open("many/f%d" % i, "w").close()',
        'os.chmod("many", 0)',
        `os.symlink(${JSON.stringify(sentinel.path)}, "out"); os.symlink(${JSON.stringify(path.dirname(sentinel.path))}, "outdir")`,
        'os.mkfifo("fifo"); os.mkdir("locked"); open("locked/x", "w").close(); os.chmod("locked", 0)',
        'print("planted")',
      ].join('\n');
      const planted = await execAsRoot(containerOf(sandbox), ['python3', '-c', plant]);
      expect(planted.stdout).toContain('planted');
      await killDaemonAndWaitForRestart(sandbox, (await sandbox.daemonInfo()).pid);
      expect(await sandbox.files.read('kept.txt')).toBe('still here');
      // The folder was made anew: nothing of the old one is left, not even set aside.
      expect(await readdir(hostFolder)).not.toContain('junk');
      expect((await readdir(parent)).filter((name) => name.startsWith('.trash-'))).toEqual([]);
      await sentinel.expectUnchanged();
      // Again, and then the kill removes it.
      expect((await execAsRoot(containerOf(sandbox), ['python3', '-c', plant])).stdout).toContain('planted');
    } finally {
      await sandbox.kill();
    }
    expect(await stat(hostFolder).catch((err: NodeJS.ErrnoException) => err.code)).toBe('ENOENT');
    expect((await readdir(parent)).filter((name) => name.startsWith('.trash-'))).toEqual([]);
    await sentinel.expectUnchanged();
  }, 180_000);

  it('a link to a host socket in place of agent.sock: the controller refuses to connect and names no host path', async () => {
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    expect((await execAsRoot(containerOf(sandbox), ['sh', '-c', `rm -f /run/warren/agent.sock; ln -s ${listenerPath} /run/warren/agent.sock`])).exitCode).toBe(
      0,
    );
    const fresh = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, apiKey: warren.apiKey }).catch((err: unknown) => err);
    let failure: unknown = fresh;
    if (fresh instanceof Sandbox) {
      failure = await fresh.daemonInfo({ timeoutMs: 3_000 }).catch((err: unknown) => err);
      fresh.close();
    }
    expect(failure).toMatchObject({ code: expect.stringMatching(/^(SANDBOX_NOT_READY|UPSTREAM_UNAVAILABLE|CONNECTION_CLOSED|REQUEST_TIMEOUT)$/) });
    const text = `${(failure as Error).message} ${JSON.stringify((failure as { details?: unknown }).details ?? {})}`;
    expect(text).not.toContain(os.tmpdir());
    expect(text).not.toContain(warren.controller.config.stateDir);
    expect(hostConnections).toBe(0);
  });
});
