// The pass under a snapshot's freeze (syncTree): a copy made while the source changed is brought to
// the source's exact state, on the real file system, without following any link.
import { execFile } from 'node:child_process';
import { link, lstat, mkdir, mkdtemp, readFile, readlink, rm, symlink, truncate, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { SnapshotStore } from '../src/snapshot-store.js';
import { copyTree, removeTree, syncTree } from '../src/tree-copy.js';

const run = promisify(execFile);
// Every case runs cp, find and rm as processes: on a loaded two-core machine that takes seconds.
jest.setTimeout(30_000);

/** Every entry under `dir`: type, mode, size, mtime (ns), link target, content, and hard-link group. */
async function describeTree(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const inodes = new Map<bigint, string>();
  const walk = async (rel: string): Promise<void> => {
    const { stdout } = await run('find', [path.join(dir, rel), '-mindepth', '1', '-maxdepth', '1', '-printf', '%f\\0']);
    for (const name of stdout.split('\0').filter(Boolean).sort()) {
      const p = rel === '' ? name : `${rel}/${name}`;
      const st = await lstat(path.join(dir, p), { bigint: true });
      let extra = '';
      if (st.isSymbolicLink()) extra = `-> ${await readlink(path.join(dir, p))}`;
      else if (st.isFile()) {
        extra = (await readFile(path.join(dir, p))).toString('base64');
        if (st.nlink > 1n) extra += ` linked-with ${inodes.get(st.ino) ?? p}`;
        if (!inodes.has(st.ino)) inodes.set(st.ino, p);
      }
      out[p] = `${st.mode.toString(8)} ${st.isDirectory() ? '' : st.size} ${st.isSymbolicLink() ? '' : st.mtimeNs} ${extra}`;
      if (st.isDirectory()) await walk(p);
    }
  };
  await walk('');
  return out;
}

describe('syncTree', () => {
  let root: string;
  let from: string;
  let to: string;
  beforeEach(async () => {
    root = await mkdtemp(path.join(tmpdir(), 'warren-tree-copy-'));
    from = path.join(root, 'from');
    to = path.join(root, 'to');
    await mkdir(to);
    await mkdir(path.join(from, 'src', 'deep'), { recursive: true });
    await writeFile(path.join(from, 'same-tick.txt'), 'aaaa');
    await writeFile(path.join(from, 'src', 'gone.txt'), 'bye');
    await writeFile(path.join(from, 'src', 'deep', 'kept.txt'), 'kept');
    await writeFile(path.join(from, 'becomes-dir'), 'file');
    await writeFile(path.join(from, 'hard-a'), 'shared');
    await link(path.join(from, 'hard-a'), path.join(from, 'src', 'hard-b'));
    await symlink('/etc/passwd', path.join(from, 'link'));
    await writeFile(path.join(from, 'sparse.img'), '');
    await truncate(path.join(from, 'sparse.img'), 64 * 1024 * 1024);
    // Old enough to be outside the one-second margin of the pass.
    const old = new Date(Date.now() - 3600_000);
    await utimes(path.join(from, 'src', 'deep', 'kept.txt'), old, old);
  });
  afterEach(async () => rm(root, { recursive: true, force: true }));

  it('brings a copy made before changes to the exact state of the source, recopying only what changed', async () => {
    const firstPassAt = Date.now();
    await copyTree(from, to, 'copy');
    // Changes after the first pass: a rewrite of the same size in the same second (mtime kept as
    // it was, which only the ctime reveals), removals, additions, a type change, a new link
    // target, a rewrite of a hard-linked file, a folder's mode.
    await writeFile(path.join(from, 'same-tick.txt'), 'bbbb');
    // Its mtime set back to the nanosecond (as a coarse clock would have left it).
    await run('touch', ['-m', '-r', path.join(to, 'same-tick.txt'), path.join(from, 'same-tick.txt')]);
    await rm(path.join(from, 'src', 'gone.txt'));
    await writeFile(path.join(from, 'src', 'deep', 'new.txt'), 'new');
    await rm(path.join(from, 'becomes-dir'));
    await mkdir(path.join(from, 'becomes-dir'));
    await writeFile(path.join(from, 'becomes-dir', 'inside'), 'in');
    await rm(path.join(from, 'link'));
    await symlink('/etc/shadow', path.join(from, 'link'));
    await writeFile(path.join(from, 'hard-a'), 'SHARED');
    await run('chmod', ['700', path.join(from, 'src')]);

    const result = await syncTree(from, to, firstPassAt, 'sync');
    expect(await describeTree(to)).toEqual(await describeTree(from));
    expect(await readFile(path.join(to, 'same-tick.txt'), 'utf8')).toBe('bbbb');
    expect((await lstat(path.join(to, 'hard-a'))).ino).toBe((await lstat(path.join(to, 'src', 'hard-b'))).ino);
    expect((await lstat(path.join(to, 'sparse.img'))).blocks).toBeLessThan(1024);
    expect(result.removed).toBe(1);
    // kept.txt (old, unchanged) was not copied again.
    expect(result.copied).toBeLessThan(Object.keys(await describeTree(from)).length);
  });

  it('replaces a link the copy holds where the source has a folder, and never writes through it', async () => {
    const outside = path.join(root, 'outside');
    await mkdir(outside);
    await copyTree(from, to, 'copy');
    // The copy (the sandbox's bytes) has a link where the source now has a real folder.
    await rm(path.join(to, 'src'), { recursive: true });
    await symlink(outside, path.join(to, 'src'));
    await syncTree(from, to, Date.now(), 'sync');
    expect((await lstat(path.join(to, 'src'))).isDirectory()).toBe(true);
    expect(await describeTree(outside)).toEqual({});
    expect(await describeTree(to)).toEqual(await describeTree(from));
  });
});

describe('names that are not UTF-8', () => {
  let root: string;
  beforeEach(async () => {
    root = await mkdtemp(path.join(tmpdir(), 'warren-tree-bytes-'));
  });
  afterEach(async () => removeTree(root));

  it('syncTree copies folders holding them again whole, byte for byte, at the top and below', async () => {
    const from = path.join(root, 'from');
    const to = path.join(root, 'to');
    await mkdir(path.join(from, 'sub'), { recursive: true });
    await mkdir(to);
    await copyTree(from, to, 'copy');
    // After the first pass: names with bytes that are not UTF-8, a link whose target is such bytes.
    const make = 'printf one > "$1/sub/$(printf \'a\\377\')"; printf two > "$1/sub/$(printf \'a\\376\')"; ln -s "$(printf \'t\\377\')" "$1/sub/link"';
    await run('sh', ['-c', make, 'make', from]);
    const list = async (dir: string) => (await run('sh', ['-c', 'cd "$1" && find . -printf "%p %s %l\\n" | od -c | md5sum', 'list', dir])).stdout;
    await syncTree(from, to, Date.now(), 'sync');
    expect(await list(to)).toBe(await list(from));
    await run('sh', ['-c', 'printf top > "$1/$(printf \'b\\377\')"', 'make', from]);
    await syncTree(from, to, Date.now(), 'sync');
    expect(await list(to)).toBe(await list(from));
  });
});

// Sandbox code can nest folders past PATH_MAX (4096 bytes of path): nothing that walks or removes
// a snapshot's copy by path may trip on it (a failed capture left its copy on the host, and the
// next start's clean-up failed on it).
describe('trees nested past PATH_MAX', () => {
  let root: string;
  const nest = (dir: string, levels: number) =>
    run('sh', [
      '-c',
      `cd "$1" && i=0; while [ $i -lt ${levels} ]; do mkdir ${'d'.repeat(20)} && cd ${'d'.repeat(20)}; i=$((i+1)); done; echo deep > bottom`,
      'nest',
      dir,
    ]);
  beforeEach(async () => {
    root = await mkdtemp(path.join(tmpdir(), 'warren-tree-deep-'));
  });
  afterEach(async () => removeTree(root));

  it('syncTree and copyTree refuse such a tree with NOT_SUPPORTED naming no host path, and removeTree takes it away', async () => {
    const from = path.join(root, 'from');
    const to = path.join(root, 'to');
    await mkdir(path.join(from, 'a'), { recursive: true });
    await mkdir(to);
    await copyTree(from, to, 'copy');
    // After the first pass: a deep tree appears in the source, and the copy holds one the source lacks.
    await nest(path.join(from, 'a'), 260);
    await mkdir(path.join(to, 'gone'));
    await nest(path.join(to, 'gone'), 260);
    for (const attempt of [() => syncTree(from, to, Date.now(), 'sync'), () => copyTree(from, path.join(root, 'to2'), 'copy')]) {
      const err = (await attempt().catch((e: unknown) => e)) as { code: string; message: string };
      expect(err.code).toBe('NOT_SUPPORTED');
      expect(err.message).not.toContain(root);
    }
    await removeTree(to);
    await expect(lstat(to)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('removeTree removes it without following links, and a snapshot store loads past a half-written one', async () => {
    const outside = path.join(root, 'outside');
    await mkdir(outside);
    await writeFile(path.join(outside, 'keep'), 'kept');
    const store = new SnapshotStore(path.join(root, 'state'));
    await store.load();
    const { workspace } = await store.begin('snap-000000000000000000000000');
    await nest(workspace, 260);
    await symlink(outside, path.join(workspace, 'link'));
    expect(await store.load()).toEqual(['snap-000000000000000000000000']);
    expect(await readFile(path.join(outside, 'keep'), 'utf8')).toBe('kept');
    await expect(lstat(path.join(root, 'state', 'snapshots', '.tmp-snap-000000000000000000000000'))).rejects.toMatchObject({ code: 'ENOENT' });
    await removeTree(path.join(root, 'nothing-here'));
  });
});
