import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { lstat, mkdir, mkdtemp, readFile, readdir, readlink, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { checkArchive, extractArchive } from '@warren/sdk';
import { startTestAgent, type TestAgent } from '../support/fixtures.js';
import { execFileSync } from 'node:child_process';
import { codeOf, tar } from '../support/files.js';
import { archive, END, file, longName, pax, record } from '../support/tar-bytes.js';

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
    [
      'a symlink with a late ..',
      [{ header: { name: 'dot', type: 'symlink' as const, linkname: '.' } }, { header: { name: 'l', type: 'symlink' as const, linkname: 'dot/..' } }],
    ],
    ['a write below a symlink', [{ header: { name: 'l', type: 'symlink' as const, linkname: 'sub' } }, { header: { name: 'l/x' }, data: 'x' }]],
    ['a hard link', [{ header: { name: 'h', type: 'link' as const, linkname: 'other' } }]],
    ['a character device', [{ header: { name: 'dev', type: 'character-device' as const, devmajor: 1, devminor: 3 } }]],
    ['a FIFO', [{ header: { name: 'fifo', type: 'fifo' as const } }]],
    ['a setuid file', [{ header: { name: 'suid', mode: 0o4755 }, data: 'x' }]],
    [
      'a duplicate name',
      [
        { header: { name: 'd' }, data: 'x' },
        { header: { name: 'd' }, data: 'y' },
      ],
    ],
  ])('refuses an archive with %s, writing nothing, on upload and in the SDK check', async (_label, entries) => {
    const archive = await tar([{ header: { name: 'fine.txt' }, data: 'fine' }, ...entries]);
    const before = await readdir(agent.root);
    expect(await codeOf(agent.files.upload('bad', archive))).toBe('INVALID_PARAMS');
    expect(await readdir(agent.root)).toEqual(before);
    await expect(checkArchive(archive)).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
  });

  it.each([
    ['a PAX path with ..', archive(file('fine.txt', 'fine'), pax(record('path', '../../escaped.txt')), file('x', 'evil'))],
    ['an absolute PAX path', archive(file('fine.txt', 'fine'), pax(record('path', '/tmp/escaped.txt')), file('x', 'evil'))],
    ['a PAX path with a NUL', archive(file('fine.txt', 'fine'), pax(record('path', 'ok\0/../../x')), file('x', 'evil'))],
    ['a PAX size that disagrees with the data', archive(file('fine.txt', 'fine'), pax(record('size', '0')), file('x', 'evil'), file('y', 'y'))],
    ['a non-numeric PAX size', archive(file('fine.txt', 'fine'), pax(record('size', 'lots')), file('x', 'evil'))],
    ['a bad PAX length record', archive(file('fine.txt', 'fine'), pax(Buffer.from('5 path=evil\n')), file('x', 'evil'))],
    ['duplicate PAX records', archive(file('fine.txt', 'fine'), pax(Buffer.concat([record('path', 'a'), record('path', 'b')])), file('x', 'evil'))],
    ['an absolute GNU long name', archive(file('fine.txt', 'fine'), longName(Buffer.from('/tmp/escaped.txt\0')), file('x', 'evil'))],
    ['a GNU long name with a NUL inside', archive(file('fine.txt', 'fine'), longName(Buffer.from('ok\0../../x\0')), file('x', 'evil'))],
    [
      'a GNU long link that leaves',
      archive(file('fine.txt', 'fine'), longName(Buffer.from('../../../etc\0'), 'K'), file('l', '', { flag: '2', linkname: 'ok' })),
    ],
    ['a PAX header with no entry', archive(file('fine.txt', 'fine'), pax(record('path', 'dangling')))],
    ['an entry hidden after the end blocks', Buffer.concat([file('fine.txt', 'fine'), END, file('hidden.txt', 'hidden'), END])],
  ])('refuses an archive with %s (written byte by byte), on upload and download, writing nothing', async (_label, bytes) => {
    const before = await readdir(agent.root);
    const err = await agent.files.upload('hostile', bytes).catch((e: unknown) => e as { code: string; message: string });
    expect(err).toMatchObject({ code: 'INVALID_PARAMS', message: expect.stringMatching(/is refused: .*Nothing was written\. Allowed: /) });
    expect(await readdir(agent.root)).toEqual(before);
    await expect(checkArchive(bytes)).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
    const local = await mkdtemp(path.join(os.tmpdir(), 'warren-hostile-'));
    try {
      await expect(extractArchive(bytes, path.join(local, 'out'))).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
      expect(await readdir(local)).toEqual([]);
    } finally {
      await rm(local, { recursive: true, force: true });
    }
  });

  it.each(['gnu', 'pax', 'ustar'])('uploads an archive GNU tar wrote in %s format, long and non-ASCII names included', async (format) => {
    const local = await mkdtemp(path.join(os.tmpdir(), 'warren-gnutar-'));
    try {
      const deep = format === 'ustar' ? 'd'.repeat(90) : 'd'.repeat(120);
      const name = format === 'ustar' ? 'plain.txt' : `${'n'.repeat(110)}-ünï.txt`;
      await mkdir(path.join(local, 'src', deep), { recursive: true });
      await writeFile(path.join(local, 'src', deep, name), 'long\n');
      await symlink(`${deep}/${name}`, path.join(local, 'src', 'link'));
      const bytes = execFileSync('tar', [`--format=${format}`, '-C', path.join(local, 'src'), '-cf', '-', '.']);
      expect(await agent.files.upload(`gnutar-${format}`, bytes)).toMatchObject({ files: 1, symlinks: 1 });
      expect(await readFile(path.join(agent.root, `gnutar-${format}`, deep, name), 'utf8')).toBe('long\n');
      expect(await readlink(path.join(agent.root, `gnutar-${format}`, 'link'))).toBe(`${deep}/${name}`);
    } finally {
      await rm(local, { recursive: true, force: true });
    }
  });

  it('refuses a payload that is not a tar archive', async () => {
    expect(await codeOf(agent.files.upload('bad', Buffer.from('not a tar archive at all'.repeat(40))))).toBe('INVALID_PARAMS');
  });
});
