import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { lstat, mkdtemp, readFile, readdir, readlink, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { checkArchive } from '@warren/sdk';
import { startTestAgent, type TestAgent } from '../support/fixtures.js';
import { codeOf, tar } from '../support/files.js';

describe('glob, and folders as tar archives', () => {
  let agent: TestAgent;
  beforeAll(async () => {
    agent = await startTestAgent();
    await agent.files.write('g/a.py', '1');
    await agent.files.write('g/b.txt', '2');
    await agent.files.write('g/sub/c.py', '3');
    await agent.files.write('g/sub/deep/d.py', '4');
    await agent.files.write('g/.hidden.py', '5');
  });
  afterAll(async () => {
    await agent[Symbol.asyncDispose]();
  });

  it('globs relative to a folder, with dot files, and refuses patterns that leave or are too complex', async () => {
    expect(await agent.files.glob('g', '**/*.py')).toEqual(['.hidden.py', 'a.py', 'sub/c.py', 'sub/deep/d.py']);
    expect(await agent.files.glob('g', '*.py')).toEqual(['.hidden.py', 'a.py']);
    expect(await agent.files.glob('g', 'sub/{c,x}.py')).toEqual(['sub/c.py']);
    expect(await agent.files.globDetailed('g', '**/*', { maxResults: 2 })).toMatchObject({ truncated: true, matches: expect.any(Array) });
    expect(await codeOf(agent.files.glob('g', '../**'))).toBe('INVALID_PARAMS');
    expect(await codeOf(agent.files.glob('g', '/etc/*'))).toBe('INVALID_PARAMS');
    expect(await codeOf(agent.files.glob('g', '*'.repeat(40)))).toBe('INVALID_PARAMS');
    expect(await codeOf(agent.files.glob('g', 'x'.repeat(2000)))).toBe('INVALID_PARAMS');
    expect(await codeOf(agent.files.glob('/etc', '*'))).toBe('PATH_NOT_IN_SANDBOX');
  });

  it('uploads a tar into a folder and downloads it back, checked by the same rules', async () => {
    const archive = await tar([
      { header: { name: 'proj/', type: 'directory', mode: 0o755 } },
      { header: { name: 'proj/main.py', mode: 0o755 }, data: 'print(1)\n' },
      { header: { name: 'proj/lib/util.py', mode: 0o644 }, data: 'x = 1\n' },
      { header: { name: 'proj/link', type: 'symlink', linkname: 'lib/util.py' } },
    ]);
    expect(await agent.files.upload('up', archive)).toMatchObject({ files: 2, directories: 1, symlinks: 1 });
    expect(await readFile(path.join(agent.root, 'up/proj/main.py'), 'utf8')).toBe('print(1)\n');
    expect((await lstat(path.join(agent.root, 'up/proj/main.py'))).mode & 0o777).toBe(0o755);
    expect(await readlink(path.join(agent.root, 'up/proj/link'))).toBe('lib/util.py');
    expect(await readdir(path.join(agent.root))).not.toContainEqual(expect.stringMatching(/warren-upload/));
    expect(await codeOf(agent.files.upload('up', archive))).toBe('ALREADY_EXISTS');
    await agent.files.upload('up', archive, { overwrite: true });

    const down = await agent.files.download('up/proj');
    expect(down.entries.map((e) => `${e.kind}:${e.name}`).sort()).toEqual(['directory:lib', 'file:lib/util.py', 'file:main.py', 'symlink:link']);
    const local = await mkdtemp(path.join(os.tmpdir(), 'warren-down-'));
    try {
      await agent.files.downloadTo('up/proj', path.join(local, 'proj'));
      expect(await readFile(path.join(local, 'proj/lib/util.py'), 'utf8')).toBe('x = 1\n');
      expect(await readlink(path.join(local, 'proj/link'))).toBe('lib/util.py');
    } finally {
      await rm(local, { recursive: true, force: true });
    }
  });

  it('download leaves out links that point outside the folder, and never follows them', async () => {
    const outside = path.join(path.dirname(agent.root), 'secret.txt');
    await writeFile(outside, 'secret');
    await agent.files.write('dl/ok.txt', 'ok');
    await symlink(outside, path.join(agent.root, 'dl/abs-out'));
    await symlink('../../secret.txt', path.join(agent.root, 'dl/rel-out'));
    await symlink('../g/a.py', path.join(agent.root, 'dl/sibling'));
    const down = await agent.files.download('dl');
    expect(down.entries.map((e) => e.name)).toEqual(['ok.txt']);
    expect(down.skipped.map((s) => s.path).sort()).toEqual(['abs-out', 'rel-out', 'sibling']);
    expect(Buffer.from(down.archive).includes(Buffer.from('secret'))).toBe(false);
  });

  it.each([
    ['an absolute name', [{ header: { name: '/etc/evil' }, data: 'x' }]],
    ['a .. name', [{ header: { name: '../evil' }, data: 'x' }]],
    ['a nested .. name', [{ header: { name: 'a/../../evil' }, data: 'x' }]],
    ['a symlink that leaves', [{ header: { name: 'l', type: 'symlink' as const, linkname: '../../x' } }]],
    ['an absolute symlink', [{ header: { name: 'l', type: 'symlink' as const, linkname: '/etc/passwd' } }]],
    ['a symlink with a late ..', [{ header: { name: 'dot', type: 'symlink' as const, linkname: '.' } }, { header: { name: 'l', type: 'symlink' as const, linkname: 'dot/..' } }]],
    ['a write below a symlink', [{ header: { name: 'l', type: 'symlink' as const, linkname: 'sub' } }, { header: { name: 'l/x' }, data: 'x' }]],
    ['a hard link', [{ header: { name: 'h', type: 'link' as const, linkname: 'other' } }]],
    ['a character device', [{ header: { name: 'dev', type: 'character-device' as const, devmajor: 1, devminor: 3 } }]],
    ['a FIFO', [{ header: { name: 'fifo', type: 'fifo' as const } }]],
    ['a setuid file', [{ header: { name: 'suid', mode: 0o4755 }, data: 'x' }]],
    ['a duplicate name', [{ header: { name: 'd' }, data: 'x' }, { header: { name: 'd' }, data: 'y' }]],
  ])('refuses an archive with %s, writing nothing, on upload and in the SDK check', async (_label, entries) => {
    const archive = await tar([{ header: { name: 'fine.txt' }, data: 'fine' }, ...entries]);
    const before = await readdir(agent.root);
    expect(await codeOf(agent.files.upload('bad', archive))).toBe('INVALID_PARAMS');
    expect(await readdir(agent.root)).toEqual(before);
    await expect(checkArchive(archive)).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
  });

  it('refuses a payload that is not a tar archive', async () => {
    expect(await codeOf(agent.files.upload('bad', Buffer.from('not a tar archive at all'.repeat(40))))).toBe('INVALID_PARAMS');
  });
});
