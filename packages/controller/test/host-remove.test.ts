import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { removeHostTree } from '../src/host-remove.js';

/**
 * What a compromised daemon can leave in its host folder, removed by the controller: a tree nested
 * past PATH_MAX (fs.rm throws ENAMETOOLONG on it), links to files and folders outside (never
 * followed), a FIFO, and folders of mode 000.
 */
describe('removing a hostile host folder', () => {
  let dir: string;
  let outside: string;

  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'warren-remove-'));
    outside = path.join(dir, 'outside');
    await mkdir(outside);
    await writeFile(path.join(outside, 'keep.txt'), 'keep');
  });
  afterEach(async () => {
    execFileSync('rm', ['-rf', '--', dir]);
  });

  const plantDeep = (target: string) =>
    execFileSync('python3', [
      '-c',
      'import os, sys\nos.chdir(sys.argv[1])\nfor i in range(1500):\n    os.mkdir("ddd"); os.chdir("ddd")\nopen("leaf", "w").write("deep")\nos.chmod(".", 0)',
      target,
    ]);

  it('removes a tree past PATH_MAX with links out, a FIFO and locked folders, and follows no link', async () => {
    const tree = path.join(dir, 'tree');
    await mkdir(tree);
    plantDeep(tree);
    await symlink(path.join(outside, 'keep.txt'), path.join(tree, 'file-link'));
    await symlink(outside, path.join(tree, 'folder-link'));
    execFileSync('mkfifo', [path.join(tree, 'fifo')]);
    await mkdir(path.join(tree, 'locked'));
    await writeFile(path.join(tree, 'locked', 'x'), 'x');
    execFileSync('chmod', ['000', path.join(tree, 'locked')]);
    await expect(rm(tree, { recursive: true, force: true })).rejects.toMatchObject({ code: 'ENAMETOOLONG' });
    await removeHostTree(tree);
    await expect(stat(tree)).rejects.toMatchObject({ code: 'ENOENT' });
    expect(await readFile(path.join(outside, 'keep.txt'), 'utf8')).toBe('keep');
  }, 60_000);

  it('a missing path is no error; a link in place of the folder is removed, not its target', async () => {
    await removeHostTree(path.join(dir, 'absent'));
    const link = path.join(dir, 'link');
    await symlink(outside, link);
    await removeHostTree(link);
    await expect(stat(link)).rejects.toMatchObject({ code: 'ENOENT' });
    expect(await readFile(path.join(outside, 'keep.txt'), 'utf8')).toBe('keep');
  });

  it('a removal that takes longer than its bound is stopped and fails with INTERNAL', async () => {
    const tree = path.join(dir, 'many');
    await mkdir(tree);
    // Enough files that `rm` cannot finish within 1 ms (its own start takes longer).
    for (let i = 0; i < 2000; i += 200) await Promise.all(Array.from({ length: 200 }, (_, j) => writeFile(path.join(tree, `f${i + j}`), '')));
    await expect(removeHostTree(tree, { timeoutMs: 1 })).rejects.toMatchObject({ code: 'INTERNAL', message: expect.stringContaining('longer than') });
    await removeHostTree(tree);
    await expect(stat(tree)).rejects.toMatchObject({ code: 'ENOENT' });
  }, 60_000);
});
