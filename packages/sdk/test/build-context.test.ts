import { execFileSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, rm, symlink, truncate, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { readCheckedTar } from '@warren/protocol';
import { BuildContextTooLargeError, packBuildContext } from '../src/index.js';

let dir: string;
let outside: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'warren-context-'));
  outside = await mkdtemp(path.join(os.tmpdir(), 'warren-outside-'));
  await writeFile(path.join(outside, 'secret'), 'host secret');
  await writeFile(path.join(dir, 'Dockerfile'), 'FROM alpine\nCOPY . /app\n');
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
  await rm(outside, { recursive: true, force: true });
});

const names = (archive: Buffer) => readCheckedTar(archive).map(({ entry }) => `${entry.kind}:${entry.name}${entry.linkname ? `->${entry.linkname}` : ''}`);

describe('packBuildContext', () => {
  it('packs files, folders and inside links, in an archive the controller reads', async () => {
    await mkdir(path.join(dir, 'src'));
    await writeFile(path.join(dir, 'src', 'a.py'), 'print(1)');
    await symlink('a.py', path.join(dir, 'src', 'link.py'));
    await symlink('../Dockerfile', path.join(dir, 'src', 'up'));
    const packed = await packBuildContext(dir);
    expect(names(packed.archive)).toEqual(['file:Dockerfile', 'directory:src', 'file:src/a.py', 'symlink:src/link.py->a.py', 'symlink:src/up->../Dockerfile']);
    expect(packed).toMatchObject({ dockerfile: 'Dockerfile', files: 2 });
  });

  it.each([
    ['an absolute link', (d: string, o: string) => symlink(path.join(o, 'secret'), path.join(d, 'secret'))],
    ['a link up and out', (d: string) => symlink('../../etc/passwd', path.join(d, 'passwd'))],
    ['a link that steps down then out', (d: string) => mkdir(path.join(d, 'a')).then(() => symlink('../a/../../x', path.join(d, 'a', 'l')))],
    ['a link to the folder above', (d: string) => symlink('..', path.join(d, 'parent'))],
  ])('refuses %s, and never reads its target', async (_why, make) => {
    await make(dir, outside);
    await expect(packBuildContext(dir)).rejects.toMatchObject({ code: 'INVALID_PARAMS', message: expect.stringMatching(/points outside the context/) });
  });

  it('packs a folder link as a link (its content is not followed)', async () => {
    await mkdir(path.join(dir, 'real'));
    await writeFile(path.join(dir, 'real', 'x'), 'x');
    await symlink('real', path.join(dir, 'alias'));
    expect(names((await packBuildContext(dir)).archive)).toEqual(['file:Dockerfile', 'symlink:alias->real', 'directory:real', 'file:real/x']);
  });

  it('refuses a context larger than maxBytes before reading the large file', async () => {
    // A sparse file of 8 GiB: reading it would take long; the size check refuses it at once.
    await truncate(path.join(dir, 'Dockerfile'), 0);
    await writeFile(path.join(dir, 'Dockerfile'), 'FROM alpine');
    await writeFile(path.join(dir, 'huge'), '');
    await truncate(path.join(dir, 'huge'), 8 * 1024 * 1024 * 1024);
    const started = Date.now();
    await expect(packBuildContext(dir, { maxBytes: 1024 * 1024 })).rejects.toBeInstanceOf(BuildContextTooLargeError);
    expect(Date.now() - started).toBeLessThan(2000);
  });

  it('counts every file towards maxBytes', async () => {
    for (let i = 0; i < 5; i++) await writeFile(path.join(dir, `f${i}`), Buffer.alloc(300));
    await expect(packBuildContext(dir, { maxBytes: 1000 })).rejects.toMatchObject({ code: 'BUILD_CONTEXT_TOO_LARGE' });
    await expect(packBuildContext(dir, { maxBytes: 2000 })).resolves.toMatchObject({ files: 6 });
  });

  it('refuses a FIFO', async () => {
    execFileSync('mkfifo', [path.join(dir, 'pipe')]);
    await expect(packBuildContext(dir)).rejects.toMatchObject({ code: 'UNSUPPORTED_FILE_TYPE', message: expect.stringMatching(/a FIFO at 'pipe'/) });
  });

  it('refuses a socket', async () => {
    const server: Server = createServer();
    await new Promise<void>((resolve) => server.listen(path.join(dir, 'sock'), resolve));
    try {
      await expect(packBuildContext(dir)).rejects.toMatchObject({ code: 'UNSUPPORTED_FILE_TYPE', message: expect.stringMatching(/a socket at 'sock'/) });
    } finally {
      server.close();
    }
  });

  it('drops setuid and setgid bits', async () => {
    await writeFile(path.join(dir, 'tool'), '#!/bin/sh\n');
    await chmod(path.join(dir, 'tool'), 0o6755);
    const tool = readCheckedTar((await packBuildContext(dir)).archive).find((e) => e.entry.name === 'tool')!;
    expect(tool.entry.mode).toBe(0o755);
  });

  it.each(['../Dockerfile', '/etc/Dockerfile', 'a/../../Dockerfile', '.'])('refuses the Dockerfile %j outside the context', async (dockerfile) => {
    await expect(packBuildContext(dir, { dockerfile })).rejects.toMatchObject({
      code: 'INVALID_PARAMS',
      message: expect.stringMatching(/not inside the build context/),
    });
  });

  it('refuses a Dockerfile that is missing or a link', async () => {
    await expect(packBuildContext(dir, { dockerfile: 'other' })).rejects.toThrow(/has no regular file 'other'/);
    await symlink('Dockerfile', path.join(dir, 'Linked'));
    await expect(packBuildContext(dir, { dockerfile: 'Linked' })).rejects.toThrow(/has no regular file 'Linked'/);
  });

  it('takes a Dockerfile in a sub-folder', async () => {
    await mkdir(path.join(dir, 'docker'));
    await writeFile(path.join(dir, 'docker', 'Dockerfile'), 'FROM alpine');
    await expect(packBuildContext(dir, { dockerfile: 'docker//Dockerfile' })).resolves.toMatchObject({ dockerfile: 'docker/Dockerfile' });
  });

  it('refuses a context that is not a folder', async () => {
    await expect(packBuildContext(path.join(dir, 'Dockerfile'))).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
    await expect(packBuildContext(path.join(dir, 'missing'))).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
  });
});
