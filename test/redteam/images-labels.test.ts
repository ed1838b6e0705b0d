import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { Credentials, startController, silentLogger, type Controller } from '@warren/controller';
import { Images, Sandbox, Snapshots } from '@warren/sdk';
import { removeStateDir } from '../support/state-dir.js';
import { archive, file } from '../support/tar-bytes.js';
import { until } from '../support/wait.js';

const docker = new Docker();
const run = randomBytes(4).toString('hex');
/** Every image this file builds is named below this, so afterAll removes them all. */
const PREFIX = 'warren-redteam-labels/';
/** The policy an image tries to give its sandboxes: read-only, so a write after the restart shows whether it took. */
const PLANTED_POLICY = JSON.stringify({ root: '/workspace', readOnly: true });

/**
 * Images that speak for Warren. The engine merges an image's labels into its containers', and a
 * restarted controller rebuilds its records from container labels; so a Dockerfile author writes
 * `LABEL warren.policy=... warren.pool=1 warren.label.team=...` and hopes the sandbox takes them
 * once the controller restarts (a pool mark gets the sandbox removed as an unclaimed pool member,
 * a policy narrows or changes its files, user labels change what listings by label find). A
 * build's step container carries the labels of the image so far, `warren.sandbox` included, and
 * hopes to be adopted as a sandbox. None of it may take: only Warren writes the labels it reads.
 */
