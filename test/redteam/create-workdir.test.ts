import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { Images, Sandbox } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';

const docker = new Docker();
const run = randomBytes(4).toString('hex');
/** Every image this file builds is named below this, so afterAll removes them all. */
const PREFIX = 'warren-redteam-workdir/';

/**
 * A create asks for a hostile working folder. The engine starts the container's first process
 * there, so a working folder in `/proc` is a descriptor of runc's (`/proc/self/fd/N`, the way out of
 * the leaked-descriptor escapes) or another process's root, in `/sys` or `/dev` the kernel's, in
 * `/opt/warren` or `/run/warren` the daemon's. Every spelling is refused with a typed error that says
 * what is allowed, and so is a folder the image cannot hold (a file on its path) or that only the
 * image's own link leads into `/proc`; none of them leaves anything behind: no record, no
 * container, no daemon folder, no workspace disk.
 */
describe('red team: hostile working folders at create', () => {
  let warren: TestController;
  let context: string;

  beforeAll(async () => {
    warren = await startTestController();
    context = await mkdtemp(path.join(os.tmpdir(), 'warren-redteam-workdir-'));
  }, 60_000);
  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    for (const image of await docker.listImages())
      if ((image.RepoTags ?? []).some((t) => t.startsWith(PREFIX)))
        await docker
          .getImage(image.Id)
          .remove({ force: true })
          .catch(() => undefined);
    await rm(context, { recursive: true, force: true });
  }, 60_000);

  const post = async (body: Record<string, unknown>) => {
    const res = await fetch(`${warren.url}/v1/sandboxes`, {
      method: 'POST',
      headers: { authorization: `Bearer ${warren.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ttlSeconds: 120, ...body }),
    });
    const answer = (await res.json()) as { id?: string; error?: { code: string; message: string; details?: { field?: string } } };
    if (answer.id) await warren.controller.sandboxes.kill(answer.id).catch(() => undefined);
    return { status: res.status, ...answer };
  };
  /** Everything a create could leave: records, this controller's containers, daemon folders, workspace disks. */
  const leftovers = async () => {
    const stateDir = warren.controller.config.stateDir;
    const owner = warren.controller.sandboxes.credentials.instanceId;
    return {
      records: warren.controller.sandboxes.list().map((r) => r.id),
      containers: (await docker.listContainers({ all: true, filters: { label: [`warren.owner=${owner}`] } })).map((c) => c.Names),
      daemonFolders: await readdir(path.join(stateDir, 'sandboxes')).catch(() => []),
      workspaces: (await readdir(path.join(stateDir, 'workspaces')).catch(() => [] as string[])).filter((n) => !n.startsWith('.')),
    };
  };
  const nothing = { records: [], containers: [], daemonFolders: [], workspaces: [] };

  it('refuses a working folder in /proc, /sys, /dev or the daemon’s folders, by any spelling, with FORBIDDEN naming what is allowed, and makes nothing', async () => {
    for (const workdir of [
      '/proc/self/fd/3',
      '/proc/self/fd/7',
      '/proc/self/cwd',
      '/proc/1/root',
      '/proc',
      '/workspace/../proc/self/fd/8',
      '//proc//self/fd/9/',
      '/sys/fs/cgroup',
      '/dev/shm',
      '/dev',
      '/opt/warren',
      '/opt/warren/bin',
      '/run/warren',
      '/var/run/warren',
      '/var/run/../run/warren/x',
      '/run/warren-egress',
    ]) {
      const answer = await post({ workdir });
      expect({ workdir, status: answer.status, code: answer.error?.code, field: answer.error?.details?.field }).toEqual({
        workdir,
        status: 403,
        code: 'FORBIDDEN',
        field: 'workdir',
      });
      expect(answer.error?.message).toMatch(/A working folder may be any folder outside/);
    }
    const nul = await post({ workdir: '/workspace/a\u0000b' });
    expect({ status: nul.status, code: nul.error?.code }).toEqual({ status: 400, code: 'INVALID_PARAMS' });
    expect(await leftovers()).toEqual(nothing);
  }, 120_000);

  it('refuses a working folder the image cannot hold (a file on its path) with INVALID_PARAMS, no host path in the message, and nothing left', async () => {
    for (const workdir of ['/etc/passwd', '/etc/passwd/inside', '/usr/bin/env/x']) {
      const answer = await post({ workdir });
      expect({ workdir, status: answer.status, code: answer.error?.code, field: answer.error?.details?.field }).toEqual({
        workdir,
        status: 400,
        code: 'INVALID_PARAMS',
        field: 'workdir',
      });
      expect(answer.error?.message).not.toMatch(/overlay|\/var\/lib\/docker/);
    }
    expect(await leftovers()).toEqual(nothing);
  }, 120_000);

  it("refuses a working folder that only the image's own link leads into /proc, and leaves nothing", async () => {
    await rm(context, { recursive: true, force: true });
    await mkdir(context);
    await writeFile(
      path.join(context, 'Dockerfile'),
      'FROM warren/sandbox:latest\nUSER root\nRUN ln -s /proc/self/fd /data && ln -s /proc /kernel\nUSER 1000:1000\n',
    );
    const image = `${PREFIX}links:${run}`;
    await new Images({ baseUrl: warren.url, apiKey: warren.apiKey }).build({ context, tag: image });
    // The runtime's own descriptors 0 to 2 (never folders): the lexical rule cannot see the link, the engine refuses, and the answer says so.
    for (const workdir of ['/data/0', '/data/1', '/data/2', '/kernel/self/fd/0']) {
      const answer = await post({ image, workdir });
      expect({ workdir, status: answer.status, code: answer.error?.code }).toEqual({ workdir, status: 400, code: 'INVALID_PARAMS' });
    }
    expect(await leftovers()).toEqual(nothing);
  }, 300_000);

  it('still runs in any other folder, / and /run included', async () => {
    for (const workdir of ['/', '/run', '/tmp/work', '/home/warren', '/var/run/../srv']) {
      const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, workdir, ttlSeconds: 120 });
      try {
        expect((await docker.getContainer(`warren-${sandbox.id}`).inspect()).Config.WorkingDir).toBe(path.posix.resolve(workdir));
        expect((await sandbox.commands.run('echo ok')).stdout).toBe('ok\n');
      } finally {
        await sandbox.kill();
      }
    }
  }, 120_000);
});
