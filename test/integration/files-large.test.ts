import { createHash, randomBytes } from 'node:crypto';
import { readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { CancelledError, FileTooLargeError, WRITE_CHUNK_BYTES, WRITE_PIECE_BYTES } from '@warren/sdk';
import { startTestAgent } from '../support/fixtures.js';

const MiB = 1024 * 1024;
const sha = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

describe('writes larger than one frame', () => {
  it('travel in pieces, several at a time, and land whole: same bytes, existing mode kept, no temporary file left', async () => {
    await using agent = await startTestAgent();
    const big = randomBytes(2 * WRITE_CHUNK_BYTES + 5 * MiB);
    await agent.files.write('data/big.bin', 'old', { mode: 0o600 });
    const result = await agent.files.write('data/big.bin', big, { hash: true });
    expect(result).toMatchObject({ bytesWritten: big.length, created: false, sha256: sha(big) });
    expect(sha(await readFile(path.join(agent.root, 'data/big.bin')))).toBe(sha(big));
    expect((await stat(path.join(agent.root, 'data/big.bin'))).mode & 0o777).toBe(0o600);
    expect(await readdir(path.join(agent.root, 'data'))).toEqual(['big.bin']);
  });

  it('reads back in ranges, byte for byte', async () => {
    await using agent = await startTestAgent();
    const big = randomBytes(WRITE_CHUNK_BYTES + 3 * MiB);
    await agent.files.write('big.bin', big);
    const parts: Uint8Array[] = [];
    for (let offset = 0; offset < big.length; offset += 8 * MiB) parts.push((await agent.files.readBytes('big.bin', { offset, length: 8 * MiB })).bytes);
    expect(sha(Buffer.concat(parts))).toBe(sha(big));
  });

  it('an abort mid-way, with pieces landing, leaves the old file intact and no temporary file, also once the pieces on their way have arrived', async () => {
    await using agent = await startTestAgent();
    await agent.files.write('keep.bin', 'the old content');
    const abort = new AbortController();
    const writing = agent.files.write('keep.bin', randomBytes(12 * WRITE_PIECE_BYTES), { signal: abort.signal });
    const landed = async () => {
      const temp = (await readdir(agent.root)).find((name) => name.startsWith('.warren-upload-'));
      return temp !== undefined && ((await stat(path.join(agent.root, temp)).catch(() => undefined))?.size ?? 0) > 0;
    };
    while (!(await landed())) await new Promise((resolve) => setTimeout(resolve, 1));
    abort.abort();
    await expect(writing).rejects.toBeInstanceOf(CancelledError);
    expect(await readFile(path.join(agent.root, 'keep.bin'), 'utf8')).toBe('the old content');
    expect(await readdir(agent.root)).toEqual(['keep.bin']);
    // Pieces still on their way when the temporary file was removed fail (NOT_FOUND) instead of bringing it back.
    await agent.files.stat('keep.bin');
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await readdir(agent.root)).toEqual(['keep.bin']);
  });

  it('keeps the size limit on the whole file, and a piece refused mid-way leaves the old file intact', async () => {
    await using agent = await startTestAgent({ maxFileBytes: 20 * MiB });
    await agent.files.write('keep.bin', 'the old content');
    await expect(agent.files.write('keep.bin', randomBytes(WRITE_CHUNK_BYTES + MiB * 5))).rejects.toBeInstanceOf(FileTooLargeError);
    expect(await readFile(path.join(agent.root, 'keep.bin'), 'utf8')).toBe('the old content');
    expect(await readdir(agent.root)).toEqual(['keep.bin']);
  });
});
