import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox, WarrenError } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';
import { codeOf, tar } from '../support/files.js';

/**
 * Hostile paths against a real container. Every case asserts the typed error AND that the
 * sentinels outside the sandbox root (/home/warren and /tmp, both writable by the sandbox user,
 * so only the file policy stands between the file API and them) are byte-identical afterwards.
 */
const SENTINELS = ['/home/warren/sentinel.txt', '/tmp/sentinel.txt'];
const SENTINEL_TEXT = 'SENTINEL-do-not-touch\n';

describe('hostile paths in a real sandbox', () => {
  let warren: TestController;
  let sandbox: Sandbox;
  const sh = async (script: string) => {
    const run = await sandbox.commands.run(['sh', '-c', script], { timeoutMs: 60_000 });
    if (run.exitCode !== 0) throw new Error(`setup failed (${run.exitCode}): ${run.stderr}`);
    return run.stdout;
  };
  // The sentinels' bytes, and every name in /home/warren (nothing may appear there either).
  const snapshot = () => sh(`for f in ${SENTINELS.join(' ')}; do cat "$f"; done; ls -A /home/warren; ls -A /tmp | grep -c warren- || true`);
  let baseline = '';
  const expectSentinelsIntact = async () => {
    expect(await snapshot()).toBe(baseline);
  };

  beforeAll(async () => {
    warren = await startTestController();
    // A writable root file system, so sandbox code can plant sentinels outside the workspace
    // (in the image's home folder) for the file API to try to reach.
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, readOnlyRootfs: false });
    await sh(`printf '${SENTINEL_TEXT.replace('\n', '\\n')}' | tee ${SENTINELS.join(' ')} >/dev/null; mkdir -p /workspace/w`);
    baseline = await snapshot();
    expect(baseline.startsWith(SENTINEL_TEXT.repeat(SENTINELS.length))).toBe(true);
  }, 60_000);
  afterAll(async () => {
    await sandbox?.kill().catch(() => undefined);
    await warren?.[Symbol.asyncDispose]();
  });

  it.each([
    '../home/warren/sentinel.txt',
    '/workspace/../home/warren/sentinel.txt',
    'w/../../home/warren/sentinel.txt',
    '..//..//home/warren/sentinel.txt',
    '/workspace/./../tmp/sentinel.txt',
    './../../tmp/sentinel.txt',
    '/home/warren/sentinel.txt',
    '//tmp/sentinel.txt',
    '/proc/self/root/tmp/sentinel.txt',
    '/proc/self/cwd/../tmp/sentinel.txt',
    '/workspace2/x',
    '/workspaces/x',
    '/w\u043erkspace/sentinel.txt',
  ])('traversal, foreign and sibling-prefix path %j: PATH_NOT_IN_SANDBOX for read, write, delete and move', async (input) => {
    expect(await codeOf(sandbox.files.read(input))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(sandbox.files.write(input, 'pwned'))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(sandbox.files.delete(input))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(sandbox.files.move(input, 'w/stolen'))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(sandbox.files.copy(input, 'w/stolen'))).toBe('PATH_NOT_IN_SANDBOX');
    await expectSentinelsIntact();
  });

  it('NUL bytes are refused before anything is sent, and encoded or look-alike traversal stays a plain name inside', async () => {
    expect(await codeOf(sandbox.files.read('w/a\0/../../../tmp/sentinel.txt'))).toBe('INVALID_PARAMS');
    for (const name of [
      '%2e%2e/%2e%2e/tmp/sentinel.txt',
      '..\\..\\tmp\\sentinel.txt',
      '\uff0e\uff0e/\uff0e\uff0e/tmp/sentinel.txt',
      'w/\u2025/sentinel.txt',
      'w\u2215..\u2215..\u2215tmp',
    ]) {
      expect(await codeOf(sandbox.files.read(name))).toBe('NOT_FOUND');
      await sandbox.files.write(name, 'inside');
      expect(await sandbox.files.read(name)).toBe('inside');
    }
    await expectSentinelsIntact();
  });

  it('symlinks that leave, as the target, as an ancestor, dangling, and through /proc, are refused', async () => {
    await sh(
      `cd /workspace/w && ln -s /home/warren/sentinel.txt target && ln -s /tmp anc && ln -s /tmp/newfile-from-api dangling && ln -s ../../tmp/sentinel.txt rel && ln -s /proc/self/root proc && ln -s /proc/self/cwd/.. cwdup`,
    );
    for (const input of ['w/target', 'w/anc/sentinel.txt', 'w/dangling', 'w/rel', 'w/proc/tmp/sentinel.txt', 'w/cwdup/tmp/sentinel.txt']) {
      expect([input, await codeOf(sandbox.files.read(input))]).toEqual([input, 'PATH_NOT_IN_SANDBOX']);
      expect([input, await codeOf(sandbox.files.write(input, 'pwned'))]).toEqual([input, 'PATH_NOT_IN_SANDBOX']);
      expect([input, await codeOf(sandbox.files.edit(input, 'SENTINEL', 'pwned'))]).toEqual([input, 'PATH_NOT_IN_SANDBOX']);
      expect([input, await codeOf(sandbox.files.copy(input, 'w/stolen'))]).toEqual([input, 'PATH_NOT_IN_SANDBOX']);
    }
    expect(await codeOf(sandbox.files.copy('w', 'w/anc/copied'))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(sandbox.files.move('w/rel', 'w/anc/moved'))).toBe('PATH_NOT_IN_SANDBOX');
    // A destination that is a link is replaced, never written through.
    await sandbox.files.write('w/plain.txt', 'plain');
    await sandbox.files.copy('w/plain.txt', 'w/dangling', { overwrite: true });
    expect((await sandbox.files.stat('w/dangling', { followLinks: false })).type).toBe('file');
    // The link itself may be removed (unlink never follows it); what it pointed at stays.
    await sandbox.files.delete('w/target');
    expect(await codeOf(sandbox.files.list('w/anc'))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(sandbox.files.glob('w/anc', '*'))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(sandbox.files.download('w/anc'))).toBe('PATH_NOT_IN_SANDBOX');
    const down = await sandbox.files.download('w');
    expect(down.skipped.map((s) => s.path).sort()).toEqual(['anc', 'cwdup', 'proc', 'rel']);
    await expectSentinelsIntact();
    expect(await sh('test -e /tmp/newfile-from-api && echo made || echo absent')).toBe('absent\n');
  });

  it('a symlink swapped in during the calls, for the file or for a folder above it, never lets a call reach outside', async () => {
    await sh(`mkdir -p /workspace/swap/dir && echo inside > /workspace/swap/file && echo inside > /workspace/swap/dir/sentinel.txt`);
    const swapper = sandbox.commands.run(
      [
        'sh',
        '-c',
        `cd /workspace/swap; i=0; while [ $i -lt 1000 ]; do
           ln -sfn /home/warren/sentinel.txt file.l && mv -fT file.l file; echo inside > file.t && mv -fT file.t file;
           mv -T dir dir.real && ln -sfn /home/warren dir; rm dir && mv -T dir.real dir; i=$((i+1)); done`,
      ],
      { timeoutMs: 120_000 },
    );
    const seen = new Set<string>();
    let done = false;
    void swapper.finally(() => (done = true));
    while (!done) {
      const results = await Promise.all([
        sandbox.files.read('swap/file').then(
          (c) => `read:${c}`,
          (e: WarrenError) => `read:${e.code}`,
        ),
        sandbox.files.read('swap/dir/sentinel.txt').then(
          (c) => `read:${c}`,
          (e: WarrenError) => `read:${e.code}`,
        ),
        sandbox.files.write('swap/dir/sentinel.txt', 'inside\n').then(
          () => 'write:ok',
          (e: WarrenError) => `write:${e.code}`,
        ),
        sandbox.files.write('swap/file', 'inside\n').then(
          () => 'write:ok',
          (e: WarrenError) => `write:${e.code}`,
        ),
      ]);
      for (const r of results) seen.add(r);
    }
    expect((await swapper).exitCode).toBe(0);
    for (const r of seen) expect(r).not.toContain('SENTINEL');
    expect([...seen].some((r) => r === 'read:inside\n')).toBe(true);
    await expectSentinelsIntact();
  }, 150_000);

  it('FIFOs and devices are never opened in a way that blocks', async () => {
    await sh('mkfifo /workspace/w/fifo && ln -s /dev/zero /workspace/w/zero');
    expect(await codeOf(sandbox.files.read('w/fifo', { timeoutMs: 10_000 }))).toBe('UNSUPPORTED_FILE_TYPE');
    expect(await codeOf(sandbox.files.readChars('w/fifo', { offset: 0 }))).toBe('UNSUPPORTED_FILE_TYPE');
    expect(await codeOf(sandbox.files.write('w/fifo', 'x'))).toBe('UNSUPPORTED_FILE_TYPE');
    expect(await codeOf(sandbox.files.read('w/zero'))).toBe('PATH_NOT_IN_SANDBOX');
    expect(await codeOf(sandbox.files.read('/dev/zero'))).toBe('PATH_NOT_IN_SANDBOX');
    expect((await sandbox.files.stat('w/fifo')).type).toBe('other');
    const copied = await sandbox.files.copy('w', 'w-copy');
    expect(copied.skipped.map((s) => s.path)).toContain('fifo');
    await expectSentinelsIntact();
  });

  it('hard links: one to a file outside the workspace volume cannot exist, and writes inside replace the name only', async () => {
    // /workspace is its own volume: the kernel refuses a hard link across it.
    const cross = await sandbox.commands.run(['ln', '/home/warren/sentinel.txt', '/workspace/w/hard']);
    expect(cross.exitCode).not.toBe(0);
    await sh('echo original > /workspace/keep.txt && ln /workspace/keep.txt /workspace/w/hard2');
    await sandbox.files.write('w/hard2', 'changed\n');
    await sandbox.files.edit('w/hard2', 'changed', 'edited');
    expect(await sandbox.files.read('keep.txt')).toBe('original\n');
    // A narrowed handle does not read a hard link whose other name lies outside its paths.
    const { token } = await sandbox.deriveToken({ allowRead: ['/workspace/w'] });
    const narrow = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token });
    try {
      await sh('ln /workspace/keep.txt /workspace/w/hard3');
      expect(await codeOf(narrow.files.read('w/hard3'))).toBe('PATH_NOT_IN_SANDBOX');
      expect(await codeOf(narrow.files.read('keep.txt'))).toBe('PATH_NOT_IN_SANDBOX');
      // The controller may refuse a write method for a read-only grant itself (FORBIDDEN) before the agent does.
      expect(['PATH_NOT_WRITABLE', 'FORBIDDEN']).toContain(await codeOf(narrow.files.write('w/x.txt', 'x')));
      expect(await codeOf(narrow.commands.run('cat /workspace/keep.txt'))).toBe('FORBIDDEN');
    } finally {
      narrow.close();
    }
    await expectSentinelsIntact();
  });

  it('symlink loops end in SYMLINK_LOOP, and listings and globs never follow them', async () => {
    await sh(
      'mkdir -p /workspace/loops && cd /workspace/loops && ln -s self self && ln -s b a && ln -s a b && ln -s . dot && i=0; while [ $i -lt 45 ]; do ln -s c$((i+1)) c$i; i=$((i+1)); done; echo end > c45',
    );
    for (const input of ['loops/self', 'loops/a', 'loops/c0']) expect(await codeOf(sandbox.files.read(input))).toBe('SYMLINK_LOOP');
    expect(await sandbox.files.read('loops/c10')).toBe('end\n');
    expect((await sandbox.files.list('loops', { recursive: true })).entries.length).toBe(50);
    expect(await sandbox.files.glob('loops', '**/*', { maxResults: 1000 })).toHaveLength(50);
    expect(await codeOf(sandbox.files.read('loops/dot/dot/dot/self'))).toBe('SYMLINK_LOOP');
    await expectSentinelsIntact();
  });

  it('a huge folder is listed and globbed within caps, quickly reporting truncated', async () => {
    await sh(`mkdir -p /workspace/huge && cd /workspace/huge && python3 -c "
import os
for i in range(30000): open(f'f{i:05d}.txt', 'w').close()
os.makedirs('d/' * 60 + 'deep', exist_ok=True)"`);
    const listed = await sandbox.files.list('huge', { limit: 100 });
    expect(listed).toMatchObject({ truncated: true });
    expect(listed.entries).toHaveLength(100);
    const globbed = await sandbox.files.globDetailed('huge', '**/*.txt', { maxResults: 50 });
    expect(globbed).toMatchObject({ truncated: true });
    expect(globbed.matches).toHaveLength(50);
    expect((await sandbox.files.list('huge/d', { recursive: true, maxDepth: 5 })).truncated).toBe(true);
    await sandbox.files.delete('huge', { recursive: true });
    expect(await sandbox.files.exists('huge')).toBe(false);
  }, 120_000);

  it.each([
    ['.. names', [{ header: { name: '../../tmp/sentinel.txt' }, data: 'pwned' }]],
    ['absolute names', [{ header: { name: '/tmp/sentinel.txt' }, data: 'pwned' }]],
    ['links that leave', [{ header: { name: 'l', type: 'symlink' as const, linkname: '/tmp' } }, { header: { name: 'l/sentinel.txt' }, data: 'pwned' }]],
    ['relative links that leave', [{ header: { name: 'l', type: 'symlink' as const, linkname: '../../../tmp/sentinel.txt' } }]],
    ['hard links', [{ header: { name: 'h', type: 'link' as const, linkname: '/tmp/sentinel.txt' } }]],
    ['devices', [{ header: { name: 'dev', type: 'block-device' as const, devmajor: 8, devminor: 0 } }]],
    ['setuid bits', [{ header: { name: 'suid', mode: 0o4755 }, data: '#!/bin/sh\n' }]],
  ])('a tar upload with %s is refused whole: nothing is written', async (_label, entries) => {
    const archive = await tar([{ header: { name: 'first.txt' }, data: 'first' }, ...entries]);
    expect(await codeOf(sandbox.files.upload('tarred', archive))).toBe('INVALID_PARAMS');
    expect(await sandbox.files.exists('tarred')).toBe(false);
    await expectSentinelsIntact();
  });

  it('an archive deeper than the depth cap is refused whole', async () => {
    const many = await tar(Array.from({ length: 2000 }, (_, i) => ({ header: { name: `d/${'x/'.repeat(70)}${i}` }, data: '' })));
    expect(await codeOf(sandbox.files.upload('bomb', many))).toBe('INVALID_PARAMS');
    expect(await sandbox.files.exists('bomb')).toBe(false);
    await expectSentinelsIntact();
  });
});
