import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdir, mkdtemp, readdir, realpath, rm, stat, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { FolderTree, pinChild, pinFolder } from '../src/folder-pin.js';

/**
 * The descriptor walk that makes missing folders: a link on the way (what a swap after the policy
 * check leaves there) is refused and nothing is made past it, or through it.
 */
describe('folders pinned and made through descriptors', () => {
  let dir: string;
  let root: string;
  let outside: string;

  beforeAll(async () => {
    dir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'warren-pin-')));
    root = path.join(dir, 'workspace');
    outside = path.join(dir, 'private');
    await mkdir(path.join(root, 'real'), { recursive: true });
    await mkdir(outside);
    await writeFile(path.join(outside, 'precious'), 'x');
    // A folder of the checked path swapped for a link to a folder outside it.
    await symlink(outside, path.join(root, 'swapped'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('makes missing folders one segment at a time and reports each one made', async () => {
    const made: string[] = [];
    const pinned = await pinFolder(path.join(root, 'real/a/b'), 'real/a/b', { made, mode: 0o750 });
    try {
      expect(pinned.byDescriptor).toBe(true);
      await writeFile(pinned.at('f.txt'), 'in place');
    } finally {
      await pinned.close();
    }
    expect(made).toEqual([path.join(root, 'real/a'), path.join(root, 'real/a/b')]);
    expect((await stat(path.join(root, 'real/a/b/f.txt'))).isFile()).toBe(true);
  });

  it('refuses a link on the way with PATH_NOT_IN_SANDBOX and makes nothing through it', async () => {
    await expect(pinFolder(path.join(root, 'swapped/new/deeper'), 'swapped/new/deeper', { made: [] })).rejects.toMatchObject({
      code: 'PATH_NOT_IN_SANDBOX',
    });
    expect(await readdir(outside)).toEqual(['precious']);
  });

  it('refuses a folder whose kernel name is not the walked path (reached through a link)', async () => {
    await expect(pinFolder(path.join(root, 'swapped'), 'swapped')).rejects.toMatchObject({ code: 'PATH_NOT_IN_SANDBOX' });
  });

  it('a staging tree is entered without following a link swapped in inside it', async () => {
    const parent = await pinFolder(root, '.');
    try {
      await mkdir(parent.at('stage'));
      const staging = await pinChild(parent, 'stage', 'stage');
      const tree = new FolderTree(staging, 'stage');
      try {
        await mkdir(await tree.at('sub'));
        await writeFile(await tree.at('sub/ok.txt'), 'ok');
        await rm(path.join(root, 'stage/sub'), { recursive: true });
        await symlink(outside, path.join(root, 'stage/sub'));
        // The open folder 'sub' was removed: a new lookup finds the link and refuses it.
        const fresh = new FolderTree(staging, 'stage');
        await expect(fresh.at('sub/evil.txt')).rejects.toMatchObject({ code: 'PATH_NOT_IN_SANDBOX' });
        await fresh.close();
      } finally {
        await tree.close();
        await staging.close();
      }
    } finally {
      await parent.close();
    }
    expect(await readdir(outside)).toEqual(['precious']);
  });
});
