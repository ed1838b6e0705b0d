import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { Sandbox, Secret, Volume, VolumeNotFoundError, VolumePathNotFoundError } from 'e2b';
import { startTestController, type TestController, tenantCredentials } from '../support/fixtures.js';

/**
 * The real `e2b` SDK's snapshots, forks and volumes against a real controller on real containers:
 * each goes through Warren's own snapshot and volume services with the calling API key, so a key
 * sees only its own (docs/e2b.md#snapshots-forks-and-volumes).
 */
describe('the e2b SDK: snapshots, forks and volumes on real sandboxes', () => {
  let warren: TestController;
  let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
  let other: { apiKey: string; apiUrl: string; sandboxUrl: string };
  const otherKey = `wk_other_${randomBytes(16).toString('hex')}`;
  beforeAll(async () => {
    const apiKey = `wk_test_${randomBytes(16).toString('hex')}`;
    warren = await startTestController({ credentials: await tenantCredentials(apiKey, [otherKey]) });
    const gateway = `${warren.url}/e2b`;
    opts = { apiKey, apiUrl: gateway, sandboxUrl: gateway };
    other = { apiKey: otherKey, apiUrl: gateway, sandboxUrl: gateway };
  }, 60_000);
  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
  }, 60_000);
  // Each test starts with no snapshots or volumes on either key, so a retried test (test/support/e2e-retry.ts)
  // does not meet what its first attempt left.
  beforeEach(async () => {
    for (const key of [opts, other]) {
      for (const snapshot of await Sandbox.listSnapshots(key).nextItems()) await Sandbox.deleteSnapshot(snapshot.snapshotId, key);
      for (const volume of await Volume.list(key)) await Volume.destroy(volume.volumeId, key);
    }
  }, 60_000);

  const call = (method: string, path: string, body?: unknown, apiKey = opts.apiKey) =>
    fetch(`${opts.apiUrl}${path}`, {
      method,
      headers: { 'x-api-key': apiKey, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
    });

  it('snapshots a sandbox and starts sandboxes from it by id and by name; lists and deletes it; another key reaches none of it', async () => {
    const sandbox = await Sandbox.create(opts);
    const made: Sandbox[] = [];
    try {
      await sandbox.files.write('state.txt', 'before the snapshot');
      const snapshot = await sandbox.createSnapshot({ name: 'e2b-snap' });
      expect(snapshot).toEqual({ snapshotId: expect.stringMatching(/^snap-[0-9a-z]{24}$/), names: ['e2b-snap'] });
      await sandbox.files.write('state.txt', 'after the snapshot');

      const listed = await Sandbox.listSnapshots(opts).nextItems();
      expect(listed).toEqual([snapshot]);
      expect(await Sandbox.listSnapshots({ ...opts, sandboxId: sandbox.sandboxId }).nextItems()).toEqual([snapshot]);
      expect(await Sandbox.listSnapshots({ ...opts, sandboxId: 'nosuchsandbox' }).nextItems()).toEqual([]);

      for (const ref of [snapshot.snapshotId, 'e2b-snap']) {
        const restored = await Sandbox.create(ref, opts);
        made.push(restored);
        expect(await restored.files.read('state.txt')).toBe('before the snapshot');
        // The template's user and home come with it.
        expect((await restored.commands.run('whoami && pwd')).stdout).toBe('user\n/home/user\n');
        expect((await restored.getInfo()).templateId).toBe('base');
      }

      // Another API key: no list, no create, no delete (the same answers as for one that does not exist).
      expect(await Sandbox.listSnapshots(other).nextItems()).toEqual([]);
      await expect(Sandbox.create(snapshot.snapshotId, other)).rejects.toThrow(/404.*not found/i);
      await expect(Sandbox.create('e2b-snap', other)).rejects.toThrow(/404.*not found/i);
      expect(await Sandbox.deleteSnapshot(snapshot.snapshotId, other)).toBe(false);

      // Hostile names and references: refused before any lookup, never a path.
      for (const name of ['../escape', 'a/b', '..', '.hidden']) await expect(sandbox.createSnapshot({ name })).rejects.toThrow(/400/);
      expect((await call('DELETE', '/templates/..%2F..%2Fetc')).status).toBe(400);
      await expect(Sandbox.create('../../etc', opts)).rejects.toThrow(/40[04]/);
      // A configured template is not deleted through E2B.
      await expect(Sandbox.deleteSnapshot('base', opts)).rejects.toThrow(/501.*configured on the controller/);

      expect(await Sandbox.deleteSnapshot(snapshot.snapshotId, opts)).toBe(true);
      expect(await Sandbox.deleteSnapshot(snapshot.snapshotId, opts)).toBe(false);
      expect(await Sandbox.listSnapshots(opts).nextItems()).toEqual([]);
      // Sandboxes made from it keep their files.
      expect(await made[0]!.files.read('state.txt')).toBe('before the snapshot');
    } finally {
      for (const s of [sandbox, ...made]) await s.kill().catch(() => undefined);
    }
  }, 240_000);

  it('forks a sandbox into independent sandboxes; fork limits and the API key apply', async () => {
    const parent = await Sandbox.create(opts);
    const forks: Sandbox[] = [];
    try {
      await parent.files.write('parent.txt', 'from the parent');
      const results = await parent.fork({ count: 2, timeoutMs: 120_000 });
      expect(results).toHaveLength(2);
      for (const result of results) {
        expect(result).toBeInstanceOf(Sandbox);
        forks.push(result as Sandbox);
      }
      const [a, b] = forks as [Sandbox, Sandbox];
      expect(new Set([parent.sandboxId, a.sandboxId, b.sandboxId]).size).toBe(3);
      expect(await a.files.read('parent.txt')).toBe('from the parent');
      await a.files.write('parent.txt', 'changed in a');
      expect(await b.files.read('parent.txt')).toBe('from the parent');
      expect(await parent.files.read('parent.txt')).toBe('from the parent');
      const info = await a.getInfo();
      expect(info.endAt.getTime() - Date.now()).toBeLessThanOrEqual(120_000);

      // Past the controller's fork limit (snapshots.maxForkCount, 10): refused whole, nothing made.
      const before = warren.controller.sandboxes.list().length;
      const tooMany = await call('POST', `/sandboxes/${parent.sandboxId}/fork`, { count: 11 });
      expect(tooMany.status).toBe(429);
      expect(((await tooMany.json()) as { message: string }).message).toMatch(/maxForkCount/);
      expect((await call('POST', `/sandboxes/${parent.sandboxId}/fork`, { count: 0 })).status).toBe(400);
      expect(warren.controller.sandboxes.list()).toHaveLength(before);
      // The sandbox's own access token is not an API key: it forks nothing.
      const byToken = await call(
        'POST',
        `/sandboxes/${parent.sandboxId}/fork`,
        { count: 1 },
        warren.controller.sandboxes.credentials.sandboxToken(parent.sandboxId),
      );
      expect(byToken.status).toBe(401);
      expect((await call('POST', '/sandboxes/nosuchsandbox/fork', { count: 1 })).status).toBe(404);
    } finally {
      for (const s of [parent, ...forks]) await s.kill().catch(() => undefined);
    }
  }, 240_000);

  it('creates, lists, mounts and destroys volumes; another key reaches none; names and mount paths are checked', async () => {
    const volume = await Volume.create('e2b-vol', opts);
    expect([volume.volumeId, volume.name]).toEqual(['e2b-vol', 'e2b-vol']);
    expect(await Volume.list(opts)).toEqual([{ volumeId: 'e2b-vol', name: 'e2b-vol' }]);
    expect(await Volume.getInfo('e2b-vol', opts)).toMatchObject({ volumeId: 'e2b-vol', name: 'e2b-vol' });
    expect((await Volume.connect('e2b-vol', opts)).volumeId).toBe('e2b-vol');
    const writer = await Sandbox.create({ ...opts, volumeMounts: { '/home/user/vol': volume } });
    const reader = await Sandbox.create({ ...opts, volumeMounts: { '/mnt/data': 'e2b-vol' } });
    try {
      // Below the template's home, the file API reaches it; elsewhere commands do.
      await writer.files.write('vol/note.txt', 'shared through a volume');
      expect((await reader.commands.run('cat /mnt/data/note.txt')).stdout).toBe('shared through a volume');
      expect((await writer.getInfo()).volumeMounts).toEqual([{ name: 'e2b-vol', path: '/home/user/vol' }]);
      // Refused while mounted.
      await expect(Volume.destroy('e2b-vol', opts)).rejects.toThrow(/409.*mounted/);

      // Another key: not found everywhere, and it cannot mount it.
      await expect(Volume.getInfo('e2b-vol', other)).rejects.toBeInstanceOf(VolumeNotFoundError);
      expect(await Volume.destroy('e2b-vol', other)).toBe(false);
      expect(await Volume.list(other)).toEqual([]);
      await expect(Sandbox.create({ ...other, volumeMounts: { '/mnt/data': 'e2b-vol' } })).rejects.toThrow(/404.*No volume 'e2b-vol'/);

      // Hostile names and mount paths.
      for (const name of ['../../etc', '..', 'a/b', '/var/lib/docker']) await expect(Volume.create(name, opts)).rejects.toThrow(/400/);
      expect((await call('GET', '/volumes/..%2F..%2Fetc')).status).toBe(400);
      await expect(Sandbox.create({ ...opts, volumeMounts: { '/opt/warren': 'e2b-vol' } })).rejects.toThrow(/403/);
      await expect(Sandbox.create({ ...opts, volumeMounts: { '/home/user': 'e2b-vol' } })).rejects.toThrow(/403/);
      await expect(Sandbox.create({ ...opts, volumeMounts: { '/data': '../e2b-vol' } })).rejects.toThrow(/400/);

      // The volume content API: the volume's own files, through a helper sandbox's daemon under a policy of the volume alone.
      const content = { apiUrl: opts.apiUrl };
      expect(await volume.readFile('note.txt', content)).toBe('shared through a volume');
      expect(await volume.readFile('/note.txt', content)).toBe('shared through a volume');
      expect(await volume.writeFile('docs/readme.md', '# hello', content)).toMatchObject({ name: 'readme.md', path: '/docs/readme.md', type: 'file', size: 7 });
      expect((await reader.commands.run('cat /mnt/data/docs/readme.md')).stdout).toBe('# hello');
      expect(await volume.makeDir('made/deep', content)).toMatchObject({ path: '/made/deep', type: 'directory' });
      expect((await volume.list('/', content)).map((e) => `${e.type} ${e.path}`).sort()).toEqual(['directory /docs', 'directory /made', 'file /note.txt']);
      expect((await volume.list('/', { ...content, depth: 2 })).map((e) => e.path).sort()).toContain('/docs/readme.md');
      // Listings carry each entry's mode, as getInfo does.
      const listedNote = (await volume.list('/', content)).find((e) => e.path === '/note.txt');
      expect(listedNote?.mode).toBe((await volume.getInfo('note.txt', content)).mode);
      expect(listedNote?.mode).not.toBe(0);
      expect(await volume.exists('docs/readme.md', content)).toBe(true);
      expect(await volume.exists('docs/none.md', content)).toBe(false);
      expect((await volume.getInfo('docs', content)).type).toBe('directory');
      const bytes = new Uint8Array([0, 1, 2, 255]);
      await volume.writeFile('bin.dat', new Blob([bytes]), content);
      expect(await volume.readFile('bin.dat', { ...content, format: 'bytes' })).toEqual(bytes);
      await volume.remove('made', content);
      expect(await volume.exists('made', content)).toBe(false);
      // The helper is the gateway's own: not in the program's list.
      expect((await Sandbox.list(opts).nextItems()).map((s) => s.sandboxId).sort()).toEqual([writer.sandboxId, reader.sandboxId].sort());

      // Hostile paths: .. and absolute paths stay in the volume; a link in the volume that leads out is refused.
      await expect(volume.readFile('../../../etc/passwd', content)).rejects.toThrow(VolumePathNotFoundError);
      await expect(volume.readFile('/etc/hostname', content)).rejects.toThrow(VolumePathNotFoundError);
      expect(await volume.readFile('../../note.txt', content)).toBe('shared through a volume');
      await writer.commands.run('ln -s /etc/passwd vol/passwd-link && ln -s / vol/root-link && ln -s /opt/warren vol/warren-link');
      await expect(volume.readFile('passwd-link', content)).rejects.toThrow(/403/);
      await expect(volume.readFile('root-link/etc/passwd', content)).rejects.toThrow(/403/);
      await expect(volume.list('root-link', content)).rejects.toThrow(/403/);
      await expect(volume.writeFile('warren-link/evil', 'x', content)).rejects.toThrow(/403/);
      await expect(volume.writeFile('root-link/tmp/evil', 'x', content)).rejects.toThrow(/403/);
      expect(await volume.getInfo('passwd-link', content)).toMatchObject({ type: 'symlink', target: '/etc/passwd' });

      // Tokens: none, another volume's, another key's, forged: refused (401), whatever the path.
      const otherVolume = await Volume.create('e2b-vol-2', opts);
      const theirs = await Volume.create('e2b-vol', other);
      const raw = (token: string | undefined, path = 'note.txt', volumeId = 'e2b-vol') =>
        fetch(
          `${opts.apiUrl}/volumecontent/${volumeId}/file?path=${encodeURIComponent(path)}`,
          token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } },
        );
      expect((await raw(undefined)).status).toBe(401);
      expect((await raw(otherVolume.token)).status).toBe(401);
      expect((await raw(`${volume.token.slice(0, -3)}AAA`)).status).toBe(401);
      expect((await raw(opts.apiKey)).status).toBe(401);
      expect((await raw(volume.token, 'note.txt')).status).toBe(200);
      // Another key's volume of the same name is its own: its token reads its (empty) volume, never mine.
      expect((await raw(theirs.token, 'note.txt', 'e2b-vol')).status).toBe(404);
      expect((await raw(theirs.token, 'note.txt', 'e2b-vol-2')).status).toBe(401);
      await expect(theirs.readFile('note.txt', content)).rejects.toThrow(VolumePathNotFoundError);
      // uid/gid of another user, and a body past the limit, are refused before anything is written.
      await expect(volume.writeFile('root.txt', 'x', { ...content, uid: 0 })).rejects.toThrow(/400.*uid/);
      const huge = await fetch(`${opts.apiUrl}/volumecontent/e2b-vol/file?path=huge.bin`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${volume.token}`, 'content-type': 'application/octet-stream', 'content-length': String(65 * 1024 * 1024) },
        body: Buffer.alloc(1024),
      }).catch(() => ({ status: 413 }));
      expect(huge.status).toBe(413);
      expect(await volume.exists('huge.bin', content)).toBe(false);
      expect(await volume.exists('root.txt', content)).toBe(false);
      expect(await Volume.destroy('e2b-vol-2', opts)).toBe(true);
      expect(await Volume.destroy('e2b-vol', other)).toBe(true);
    } finally {
      await writer.kill();
      await reader.kill();
    }
    expect(await Volume.destroy('e2b-vol', opts)).toBe(true);
    expect(await Volume.destroy('e2b-vol', opts)).toBe(false);
    expect(await Volume.list(opts)).toEqual([]);
  }, 240_000);

  it('answers what Warren cannot back with E2B errors naming the feature, refuses users but its own, and bounds bodies', async () => {
    const sandbox = await Sandbox.create(opts);
    try {
      await expect(sandbox.commands.run('whoami', { user: 'root' })).rejects.toThrow(/user 'root'.*not available/);
      await expect(sandbox.files.read('/etc/hostname', { user: 'root' })).rejects.toThrow(/user 'root'.*not available/);
      await expect(sandbox.files.write('x.txt', 'x', { user: 'root' })).rejects.toThrow(/user 'root'/);

      const huge = JSON.stringify({ name: 'x'.repeat(2 * 1024 * 1024) });
      for (const path of [
        `/sandboxes/${sandbox.sandboxId}/snapshots`,
        '/volumes',
        `/sandboxes/${sandbox.sandboxId}/fork`,
        `/sandboxes/${sandbox.sandboxId}/network`,
      ]) {
        const res = await call(path.endsWith('network') ? 'PUT' : 'POST', path, huge);
        expect([path, res.status]).toEqual([path, 413]);
      }
      expect((await call('POST', `/sandboxes/${sandbox.sandboxId}/snapshots`, '{not json')).status).toBe(400);
      expect(await Sandbox.listSnapshots(opts).nextItems()).toEqual([]);
    } finally {
      await sandbox.kill();
    }
    await expect(Sandbox.create({ ...opts, mcp: { 'github/e2b-dev/mcp-server': { runCmd: 'true', installCmd: 'true' } } })).rejects.toThrow(/501.*MCP/);
    await expect(Secret.create('api-key', 'value', opts)).rejects.toThrow(/501.*secrets/);
    await expect(Secret.list(opts).nextItems()).rejects.toThrow(/501/);
    for (const [method, path] of [
      // Template builds are served (e2b-templates.test.ts); tags, build log pages and the v1 Dockerfile API are not.
      ['POST', '/templates/tags'],
      ['DELETE', '/templates/tags'],
      ['GET', '/templates/base/builds/b1/logs'],
      ['POST', '/templates'],
    ] as const) {
      const res = await call(method, path, method === 'POST' ? {} : undefined);
      expect([path, res.status]).toEqual([path, 501]);
      expect(((await res.json()) as { code: number; message: string }).message).toMatch(/not supported by Warren's E2B gateway/);
    }
    expect(warren.controller.sandboxes.list()).toEqual([]);
  }, 180_000);
});
