import { describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { Sandbox, PathNotInSandboxError } from '@warren/sdk';
import { startTestController } from '../support/fixtures.js';
import { execAsRoot } from '../support/host.js';

describe('one sandbox end to end on the real Docker engine', () => {
  it('creates, writes, reads back byte for byte, runs python, reports exit codes, and is gone after kill', async () => {
    await using warren = await startTestController();
    const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    const docker = new Docker();
    const [record] = warren.controller.sandboxes.list();
    try {
      expect(record?.id).toBe(sandbox.id);
      const source = 'import sys\nprint("h\\u00e9llo", 6 * 7)\nsys.stderr.write("warn\\n")\n';
      await sandbox.files.write('/workspace/a.py', source);
      expect(Buffer.from(await sandbox.files.read('/workspace/a.py', { format: 'bytes' }))).toEqual(Buffer.from(source));

      const run = await sandbox.commands.run('python3 /workspace/a.py');
      expect(run).toMatchObject({ exitCode: 0, stdout: 'héllo 42\n', stderr: 'warn\n', timedOut: false });

      const failing = await sandbox.commands.run('exit 3');
      expect(failing.exitCode).toBe(3);

      await expect(sandbox.files.read('/etc/passwd')).rejects.toBeInstanceOf(PathNotInSandboxError);
    } finally {
      await sandbox.kill();
    }
    await expect(docker.getContainer(record!.containerId).inspect()).rejects.toMatchObject({ statusCode: 404 });
  });

  it("runs the daemon on Node 24 LTS from the npm registry's binary package, whatever Node runs the controller", async () => {
    await using warren = await startTestController();
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    const { nodeVersion } = await sandbox.daemonInfo();
    const { daemonNodePath } = await import('@warren/controller');
    expect((await daemonNodePath()).packaged).toBe(true);
    expect(nodeVersion).toMatch(/^v24\./);
  });

  it('starts the container hardened: non-root, no capabilities, no network', async () => {
    await using warren = await startTestController();
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    const probe = await sandbox.commands.run(['sh', '-c', 'id -u; grep -E "^(CapEff|NoNewPrivs)" /proc/self/status; ls /sys/class/net']);
    const [uid, capEff, noNewPrivs, nets] = probe.stdout.trim().split('\n');
    expect(uid).toBe('1000');
    expect(capEff).toMatch(/CapEff:\s+0000000000000000/);
    expect(noNewPrivs).toMatch(/NoNewPrivs:\s+1/);
    expect(nets).toBe('lo');
  });

  it("runs the daemon with ws's native frame unmasking (bufferutil from the runtime volume)", async () => {
    await using warren = await startTestController();
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    const { pid } = await sandbox.daemonInfo();
    // The daemon's memory map is closed to sandbox code; the host looks at it as root.
    const maps = await execAsRoot(warren.controller.sandboxes.record(sandbox.id).containerId, ['grep', '-c', 'bufferutil.node', `/proc/${pid}/maps`]);
    expect(Number(maps.stdout.trim())).toBeGreaterThan(0);
  });
});
