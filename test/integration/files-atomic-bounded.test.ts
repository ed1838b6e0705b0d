import { createHash } from 'node:crypto';
import { open, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { codeOf } from '../support/files.js';
import { startTestAgent } from '../support/fixtures.js';

describe('read-modify-write is atomic per file', () => {
  it('concurrent edits of one file either all land or fail with CONFLICT: no acknowledged edit is lost', async () => {
    await using agent = await startTestAgent();
    const lines = Array.from({ length: 40 }, (_, i) => `line ${i}`);
    await agent.files.write('shared.txt', `${lines.join('\n')}\n`);
    const outcomes = await Promise.all(
      lines.map((line, i) =>
        agent.files.edit('shared.txt', `${line}\n`, `edited ${i}\n`).then(
          () => i,
          (err: { code?: string }) => err.code ?? 'untyped',
        ),
      ),
    );
    const landed = outcomes.filter((o): o is number => typeof o === 'number');
    expect(outcomes.filter((o) => typeof o !== 'number' && o !== 'CONFLICT')).toEqual([]);
    const text = await agent.files.read('shared.txt');
    for (const i of landed) expect(text).toContain(`edited ${i}\n`);
    expect(landed.length).toBe(lines.length);
  });

  it('concurrent expectedSha256 writes (read, add one, write back) never lose an acknowledged change', async () => {
    await using agent = await startTestAgent();
    await agent.files.write('n.txt', '0\n');
    const bump = async () => {
      for (;;) {
        const bytes = Buffer.from(await agent.files.read('n.txt', { format: 'bytes' }));
        const sha256 = createHash('sha256').update(bytes).digest('hex');
        const content = bytes.toString('utf8');
        const next = `${Number(content.trim()) + 1}\n`;
        const done = await agent.files.write('n.txt', next, { expectedSha256: sha256 }).then(
          () => true,
          (err: { code?: string }) => {
            if (err.code !== 'CONFLICT') throw err;
            return false;
          },
        );
        if (done) return;
      }
    };
    await Promise.all(Array.from({ length: 20 }, bump));
    expect((await agent.files.read('n.txt')).trim()).toBe('20');
  });
});

describe('reads, hashes and downloads are bounded by the bytes they read, not the size a file claims', () => {
  const sparse = async (root: string, name: string, bytes: number) => {
    const handle = await open(path.join(root, name), 'w');
    await handle.truncate(bytes);
    await handle.close();
  };

  it('a 1.5 GiB sparse file: download, expectedSha256 and whole reads answer typed errors fast; the daemon stays small and answers', async () => {
    await using agent = await startTestAgent();
    await sparse(agent.root, 'big.bin', 1536 * 1024 * 1024);
    await writeFile(path.join(agent.root, 'small.txt'), 'hi');
    const rssBefore = process.memoryUsage.rss();
    const started = Date.now();
    expect(await codeOf(agent.files.download('big.bin'))).toBe('FILE_TOO_LARGE');
    expect(await codeOf(agent.files.read('big.bin'))).toBe('FILE_TOO_LARGE');
    expect(await codeOf(agent.files.write('big.bin', 'x', { expectedSha256: '0'.repeat(64) }))).toMatch(/^(CONFLICT|FILE_TOO_LARGE)$/);
    expect(Date.now() - started).toBeLessThan(30_000);
    expect(process.memoryUsage.rss() - rssBefore).toBeLessThan(256 * 1024 * 1024);
    expect(await agent.files.read('small.txt')).toBe('hi');
  });

  it('a 50 GB sparse file in a folder download is refused typed, not INTERNAL', async () => {
    await using agent = await startTestAgent();
    await agent.files.mkdir('dir');
    await sparse(agent.root, 'dir/huge.bin', 50 * 1000 * 1000 * 1000);
    expect(await codeOf(agent.files.download('dir'))).toBe('FILE_TOO_LARGE');
    expect(await codeOf(agent.files.download('dir/huge.bin'))).toBe('FILE_TOO_LARGE');
  });
});

describe('a hostile glob does not hold the daemon', () => {
  it('many stars and a negation over many long names: answers in bounded time while a stat on the same daemon answers at once', async () => {
    await using agent = await startTestAgent({ readOnly: true });
    const { mkdir } = await import('node:fs/promises');
    await mkdir(path.join(agent.root, 'd'));
    await Promise.all(Array.from({ length: 300 }, (_, i) => writeFile(path.join(agent.root, 'd', `${'a'.repeat(120)}${i}c`), '')));
    const other = await agent.connect();
    const glob = agent.files.glob('.', `!**/${'*a'.repeat(15)}*b`);
    const started = performance.now();
    await other.call('fs.stat', { path: 'd' });
    const statMs = performance.now() - started;
    const matches = await glob;
    // Every file, and the folder itself when listed: none of them ends in b.
    expect(matches.filter((m) => m.startsWith('d/')).length).toBe(300);
    expect(statMs).toBeLessThan(2_000);
    other.close();
  });
});
