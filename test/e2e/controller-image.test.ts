import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { Sandbox } from '@warren/sdk';
import { until } from '../support/wait.js';

const run = promisify(execFile);
const docker = new Docker();

/**
 * The controller image as compose runs it (compose.yaml): in a container of its own on a network
 * of its own (compose's project network; the test makes it), with the engine's socket and a state
 * volume, creating sandboxes as siblings through the exec channel.
 * The image is built by scripts/build-controller-image (the same last stage as the Dockerfile
 * compose builds, from the packed packages; that Dockerfile's registry stage is not run here).
 */
describe('the controller image, run as compose runs it', () => {
  const name = `warren-controller-test-${randomBytes(4).toString('hex')}`;
  const apiKey = `wk_image_${randomBytes(16).toString('hex')}`;
  let baseUrl: string;

  beforeAll(async () => {
    await run('scripts/build-controller-image', [], { cwd: process.cwd(), maxBuffer: 64 * 1024 * 1024, timeout: 240_000 });
    await docker.createNetwork({ Name: name, Driver: 'bridge', Labels: { 'warren.test': 'controller-image' } });
    const container = await docker.createContainer({
      name,
      Image: 'warren/controller:latest',
      Env: [`WARREN_API_KEY=${apiKey}`],
      Labels: { 'warren.test': 'controller-image' },
      HostConfig: {
        Binds: ['/var/run/docker.sock:/var/run/docker.sock', `${name}-state:/var/lib/warren`],
        PortBindings: { '7420/tcp': [{ HostIp: '127.0.0.1', HostPort: '0' }] },
        NetworkMode: name,
      },
    });
    await container.start();
    const port = (await container.inspect()).NetworkSettings.Ports['7420/tcp']?.[0]?.HostPort;
    baseUrl = `http://127.0.0.1:${port}`;
    const ready = async () => (await fetch(`${baseUrl}/readyz`, { signal: AbortSignal.timeout(2000) }).catch(() => undefined))?.ok || undefined;
    await until('the controller in its container to be ready', ready, 60_000).catch(async (err: unknown) => {
      const logs = (await container.logs({ stdout: true, stderr: true })).toString('utf8');
      throw new Error(`${String(err)}; the controller's output:\n${logs.slice(-3000)}`);
    });
  }, 360_000);

  afterAll(async () => {
    await docker
      .getContainer(name)
      .remove({ force: true })
      .catch(() => undefined);
    await docker
      .getVolume(`${name}-state`)
      .remove()
      .catch(() => undefined);
    await docker
      .getNetwork(name)
      .remove()
      .catch(() => undefined);
  });

  it('serves sandboxes from its container: files and commands work, daemons are reached through the engine, the engine is named', async () => {
    await using sandbox = await Sandbox.create({ baseUrl, apiKey });
    await sandbox.files.write('hello.py', 'print("hello from the sandbox")');
    expect(await sandbox.commands.run('python3 hello.py')).toMatchObject({ exitCode: 0, stdout: 'hello from the sandbox\n' });
    // No host folder is bound into the sandbox: the controller's folders are not the engine's.
    const binds = (await docker.getContainer(`warren-${sandbox.id}`).inspect()).HostConfig.Binds ?? [];
    expect(binds).toEqual([]);
    const logs = (await docker.getContainer(name).logs({ stdout: true, stderr: true })).toString('utf8');
    expect(logs).toMatch(/"channel":"exec"/);
    expect(logs).toMatch(/"engine":"unix:\/\/\/var\/run\/docker\.sock \(from the default socket\)"/);
  });
});
