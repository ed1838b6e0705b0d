import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import type { MethodName, ParamsIn } from '@warren/protocol';
import { WarrenError } from '@warren/sdk';
import { startTestAgent, type TestAgent } from '../../support/fixtures.js';
import { tar } from '../../support/files.js';

/**
 * The daemon runs as root: with a policy root of `/` the file API must still never reach the
 * kernel's pseudo-file systems or the daemon's own folders, by any method, by any spelling of the
 * path, or through a symbolic link. (Bind mounts are in files-reserved-mounts.test.ts beside it.)
 */
describe('reserved places are out of reach whatever the policy root', () => {
  let agent: TestAgent;
  let scratch: string;
  let archive: Buffer;
  const shmFile = `/dev/shm/warren-reserved-${process.pid}`;
  const call = async <M extends MethodName>(method: M, params: ParamsIn<M>, payload?: Buffer): Promise<string> => {
    try {
      await agent.connection.call(method, params, payload ? { payload } : {});
      return 'OK';
    } catch (err) {
      if (err instanceof WarrenError) return err.code;
      throw err;
    }
  };

  beforeAll(async () => {
    agent = await startTestAgent({ root: '/' });
    scratch = await mkdtemp(path.join(os.tmpdir(), 'warren-reserved-'));
    await writeFile(path.join(scratch, 'plain.txt'), 'plain');
    await mkdir(path.join(scratch, 'links'));
    await symlink('/proc/self/environ', path.join(scratch, 'links/environ'));
    await symlink('/proc/1', path.join(scratch, 'links/pid1'));
    await symlink('/dev/shm', path.join(scratch, 'links/shm'));
    await symlink('/sys/kernel', path.join(scratch, 'links/kernel'));
    await symlink('../../../../../../proc/self', path.join(scratch, 'links/relative-self'));
    await symlink('/proc', path.join(scratch, 'links/proc'));
    archive = await tar([{ header: { name: 'x.txt' }, data: 'x' }]);
    await writeFile(shmFile, 'shared memory');
  });
  afterAll(async () => {
    await rm(shmFile, { force: true });
    await rm(scratch, { recursive: true, force: true });
    await agent[Symbol.asyncDispose]();
  });

  // Every method that takes a path, with the path in each role it can play. Writes are marked:
  // they are only ever aimed at places where a missed refusal would do no harm to this machine.
  const methods: [string, 'read' | 'write', (p: string) => Promise<string>][] = [
    ['fs.read', 'read', (p) => call('fs.read', { path: p })],
    ['fs.read range', 'read', (p) => call('fs.read', { path: p, range: { unit: 'bytes', offset: 0, length: 16 } })],
    ['fs.readAnchored', 'read', (p) => call('fs.readAnchored', { path: p })],
    ['fs.stat', 'read', (p) => call('fs.stat', { path: p })],
    ['fs.list', 'read', (p) => call('fs.list', { path: p })],
    ['fs.list recursive', 'read', (p) => call('fs.list', { path: p, recursive: true, maxDepth: 2 })],
    ['fs.glob', 'read', (p) => call('fs.glob', { path: p, pattern: '*' })],
    ['fs.download', 'read', (p) => call('fs.download', { path: p })],
    ['fs.copy from', 'read', (p) => call('fs.copy', { from: p, to: path.join(scratch, `copy-${Math.random()}`) })],
    ['fs.write', 'write', (p) => call('fs.write', { path: p }, Buffer.from('x'))],
    ['fs.write append', 'write', (p) => call('fs.write', { path: p, append: true }, Buffer.from('x'))],
    ['fs.edit', 'write', (p) => call('fs.edit', { path: p, oldText: 'a', newText: 'b' })],
    ['fs.mkdir', 'write', (p) => call('fs.mkdir', { path: `${p}/warren-test-dir` })],
    ['fs.delete', 'write', (p) => call('fs.delete', { path: p })],
    ['fs.copy to', 'write', (p) => call('fs.copy', { from: path.join(scratch, 'plain.txt'), to: `${p}/warren-copy`, overwrite: true })],
    ['fs.move from', 'write', (p) => call('fs.move', { from: p, to: path.join(scratch, `move-${Math.random()}`) })],
    ['fs.move to', 'write', (p) => call('fs.move', { from: path.join(scratch, 'plain.txt'), to: `${p}/warren-move`, overwrite: true })],
    ['fs.upload', 'write', (p) => call('fs.upload', { path: p, overwrite: true }, archive)],
  ];

  const readPlaces = ['/proc/1/mem', '/proc/sys/kernel/hostname', '/dev/null', '/proc/self/status'];
  const places = () => [
    '/proc/self/environ',
    '/proc/self/comm',
    '/proc/self',
    '/proc',
    '/sys',
    '/sys/kernel',
    '/dev',
    '/dev/shm',
    shmFile,
    '/run/warren',
    '/run/warren/agent.sock',
    '/opt/warren',
    '/opt/warren/warren-agent.mjs',
  ];

  it.each(methods)('%s refuses every reserved place with PATH_NOT_IN_SANDBOX', async (_label, kind, run) => {
    for (const place of kind === 'read' ? [...places(), ...readPlaces] : places()) {
      expect([place, await run(place)]).toEqual([place, 'PATH_NOT_IN_SANDBOX']);
    }
  });

  it.each(methods)('%s refuses symbolic links that lead there', async (label, _kind, run) => {
    // delete and move-from act on a link itself (it is in the scratch folder): only paths through one.
    const itself = label === 'fs.delete' || label === 'fs.move from';
    for (const link of itself
      ? ['proc/self/status', 'pid1/environ', 'shm/x', 'relative-self/status']
      : ['environ', 'pid1', 'shm', 'kernel', 'relative-self', 'proc/self/status', 'pid1/environ', 'shm/x']) {
      expect([link, await run(path.join(scratch, 'links', link))]).toEqual([link, 'PATH_NOT_IN_SANDBOX']);
    }
  });

  it('says why, and what the policy allows', async () => {
    const err = await agent.files.read('/proc/self/environ').catch((e: unknown) => e as WarrenError);
    expect((err as WarrenError).message).toMatch(
      /'\/proc\/self\/environ' is outside the sandbox \(it is in \/proc; no file call reaches \/proc, \/sys, \/dev, \/run\/warren, \/opt\/warren or the kernel's pseudo-file systems, whatever the policy\)\. Readable: \//,
    );
  });

  it('any spelling of a reserved path is refused (property)', async () => {
    // No magic links among the segments (root, cwd, fd/N): they lead back to ordinary places.
    const segment = fc.constantFrom('.', '', 'self', '1', 'environ', 'status', '..', 'shm', 'kernel', 'warren', 'x');
    const base = fc.constantFrom(
      '/proc',
      '/sys',
      '/dev',
      '/dev/shm',
      '/run/warren',
      '/opt/warren',
      '/tmp/../proc',
      '//proc',
      '/./dev',
      `${path.dirname(shmFile)}/./`,
    );
    await fc.assert(
      fc.asyncProperty(base, fc.array(segment, { maxLength: 4 }), fc.constantFrom(...methods.map(([, , run]) => run)), async (b, rest, run) => {
        const p = [b, ...rest].join('/');
        const normal = path.posix.resolve(p);
        // Only paths that still land in a reserved folder after the text is normalised.
        fc.pre(['/proc', '/sys', '/dev', '/run/warren', '/opt/warren'].some((r) => normal === r || normal.startsWith(`${r}/`)));
        const code = await run(p);
        return code === 'PATH_NOT_IN_SANDBOX';
      }),
      { numRuns: 300 },
    );
  });

  it('walks leave reserved places out: listing, globbing, downloading and copying the root', async () => {
    const top = await agent.files.list('/');
    const names = top.entries.map((e) => e.path);
    expect(names).toEqual(expect.arrayContaining(['etc', 'tmp']));
    for (const hidden of ['proc', 'sys', 'dev']) expect(names).not.toContain(hidden);
    const found = await agent.files.glob('/', '{proc,sys,dev}/*', { includeDirectories: true });
    expect(found).toEqual([]);
    // A folder holding links into /proc: links are listed as links, never entered or read through.
    const listed = await agent.files.list(path.join(scratch, 'links'), { recursive: true });
    expect(listed.entries.every((e) => e.type === 'symlink')).toBe(true);
    const down = await agent.files.download(path.join(scratch, 'links'));
    expect(down.entries).toEqual([]);
  });

  it('ordinary paths under the same root still work', async () => {
    await agent.files.write(path.join(scratch, 'ok.txt'), 'ok');
    expect(await agent.files.read(path.join(scratch, 'ok.txt'))).toBe('ok');
    expect(
      await agent.files.read('/etc/hostname').then(
        () => 'OK',
        (e: WarrenError) => e.code,
      ),
    ).not.toBe('PATH_NOT_IN_SANDBOX');
    expect(await readdir(scratch)).toContain('ok.txt');
  });

  it('the fixture runs where the attack would work: the daemon can read its own environment', () => {
    // Without the refusal, fs.read of /proc/self/environ would hand out this process's environment.
    expect(execFileSync('cat', ['/proc/self/environ']).length).toBeGreaterThan(0);
  });
});