describe('red team: images that speak for Warren', () => {
  const apiKey = `wk_test_${randomBytes(16).toString('hex')}`;
  const masterKey = randomBytes(32);
  let stateDir: string;
  let context: string;
  let controller: Controller | undefined;
  const ids: string[] = [];

  const start = async () => {
    controller = await startController({
      credentials: Credentials.inMemory(apiKey, masterKey),
      logger: silentLogger(),
      config: { port: 0, stateDir, reapIntervalMs: 60_000 },
    });
    return controller;
  };
  /** Builds `dockerfile` through Warren's own build API (the door a Dockerfile author has). */
  const build = async (name: string, dockerfile: string) => {
    await rm(context, { recursive: true, force: true });
    await mkdir(context);
    await writeFile(path.join(context, 'Dockerfile'), dockerfile);
    const tag = `${PREFIX}${name}:${run}`;
    await new Images({ baseUrl: controller!.url, apiKey }).build({ context, tag });
    return tag;
  };

  beforeAll(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-redteam-labels-'));
    context = await mkdtemp(path.join(os.tmpdir(), 'warren-redteam-labels-ctx-'));
    await start();
  }, 60_000);

  afterAll(async () => {
    for (const id of ids) await controller?.sandboxes.kill(id).catch(() => undefined);
    await controller?.close();
    for (const c of await docker.listContainers({ all: true, filters: { label: [`warren-redteam-labels=${run}`] } }))
      await docker
        .getContainer(c.Id)
        .remove({ force: true })
        .catch(() => undefined);
    for (const image of await docker.listImages({ all: true }))
      if ((image.RepoTags ?? []).some((t) => t.startsWith(PREFIX)))
        await docker
          .getImage(image.Id)
          .remove({ force: true })
          .catch(() => undefined);
    await removeStateDir(stateDir);
    await rm(context, { recursive: true, force: true });
  }, 120_000);

  it("a sandbox made from an image labelled with Warren's policy, pool mark, owner, expiry, snapshot and user labels takes none of them, before or after a controller restart", async () => {
    const speaks = await build(
      'speaks',
      [
        'FROM warren/sandbox:latest',
        `LABEL warren.policy=${JSON.stringify(PLANTED_POLICY)} warren.label.team="image" warren.label.planted="yes" \\`,
        '      warren.owner="someone-else" warren.expires-at="2999-01-01T00:00:00.000Z" warren.snapshot="planted" warren.created-at="2000-01-01T00:00:00.000Z"',
        '',
      ].join('\n'),
    );
    const pooled = await build('pooled', ['FROM warren/sandbox:latest', 'LABEL warren.pool="1"', ''].join('\n'));

    const first = controller!;
    const a = await Sandbox.create({ baseUrl: first.url, apiKey, image: speaks, labels: { team: 'mine' }, ttlSeconds: 600 });
    ids.push(a.id);
    const b = await Sandbox.create({ baseUrl: first.url, apiKey, image: pooled, ttlSeconds: 600 });
    ids.push(b.id);
    const expected = { labels: { team: 'mine' }, expiresAt: (await a.info()).expiresAt };
    a.close();
    b.close();

    // The controller restarts: its records come back from the containers' labels.
    await first.close();
    const second = await start();
    const recordA = second.sandboxes.record(a.id);
    expect(recordA.policy).toBeUndefined();
    expect(recordA.labels).toEqual(expected.labels);
    expect(recordA.expiresAt.toISOString()).toBe(expected.expiresAt);
    expect(recordA.createdAt.getFullYear()).toBeGreaterThan(2000);
    // Not taken for an unclaimed warm-pool member (those are removed at start).
    expect(second.sandboxes.list().map((r) => r.id)).toContain(b.id);
    expect(second.sandboxes.record(b.id)).toMatchObject({ pooled: false, state: 'running' });
    // By label, the planted ones find nothing.
    const listed = await Sandbox.list({ baseUrl: second.url, apiKey });
    expect(listed.filter((s) => s.labels.planted === 'yes')).toEqual([]);
    expect(listed.find((s) => s.id === a.id)?.labels).toEqual({ team: 'mine' });

    // The planted read-only policy did not take: the sandbox's own token still writes.
    const again = await Sandbox.connect(a.id, { baseUrl: second.url, apiKey });
    try {
      await again.files.write('after-restart.txt', 'still writable\n');
      expect(await again.files.read('after-restart.txt')).toBe('still writable\n');
    } finally {
      again.close();
    }
  }, 300_000);

  it("a build's step container that carries warren.sandbox and Warren's other labels is never adopted as a sandbox", async () => {
    const planted = `planted${run}`;
    const tag = `${PREFIX}step:${run}`;
    const dockerfile = [
      'FROM warren/sandbox:latest',
      `LABEL warren.sandbox="${planted}" warren.policy=${JSON.stringify(PLANTED_POLICY)} warren-redteam-labels="${run}"`,
      // The step container lives while this runs; the test ends the build once it has looked.
      'RUN sleep 600',
      '',
    ].join('\n');
    const stream = (await docker.buildImage(archive(file('Dockerfile', dockerfile)) as unknown as NodeJS.ReadableStream, { t: tag })) as unknown as Readable;
    stream.resume();
    try {
      const step = await until(
        'the build step container to run',
        async () => (await docker.listContainers({ filters: { label: [`warren.sandbox=${planted}`], status: ['running'] } }))[0],
        120_000,
        200,
      );
      expect(step.Labels['warren.sandbox']).toBe(planted);

      // A controller that starts now (as after a restart) rebuilds its table from the engine.
      await controller!.close();
      const restarted = await start();
      expect(restarted.sandboxes.list().map((r) => r.id)).not.toContain(planted);
      const res = await fetch(`${restarted.url}/v1/sandboxes/${planted}`, { headers: { authorization: `Bearer ${apiKey}` } });
      expect(res.status).toBe(404);
    } finally {
      stream.destroy();
      // Whatever the engine left of the cancelled build.
      for (const c of await docker.listContainers({ all: true, filters: { label: [`warren.sandbox=${planted}`] } }))
        await docker
          .getContainer(c.Id)
          .remove({ force: true })
          .catch(() => undefined);
    }
  }, 300_000);

  it("an image built to pass for a snapshot is not one: deleting the snapshot leaves it, and Warren's snapshot repository is refused as a build name", async () => {
    const sandbox = await Sandbox.create({ baseUrl: controller!.url, apiKey, ttlSeconds: 600 });
    ids.push(sandbox.id);
    const snapshot = await sandbox.snapshot();
    sandbox.close();
    const instance = controller!.sandboxes.credentials.instanceId;
    const lookalike = await build(
      'lookalike',
      ['FROM warren/sandbox:latest', `LABEL warren.snapshot="${snapshot.id}" warren.owner="${instance}"`, ''].join('\n'),
    );

    await new Snapshots({ baseUrl: controller!.url, apiKey }).delete(snapshot.id);
    // The built image is still there: only the snapshot's own image went.
    expect((await docker.getImage(lookalike).inspect()).Config.Labels?.['warren.snapshot']).toBe(snapshot.id);
    await expect(docker.getImage(`warren-snapshot/${snapshot.id}:latest`).inspect()).rejects.toMatchObject({ statusCode: 404 });

    await rm(context, { recursive: true, force: true });
    await mkdir(context);
    await writeFile(path.join(context, 'Dockerfile'), 'FROM warren/sandbox:latest\n');
    await expect(new Images({ baseUrl: controller!.url, apiKey }).build({ context, tag: `warren-snapshot/${snapshot.id}` })).rejects.toMatchObject({
      code: 'INVALID_PARAMS',
    });
  }, 300_000);
});
