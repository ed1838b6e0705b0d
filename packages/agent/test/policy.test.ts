import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { CodedError, type FilePolicy } from '@warren/protocol';
import { mapFsError } from '../src/fs-error.js';
import { resolvePath } from '../src/policy.js';

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return 'OK';
  } catch (err) {
    if (err instanceof CodedError) return err.code;
    throw err;
  }
}

describe('resolvePath on a real folder tree', () => {
  let dir: string;
  let root: string;
  let policy: FilePolicy;

  beforeAll(async () => {
    dir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'warren-policy-')));
    root = path.join(dir, 'workspace');
    await mkdir(path.join(root, 'src/deep'), { recursive: true });
    await mkdir(path.join(dir, 'workspace2'));
    await writeFile(path.join(root, 'src/a.py'), 'print(1)\n');
    await writeFile(path.join(dir, 'secret.txt'), 'secret');
    await writeFile(path.join(dir, 'workspace2/x.txt'), 'sibling');
    await symlink('../secret.txt', path.join(root, 'leak'));
    await symlink(path.join(dir, 'secret.txt'), path.join(root, 'leak-abs'));
    await symlink('..', path.join(root, 'up'));
    await symlink('src', path.join(root, 'inside'));
    await symlink(path.join(root, 'src/a.py'), path.join(root, 'inside-abs'));
    await symlink('../nowhere/x', path.join(root, 'dangling-out'));
    await symlink('src/missing.txt', path.join(root, 'dangling-in'));
    await symlink('loop-b', path.join(root, 'loop-a'));
    await symlink('loop-a', path.join(root, 'loop-b'));
    await symlink('deep/../../../secret.txt', path.join(root, 'src/tricky'));
    await symlink('/proc/self/root/etc/passwd', path.join(root, 'proc-link'));
    policy = { root, readOnly: false };
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('resolves relative and absolute names inside the root', async () => {
    expect((await resolvePath(policy, 'src/a.py', 'read')).absolute).toBe(path.join(root, 'src/a.py'));
    expect((await resolvePath(policy, `${root}/src/./deep/../a.py`, 'read')).display).toBe('src/a.py');
    expect((await resolvePath(policy, '.', 'read')).isMountRoot).toBe(true);
  });

  it.each([
    ['../secret.txt'],
    ['src/../../secret.txt'],
    ['/etc/passwd'],
    ['//etc/passwd'],
    ['ROOT2/x.txt'],
    ['ROOT/../workspace2/x.txt'],
    ['a\0b'],
    ['ROOT_LOOKALIKE/a.py'],
    ['/proc/self/root/etc/passwd'],
  ])('refuses %j lexically with PATH_NOT_IN_SANDBOX', async (template) => {
    const input = template.replace('ROOT_LOOKALIKE', root.replace('workspace', 'w\u043erkspace')).replace('ROOT', root);
    expect(await codeOf(resolvePath(policy, input, 'read'))).toBe('PATH_NOT_IN_SANDBOX');
  });

  it.each([['leak'], ['leak-abs'], ['up/secret.txt'], ['dangling-out'], ['src/tricky'], ['proc-link']])(
    'refuses the symlink %j that leaves the root',
    async (input) => {
      expect(await codeOf(resolvePath(policy, input, 'read'))).toBe('PATH_NOT_IN_SANDBOX');
      expect(await codeOf(resolvePath(policy, input, 'write'))).toBe('PATH_NOT_IN_SANDBOX');
    },
  );

  it('follows symlinks that stay inside, and resolves a dangling inside link to its target', async () => {
    expect((await resolvePath(policy, 'inside/a.py', 'read')).absolute).toBe(path.join(root, 'src/a.py'));
    expect((await resolvePath(policy, 'inside-abs', 'read')).absolute).toBe(path.join(root, 'src/a.py'));
    const dangling = await resolvePath(policy, 'dangling-in', 'write');
    expect(dangling.absolute).toBe(path.join(root, 'src/missing.txt'));
    expect(dangling.stat).toBeUndefined();
  });

  it('acts on the link itself when followLast is false', async () => {
    const link = await resolvePath(policy, 'leak', 'write', { followLast: false });
    expect(link.absolute).toBe(path.join(root, 'leak'));
    expect(link.stat?.isSymbolicLink()).toBe(true);
  });

  it('reports a symlink loop as SYMLINK_LOOP', async () => {
    expect(await codeOf(resolvePath(policy, 'loop-a', 'read'))).toBe('SYMLINK_LOOP');
  });

  it('refuses writes under a read-only root and names what is readable', async () => {
    const err = await resolvePath({ root, readOnly: true }, 'src/a.py', 'write').catch((e: unknown) => e as CodedError);
    expect(err).toBeInstanceOf(CodedError);
    expect((err as CodedError).code).toBe('PATH_NOT_WRITABLE');
    expect((err as CodedError).message).toContain(`Readable: ${root}`);
  });

  it('applies derive() allow-lists to where the links lead, not only to the name', async () => {
    await mkdir(path.join(root, 'pub'), { recursive: true });
    await symlink('../src/a.py', path.join(root, 'pub/to-src')).catch(() => undefined);
    const narrowed: FilePolicy = { root, readOnly: false, restrict: { read: [`${root}/pub`], write: [] } };
    expect(await codeOf(resolvePath(narrowed, 'pub/to-src', 'read'))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(resolvePath(narrowed, 'src/a.py', 'read'))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(resolvePath(narrowed, 'pub', 'read'))).toBe('OK');
    expect(await codeOf(resolvePath(narrowed, 'pub/new.txt', 'write'))).toBe('PATH_NOT_WRITABLE');
  });

  it('maps named paths to their folders by the longest whole-segment name', async () => {
    const named: FilePolicy = {
      paths: {
        code: { root: path.join(root, 'src'), mode: 'ro', writeApproval: false, readApproval: false },
        'code/deep': { root: path.join(root, 'src/deep'), mode: 'rw', writeApproval: false, readApproval: false },
      },
    };
    expect((await resolvePath(named, '/code/a.py', 'read')).absolute).toBe(path.join(root, 'src/a.py'));
    expect((await resolvePath(named, 'code/deep/n.txt', 'write')).display).toBe('/code/deep/n.txt');
    expect(await codeOf(resolvePath(named, '/code/n.txt', 'write'))).toBe('PATH_NOT_WRITABLE');
    expect(await codeOf(resolvePath(named, '/codex/a.py', 'read'))).toBe('PATH_NOT_IN_SANDBOX');
    // The in-container name works too when its first segment is not a path name.
    expect((await resolvePath(named, path.join(root, 'src/a.py'), 'read')).display).toBe('/code/a.py');
    // Writing into the nested rw mount through the ro parent's name takes the stricter rules.
    expect(await codeOf(resolvePath(named, '/code/deep/../a.py', 'write'))).toBe('PATH_NOT_WRITABLE');
  });
});

describe('mapFsError', () => {
  it('answers a full disk (ENOSPC) and a reached quota (EDQUOT) with the same typed disk-full error', () => {
    const [full, quota] = (['ENOSPC', 'EDQUOT'] as const).map(
      (code) => mapFsError(Object.assign(new Error(code), { code }), '/workspace/out.bin') as CodedError,
    );
    expect(full).toBeInstanceOf(CodedError);
    expect(full!.code).toBe('RESOURCE_EXHAUSTED');
    expect(full!.details).toEqual({ path: '/workspace/out.bin', reason: 'disk-full' });
    expect(full!.message).toMatch(/disk is full.*diskMb/);
    expect(quota!.toWire()).toEqual(full!.toWire());
  });
});
