import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { lineAnchor } from '@warren/protocol/node';
import { Sandbox, WRITE_PIECE_BYTES } from '@warren/sdk';
import { startTestSandbox, type TestController } from '../support/fixtures.js';
import { codeOf } from '../support/files.js';

describe('every file operation through the controller, in a real container', () => {
  let warren: TestController;
  let sandbox: Sandbox;
  beforeAll(async () => ({ warren, sandbox } = await startTestSandbox()), 60_000);
  afterAll(async () => warren?.[Symbol.asyncDispose]());

  it('writes and reads in every mode, as the sandbox user sees them', async () => {
    const text = 'alpha\nβeta\ngamma 😀\n';
    const written = await sandbox.files.write('/workspace/ops/t.txt', text, { mode: 0o640, hash: true });
    expect(written).toMatchObject({ created: true, bytesWritten: Buffer.byteLength(text) });
    expect((await sandbox.commands.run('stat -c %a:%U /workspace/ops/t.txt')).stdout).toBe('640:warren\n');
    expect(await sandbox.files.read('ops/t.txt')).toBe(text);
    expect(await sandbox.files.readLines('ops/t.txt', { startLine: 2, lineCount: 5 })).toEqual({
      content: 'βeta\ngamma 😀\n',
      startLine: 2,
      endLine: 3,
      totalLines: 3,
      truncated: false,
    });
    expect(await sandbox.files.readChars('ops/t.txt', { offset: 6, length: 4 })).toMatchObject({
      content: 'βeta',
      charsRead: 4,
      totalChars: [...text].length,
      truncated: true,
    });
    expect(Buffer.from((await sandbox.files.readBytes('ops/t.txt', { offset: 0, length: 5 })).bytes).toString()).toBe('alpha');
    expect(await codeOf(sandbox.files.write('ops/t.txt', 'x', { expectedSha256: '0'.repeat(64) }))).toBe('CONFLICT');
    await sandbox.files.write('ops/t.txt', text.replace('alpha', 'ALPHA'), { expectedSha256: written.sha256! });
  });

  it('edits by exact text and by LINE#ID anchors', async () => {
    await sandbox.files.write('ops/e.py', 'a = 1\nb = 2\n');
    await sandbox.files.edit('ops/e.py', 'b = 2', 'b = "$1"');
    const { lines } = await sandbox.files.readAnchored('ops/e.py');
    expect(lines.map((l) => l.anchor)).toEqual([lineAnchor(1, 'a = 1'), lineAnchor(2, 'b = "$1"')]);
    await sandbox.files.editLines('ops/e.py', [{ op: 'append', pos: lines[0]!.anchor, lines: ['c = 3'] }]);
    expect(await sandbox.files.read('ops/e.py')).toBe('a = 1\nc = 3\nb = "$1"\n');
    expect(await codeOf(sandbox.files.editLines('ops/e.py', [{ op: 'replace', pos: lines[1]!.anchor, lines: ['x'] }]))).toBe('STALE_ANCHOR');
    expect((await sandbox.commands.run('python3 /workspace/ops/e.py')).exitCode).toBe(0);
  });

  it('stats, lists, globs, makes folders, moves, copies and deletes', async () => {
    await sandbox.files.mkdir('ops/tree/sub');
    await sandbox.files.write('ops/tree/sub/x.py', 'x');
    expect(await sandbox.files.stat('ops/tree/sub')).toMatchObject({ type: 'directory' });
    expect((await sandbox.files.list('ops/tree', { recursive: true })).entries.map((e) => e.path)).toEqual(['sub', 'sub/x.py']);
    expect(await sandbox.files.glob('ops', '**/*.py')).toEqual(['e.py', 'tree/sub/x.py']);
    await sandbox.files.copy('ops/tree', 'ops/tree2');
    await sandbox.files.move('ops/tree2/sub/x.py', 'ops/moved/y.py');
    expect(await sandbox.files.read('ops/moved/y.py')).toBe('x');
    await sandbox.files.delete('ops/tree2', { recursive: true });
    expect(await sandbox.files.exists('ops/tree2')).toBe(false);
    expect(await codeOf(sandbox.files.delete('/workspace', { recursive: true }))).toBe('PATH_NOT_WRITABLE');
  });

  it('uploads and downloads folders as tar archives', async () => {
    const local = await mkdtemp(path.join(os.tmpdir(), 'warren-e2e-tar-'));
    try {
      const down = await sandbox.files.download('ops');
      expect(down.entries.some((e) => e.name === 'tree/sub/x.py')).toBe(true);
      await sandbox.files.upload('copy-of-ops', down.archive);
      expect(await sandbox.files.read('copy-of-ops/tree/sub/x.py')).toBe('x');
      await sandbox.files.downloadTo('copy-of-ops', path.join(local, 'out'));
      expect(await readFile(path.join(local, 'out/e.py'), 'utf8')).toBe('a = 1\nc = 3\nb = "$1"\n');
    } finally {
      await rm(local, { recursive: true, force: true });
    }
  });

  it('keeps an audit log of the calls it served', async () => {
    await sandbox.files.read('/etc/shadow').catch(() => undefined);
    const { entries } = await sandbox.auditLog({ limit: 10_000 });
    const methods = new Set(entries.map((e) => e.method));
    for (const m of ['fs.write', 'fs.read', 'fs.edit', 'fs.editLines', 'fs.copy', 'fs.move', 'fs.delete', 'fs.upload', 'fs.download', 'process.exec'])
      expect(methods).toContain(m);
    expect(entries.at(-1)).toMatchObject({ method: 'fs.read', paths: ['/etc/shadow'], outcome: 'PATH_NOT_IN_SANDBOX' });
  });

  it('a write larger than one frame goes in pieces through the controller and lands byte-identical; one refused mid-way leaves the old file as it was', async () => {
    const big = randomBytes(5 * WRITE_PIECE_BYTES + 12_345);
    await sandbox.files.write('big/data.bin', 'old', { mode: 0o600 });
    expect(await sandbox.files.write('big/data.bin', big)).toMatchObject({ bytesWritten: big.length, created: false });
    const inside = await sandbox.commands.run('sha256sum /workspace/big/data.bin && stat -c %a:%U /workspace/big/data.bin && ls -A /workspace/big');
    expect(inside.stdout).toBe(`${createHash('sha256').update(big).digest('hex')}  /workspace/big/data.bin\n600:warren\ndata.bin\n`);

    await using limited = await Sandbox.create({
      baseUrl: warren.url,
      apiKey: warren.apiKey,
      policy: { root: '/workspace', readOnly: false, maxFileBytes: 3 * WRITE_PIECE_BYTES },
    });
    await limited.files.write('keep.bin', 'the old content');
    // The fourth piece would end past the limit; the pieces before it land in the temporary file only.
    expect(await codeOf(limited.files.write('keep.bin', big))).toBe('FILE_TOO_LARGE');
    expect(await limited.files.read('keep.bin')).toBe('the old content');
    expect((await limited.commands.run('ls -A /workspace')).stdout).toBe('keep.bin\n');
  }, 120_000);

  it('asks onApproval through the controller for named paths that want it (seed 001)', async () => {
    await using approving = await Sandbox.create({
      baseUrl: warren.url,
      apiKey: warren.apiKey,
      policy: {
        paths: {
          work: { root: '/workspace', mode: 'rw', writeApproval: true, readApproval: false },
          etc: { root: '/etc', mode: 'ro', writeApproval: false, readApproval: true },
        },
      },
    });
    expect(await codeOf(approving.files.write('/work/a.txt', 'a'))).toBe('APPROVAL_DENIED');
    const asked: string[] = [];
    approving.onApproval = ({ operation, path: p }) => {
      asked.push(`${operation} ${p}`);
      return p === '/work/a.txt';
    };
    await approving.files.write('/work/a.txt', 'a');
    expect(await approving.files.read('/work/a.txt')).toBe('a');
    expect(await codeOf(approving.files.write('/work/b.txt', 'b'))).toBe('APPROVAL_DENIED');
    expect(await codeOf(approving.files.read('/etc/hostname'))).toBe('APPROVAL_DENIED');
    expect(await codeOf(approving.files.write('/etc/x', 'x'))).toBe('PATH_NOT_WRITABLE');
    expect(asked).toEqual(['write /work/a.txt', 'write /work/b.txt', 'read /etc/hostname']);
    expect((await approving.commands.run('ls /workspace', { cwd: '/work' })).stdout).toBe('a.txt\n');
  }, 60_000);
});
