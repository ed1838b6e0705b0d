import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFileSync } from 'node:child_process';
import { chmod, link, readFile, stat, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { lineAnchor } from '@warren/protocol/node';
import { WarrenError } from '@warren/sdk';
import { startTestAgent, type TestAgent } from '../support/fixtures.js';
import { codeOf } from '../support/files.js';

describe('file operations over a real agent socket', () => {
  let agent: TestAgent;
  beforeAll(async () => {
    agent = await startTestAgent();
  });
  afterAll(async () => {
    await agent[Symbol.asyncDispose]();
  });

  it('reads whole files, byte ranges, line ranges with totals, and character ranges that never split UTF-8', async () => {
    const text = 'l1\nl2 é\nl3 😀\nl4\n';
    await agent.files.write('r/text.txt', text);
    expect(await agent.files.read('r/text.txt')).toBe(text);

    const bytes = await agent.files.readBytes('r/text.txt', { offset: 3, length: 4 });
    expect(Buffer.from(bytes.bytes)).toEqual(Buffer.from(text).subarray(3, 7));
    expect(bytes).toMatchObject({ unit: 'bytes', offset: 3, bytesRead: 4, truncated: true, size: Buffer.byteLength(text) });

    expect(await agent.files.readLines('r/text.txt', { startLine: 2, endLine: 3 })).toEqual({
      content: 'l2 é\nl3 😀\n',
      startLine: 2,
      endLine: 3,
      totalLines: 4,
      truncated: false,
    });
    expect(await agent.files.readLines('r/text.txt', { startLine: -5, lineCount: 2 })).toMatchObject({ startLine: 1, endLine: 2, totalLines: 4 });
    expect(await agent.files.readLines('r/text.txt', { startLine: 3, endLine: 99 })).toMatchObject({ content: 'l3 😀\nl4\n', startLine: 3, endLine: 4 });
    expect(await agent.files.readLines('r/text.txt', { startLine: 9, endLine: 2 })).toEqual({
      content: '',
      startLine: 9,
      endLine: 8,
      totalLines: 4,
      truncated: false,
    });
    expect(await agent.files.readLines('r/text.txt', { maxLines: 2 })).toMatchObject({ content: 'l1\nl2 é\n', endLine: 2, truncated: true });

    // 😀 is one character (two UTF-16 units, four UTF-8 bytes).
    const chars = await agent.files.readChars('r/text.txt', { offset: 11, length: 2 });
    expect(chars).toEqual({ content: '😀\n', offset: 11, charsRead: 2, totalChars: [...text].length, truncated: true });
    expect(await agent.files.readChars('r/text.txt', { offset: 100, length: 5 })).toMatchObject({ content: '', charsRead: 0, truncated: false });
    const all = await agent.files.readChars('r/text.txt', { offset: 0 });
    expect(all).toMatchObject({ content: text, truncated: false, charsRead: [...text].length });
  });

  it('returns binary content byte for byte', async () => {
    const binary = Buffer.from([0, 255, 254, 10, 13, 0x80, 0xc3]);
    await agent.files.write('bin/blob', binary);
    expect(Buffer.from(await agent.files.read('bin/blob', { format: 'bytes' }))).toEqual(binary);
  });

  it('writes atomically, keeps the mode, honours expectedSha256 and overwrite: false', async () => {
    const first = await agent.files.write('w/a.sh', '#!/bin/sh\necho 1\n', { mode: 0o755, hash: true });
    expect((await agent.files.readWithHash('w/a.sh')).sha256).toBe(first.sha256);
    expect(first.created).toBe(true);
    expect((await stat(path.join(agent.root, 'w/a.sh'))).mode & 0o777).toBe(0o755);
    await chmod(path.join(agent.root, 'w/a.sh'), 0o700);
    const second = await agent.files.write('w/a.sh', 'echo 2\n', { expectedSha256: first.sha256! });
    expect(second.created).toBe(false);
    expect((await stat(path.join(agent.root, 'w/a.sh'))).mode & 0o777).toBe(0o700);
    expect(await codeOf(agent.files.write('w/a.sh', 'echo 3\n', { expectedSha256: first.sha256! }))).toBe('CONFLICT');
    expect(await readFile(path.join(agent.root, 'w/a.sh'), 'utf8')).toBe('echo 2\n');
    expect(await codeOf(agent.files.write('w/a.sh', 'x', { overwrite: false }))).toBe('ALREADY_EXISTS');
    expect(await codeOf(agent.files.write('w', 'x'))).toBe('IS_A_DIRECTORY');
  });

  it('a concurrent reader sees the old or the new content, never a torn one', async () => {
    const a = 'A'.repeat(512 * 1024);
    const b = 'B'.repeat(512 * 1024);
    await agent.files.write('w/torn.txt', a);
    const reader = await agent.connect();
    const { Files } = await import('@warren/sdk');
    const files = new Files(() => reader);
    const reads: Promise<string>[] = [];
    const writes: Promise<unknown>[] = [];
    for (let i = 0; i < 20; i++) {
      writes.push(agent.files.write('w/torn.txt', i % 2 ? a : b));
      reads.push(files.read('w/torn.txt'));
    }
    await Promise.all(writes);
    for (const content of await Promise.all(reads)) expect(content === a || content === b).toBe(true);
    reader.close();
  });

  it('edits exact text once, says how many matches and where otherwise, and keeps $ literal', async () => {
    await agent.files.write('e/a.py', 'x = 1\ny = 2\nx = 1\n');
    const notUnique = await agent.files.edit('e/a.py', 'x = 1', 'x = 3').catch((e: unknown) => e as WarrenError);
    expect(notUnique).toMatchObject({ code: 'EDIT_NOT_UNIQUE', details: { matches: 2, lines: [1, 3] } });
    expect((notUnique as WarrenError).message).toContain('2 times');
    expect(await codeOf(agent.files.edit('e/a.py', 'z = 9', 'q'))).toBe('EDIT_NOT_FOUND');
    const done = await agent.files.edit('e/a.py', 'y = 2', "y = '$& $1 $$'");
    expect(done.line).toBe(2);
    expect(await agent.files.read('e/a.py')).toBe("x = 1\ny = '$& $1 $$'\nx = 1\n");
  });

  it('reads lines with LINE#ID anchors and applies a batch of anchored edits as one', async () => {
    await agent.files.write('e/b.txt', 'one\ntwo\nthree\nfour\nfive\n');
    const { lines } = await agent.files.readAnchored('e/b.txt');
    expect(lines[1]).toEqual({ anchor: lineAnchor(2, 'two'), text: 'two' });
    const a = (n: number) => lines[n - 1]!.anchor;
    const result = await agent.files.editLines('e/b.txt', [
      { op: 'replace', pos: a(2), end: a(3), lines: ['TWO-THREE'] },
      { op: 'prepend', pos: a(1), lines: ['zero'] },
      { op: 'append', pos: a(5), lines: ['six', 'seven'] },
      { op: 'replace', pos: a(4), lines: [] },
    ]);
    expect(await agent.files.read('e/b.txt')).toBe('zero\none\nTWO-THREE\nfive\nsix\nseven\n');
    expect(result).toMatchObject({ applied: 4, totalLines: 6, firstChangedLine: 1, lastChangedLine: 6 });
  });

  it('refuses a batch with one stale anchor, naming it and its current LINE#ID, and leaves the file byte-identical', async () => {
    await agent.files.write('e/c.txt', 'a\r\nb\r\nc');
    const before = await readFile(path.join(agent.root, 'e/c.txt'));
    const err = await agent.files
      .editLines('e/c.txt', [
        { op: 'replace', pos: lineAnchor(1, 'a'), lines: ['A'] },
        { op: 'replace', pos: lineAnchor(2, 'not b'), lines: ['B'] },
        { op: 'append', pos: lineAnchor(9, 'c'), lines: ['D'] },
      ])
      .catch((e: unknown) => e as WarrenError);
    expect(err).toMatchObject({
      code: 'STALE_ANCHOR',
      details: {
        stale: [
          { anchor: lineAnchor(2, 'not b'), current: lineAnchor(2, 'b') },
          { anchor: lineAnchor(9, 'c'), current: null },
        ],
      },
    });
    expect(await readFile(path.join(agent.root, 'e/c.txt'))).toEqual(before);
    // Overlapping replaces are refused; CRLF and the missing final newline are kept.
    expect(
      await codeOf(
        agent.files.editLines('e/c.txt', [
          { op: 'replace', pos: lineAnchor(1, 'a'), end: lineAnchor(2, 'b'), lines: ['x'] },
          { op: 'replace', pos: lineAnchor(2, 'b'), lines: ['y'] },
        ]),
      ),
    ).toBe('INVALID_PARAMS');
    await agent.files.editLines('e/c.txt', [{ op: 'append', pos: lineAnchor(3, 'c'), lines: ['d'] }]);
    expect(await agent.files.read('e/c.txt')).toBe('a\r\nb\r\nc\r\nd');
  });

  it('stats, lists with caps, makes folders, and deletes (never the root)', async () => {
    await agent.files.mkdir('t/sub/deeper');
    await agent.files.write('t/f1.txt', '1');
    await agent.files.write('t/sub/f2.txt', '22');
    await symlink('f1.txt', path.join(agent.root, 't/link'));
    expect(await agent.files.stat('t/f1.txt')).toMatchObject({ type: 'file', size: 1, nlink: 1, readable: true, writable: true });
    expect(await agent.files.stat('t/link', { followLinks: false })).toMatchObject({ type: 'symlink', linkTarget: 'f1.txt' });
    const flat = await agent.files.list('t');
    expect(flat.entries.map((e) => `${e.type}:${e.path}`)).toEqual(['file:f1.txt', 'symlink:link', 'directory:sub']);
    const deep = await agent.files.list('t', { recursive: true });
    expect(deep.entries.map((e) => e.path)).toEqual(['f1.txt', 'link', 'sub', 'sub/deeper', 'sub/f2.txt']);
    expect((await agent.files.list('t', { recursive: true, limit: 2 })).truncated).toBe(true);
    expect((await agent.files.mkdir('t/sub')).created).toBe(false);
    expect(await codeOf(agent.files.delete('t/sub'))).toBe('DIRECTORY_NOT_EMPTY');
    await agent.files.delete('t/sub', { recursive: true });
    expect(await agent.files.exists('t/sub')).toBe(false);
    expect(await codeOf(agent.files.delete('.', { recursive: true }))).toBe('PATH_NOT_WRITABLE');
    expect(await codeOf(agent.files.delete(agent.root, { recursive: true }))).toBe('PATH_NOT_WRITABLE');
    expect(await codeOf(agent.files.delete('t/missing'))).toBe('NOT_FOUND');
  });

  it('moves and copies files and folders, refusing silent overwrites and folders into themselves', async () => {
    await agent.files.write('m/src/a.txt', 'a');
    await agent.files.write('m/src/in/b.txt', 'b');
    await agent.files.write('m/other.txt', 'o');
    const copied = await agent.files.copy('m/src', 'm/copy');
    expect(copied).toMatchObject({ type: 'directory', files: 2, bytes: 2 });
    expect(await agent.files.read('m/copy/in/b.txt')).toBe('b');
    expect(await codeOf(agent.files.copy('m/src', 'm/src/inside'))).toBe('INVALID_PARAMS');
    expect(await codeOf(agent.files.move('m/src', 'm/src/inside'))).toBe('INVALID_PARAMS');
    expect(await codeOf(agent.files.copy('m/other.txt', 'm/src/a.txt'))).toBe('ALREADY_EXISTS');
    await agent.files.copy('m/other.txt', 'm/src/a.txt', { overwrite: true });
    expect(await agent.files.read('m/src/a.txt')).toBe('o');
    expect(await codeOf(agent.files.move('m/other.txt', 'm/copy'))).toBe('ALREADY_EXISTS');
    await agent.files.move('m/copy', 'm/moved/deeper');
    expect(await agent.files.read('m/moved/deeper/a.txt')).toBe('a');
    expect(await codeOf(agent.files.move('.', 'x'))).toBe('PATH_NOT_WRITABLE');
  });

  it('never opens a FIFO in a way that blocks, and writes through a hard link replace the name only', async () => {
    execFileSync('mkfifo', [path.join(agent.root, 'fifo')]);
    expect(await codeOf(agent.files.read('fifo'))).toBe('UNSUPPORTED_FILE_TYPE');
    expect(await codeOf(agent.files.write('fifo', 'x'))).toBe('UNSUPPORTED_FILE_TYPE');
    const outside = path.join(path.dirname(agent.root), 'outside.txt');
    await writeFile(outside, 'sentinel');
    await link(outside, path.join(agent.root, 'hard.txt'));
    await agent.files.write('hard.txt', 'changed');
    await agent.files.edit('hard.txt', 'changed', 'edited');
    expect(await readFile(outside, 'utf8')).toBe('sentinel');
    expect(await agent.files.read('hard.txt')).toBe('edited');
  });

  it('says what IS allowed in its errors', async () => {
    const err = await agent.files.read('/etc/passwd').catch((e: unknown) => e as WarrenError);
    expect(err).toMatchObject({ code: 'PATH_NOT_IN_SANDBOX' });
    expect((err as WarrenError).message).toContain(`Readable: ${agent.root}`);
    expect((err as WarrenError).message).toContain(`Writable: ${agent.root}`);
  });
});
