import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { FileNotFoundError, FileType, FilesystemEventType, NotFoundError, Sandbox, SandboxError, type FilesystemEvent } from 'e2b';
import { startLocalController, type LocalController } from '../support/local-controller.js';

describe('the e2b SDK against the gateway: files', () => {
  let warren: LocalController;
  let sandbox: Sandbox;
  let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
  beforeAll(async () => {
    warren = await startLocalController();
    opts = { apiKey: warren.apiKey, apiUrl: `${warren.url}/e2b`, sandboxUrl: `${warren.url}/e2b` };
    sandbox = await Sandbox.create(opts);
  });
  afterAll(async () => {
    await sandbox?.kill();
    await warren[Symbol.asyncDispose]();
  });

  it('writes and reads text and bytes, relative paths below the home', async () => {
    const written = await sandbox.files.write('notes/a.txt', 'héllo\n');
    expect(written).toMatchObject({ name: 'a.txt', path: `${warren.root}/notes/a.txt` });
    expect(await sandbox.files.read('notes/a.txt')).toBe('héllo\n');
    expect(await sandbox.files.read(`${warren.root}/notes/a.txt`)).toBe('héllo\n');
    const bytes = new Uint8Array([0, 1, 2, 255]);
    await sandbox.files.write('bin.dat', bytes.buffer);
    expect(new Uint8Array(await sandbox.files.read('bin.dat', { format: 'bytes' }))).toEqual(bytes);
    expect((await sandbox.commands.run('cat notes/a.txt')).stdout).toBe('héllo\n');
    await sandbox.files.write('empty.txt', '');
    expect(await sandbox.files.read('empty.txt')).toBe('');
  });

  it('takes octet-stream and gzip uploads, and gzip-asking downloads', async () => {
    await sandbox.files.write('octet.txt', 'plain octets', { useOctetStream: true });
    expect(await sandbox.files.read('octet.txt')).toBe('plain octets');
    await sandbox.files.write('zipped.txt', 'squeezed '.repeat(1000), { gzip: true });
    expect(await sandbox.files.read('zipped.txt', { gzip: true })).toBe('squeezed '.repeat(1000));
  });

  it('writes many files in one call', async () => {
    const entries = await sandbox.files.write([
      { path: 'many/one.txt', data: '1' },
      { path: 'many/deep/two.txt', data: '22' },
    ]);
    expect(entries.map((e) => e.name)).toEqual(['one.txt', 'two.txt']);
    expect(await sandbox.files.read('many/deep/two.txt')).toBe('22');
  });

  it('writes a file larger than one daemon call in pieces', async () => {
    const big = 'x'.repeat(9 * 1024 * 1024 + 17);
    await sandbox.files.write('big.txt', big);
    expect((await sandbox.commands.run('wc -c < big.txt')).stdout.trim()).toBe(String(big.length));
    expect((await sandbox.files.read('big.txt')).length).toBe(big.length);
  });

  it('lists, stats, makes folders, renames and removes', async () => {
    await sandbox.files.write('tree/f.txt', 'abc');
    expect(await sandbox.files.makeDir('tree/sub')).toBe(true);
    expect(await sandbox.files.makeDir('tree/sub')).toBe(false);
    const listed = await sandbox.files.list('tree');
    expect(listed.map((e) => [e.name, e.type]).sort()).toEqual([
      ['f.txt', FileType.FILE],
      ['sub', FileType.DIR],
    ]);
    const info = await sandbox.files.getInfo('tree/f.txt');
    expect(info).toMatchObject({ name: 'f.txt', type: FileType.FILE, size: 3, path: `${warren.root}/tree/f.txt` });
    expect(info.permissions).toMatch(/^-rw/);
    expect(await sandbox.files.exists('tree/f.txt')).toBe(true);
    expect(await sandbox.files.exists('tree/missing.txt')).toBe(false);
    const moved = await sandbox.files.rename('tree/f.txt', 'tree/g.txt');
    expect(moved).toMatchObject({ name: 'g.txt', type: FileType.FILE });
    await sandbox.files.remove('tree');
    expect(await sandbox.files.exists('tree')).toBe(false);
  });

  it('answers missing files and paths outside the policy with the SDK error classes', async () => {
    await expect(sandbox.files.read('nope.txt')).rejects.toThrow(FileNotFoundError);
    await expect(sandbox.files.getInfo('nope.txt')).rejects.toThrow(NotFoundError);
    const outside = await sandbox.files.read('/etc/hostname').catch((err: unknown) => err);
    expect(outside).toBeInstanceOf(SandboxError);
    expect(String(outside)).toMatch(/403/);
    await expect(sandbox.files.read('../../etc/passwd')).rejects.toThrow(/403/);
    await expect(sandbox.files.list('/etc')).rejects.toThrow(/permission_denied/);
    await expect(sandbox.files.list('nope-dir')).rejects.toThrow(NotFoundError);
    const run = await sandbox.commands.run('true', { cwd: 'no-such-dir' }).catch((err: unknown) => err);
    expect(run).toBeInstanceOf(SandboxError);
  });

  it('watches a folder: create, write and remove events with names relative to it', async () => {
    await sandbox.files.makeDir('watched');
    const events: FilesystemEvent[] = [];
    const handle = await sandbox.files.watchDir('watched', (event) => void events.push(event), { recursive: true });
    try {
      await sandbox.files.write('watched/new.txt', 'a');
      const seen = async (type: FilesystemEventType, name: string) => {
        for (let i = 0; i < 200 && !events.some((e) => e.type === type && e.name === name); i++) await new Promise((r) => setTimeout(r, 20));
        expect(events).toContainEqual(expect.objectContaining({ type, name }));
      };
      await seen(FilesystemEventType.CREATE, 'new.txt');
      await sandbox.files.write('watched/new.txt', 'longer content');
      await seen(FilesystemEventType.WRITE, 'new.txt');
      await sandbox.files.remove('watched/new.txt');
      await seen(FilesystemEventType.REMOVE, 'new.txt');
    } finally {
      await handle.stop();
    }
    await expect(sandbox.files.watchDir('no-such-folder', () => undefined)).rejects.toThrow(NotFoundError);
  });

  it('refuses what Warren does not serve with a message naming it', async () => {
    await expect(sandbox.commands.run('id', { user: 'root' })).rejects.toThrow(/non-root user/);
    await expect(sandbox.files.read('x', { user: 'root' })).rejects.toThrow(/non-root user/);
  });
});
