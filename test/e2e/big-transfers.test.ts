import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { MAX_FRAME_BYTES } from '@warren/protocol';
import { Sandbox, type TransferProgress } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';
import { codeOf } from '../support/files.js';

const MiB = 1024 * 1024;

async function sha256Of(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** `sha256sum` of every file below a sandbox folder, run as the sandbox user: what it sees. */
async function remoteDigests(sandbox: Sandbox, folder: string): Promise<Record<string, string>> {
  const { stdout, exitCode } = await sandbox.commands.run(`cd ${folder} && find . -type f -print0 | sort -z | xargs -0 sha256sum`, { timeoutMs: 60_000 });
  expect(exitCode).toBe(0);
  return Object.fromEntries(
    stdout
      .trim()
      .split('\n')
      .filter((l) => l !== '')
      .map((line) => {
        const [digest, name] = line.split(/\s+\.\//) as [string, string];
        return [name, digest];
      }),
  );
}

/** Temporary and set-aside names a transfer could leave in the sandbox. */
async function remoteLeftovers(sandbox: Sandbox): Promise<string> {
  return (await sandbox.commands.run("find /workspace -name '.*.warren-*' 2>/dev/null")).stdout;
}

describe('transfers of any size in real containers', () => {
  let warren: TestController;
  let local: string;
  beforeAll(async () => {
    warren = await startTestController();
    local = await mkdtemp(path.join(os.tmpdir(), 'warren-big-'));
  }, 60_000);
  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    await rm(local, { recursive: true, force: true });
  });

  it('moves 200+ MiB and a file larger than a frame up and back, owned by the sandbox user', async () => {
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    const source = path.join(local, 'up');
    await mkdir(path.join(source, 'parts'), { recursive: true });
    const block = randomBytes(8 * MiB);
    await writeFile(path.join(source, 'big.bin'), Buffer.concat([block, block, block, block, block, block.subarray(0, MiB + 3)]));
    for (let i = 0; i < 20; i++)
      await writeFile(path.join(source, 'parts', `p${i}.bin`), Buffer.concat([block.subarray(i * 1000), block.subarray(0, i * 1000)]));
    const expected: Record<string, string> = { 'big.bin': await sha256Of(path.join(source, 'big.bin')) };
    for (let i = 0; i < 20; i++) expected[`parts/p${i}.bin`] = await sha256Of(path.join(source, 'parts', `p${i}.bin`));
    const total = 41 * MiB + 3 + 20 * 8 * MiB;
    expect(total).toBeGreaterThan(200 * MiB);
    expect(41 * MiB).toBeGreaterThan(MAX_FRAME_BYTES);

    const up: TransferProgress[] = [];
    const started = performance.now();
    expect(await sandbox.files.uploadFrom(source, '/workspace/big', { onProgress: (p) => up.push(p) })).toMatchObject({ files: 21, bytes: total });
    const upSeconds = (performance.now() - started) / 1000;
    expect(up.at(-1)).toEqual({ bytes: total, totalBytes: total });
    expect(await remoteDigests(sandbox, '/workspace/big')).toEqual(expected);
    expect((await sandbox.commands.run('stat -c %U /workspace/big/big.bin /workspace/big/parts')).stdout).toBe('warren\nwarren\n');

    const down: TransferProgress[] = [];
    const back = path.join(local, 'back');
    const downStarted = performance.now();
    await sandbox.files.downloadTo('/workspace/big', back, { onProgress: (p) => down.push(p) });
    const downSeconds = (performance.now() - downStarted) / 1000;
    expect(down.at(-1)).toEqual({ bytes: total, totalBytes: total });
    expect(await sha256Of(path.join(back, 'big.bin'))).toBe(expected['big.bin']);
    expect(await sha256Of(path.join(back, 'parts/p19.bin'))).toBe(expected['parts/p19.bin']);
    expect(await readdir(path.join(back, 'parts'))).toHaveLength(20);
    await sandbox.files.downloadFile('/workspace/big/big.bin', path.join(local, 'big.bin'));
    expect(await sha256Of(path.join(local, 'big.bin'))).toBe(expected['big.bin']);
    expect(await remoteLeftovers(sandbox)).toBe('');
    process.stderr.write(`big-transfers: up ${(total / MiB / upSeconds).toFixed(0)} MiB/s, down ${(total / MiB / downSeconds).toFixed(0)} MiB/s\n`);
  }, 300_000);

  it('refuses a file over the sandbox file size limit and an upload over its disk, keeping the old file and leaving nothing', async () => {
    const big = path.join(local, 'sixteen.bin');
    await writeFile(big, randomBytes(16 * MiB));
    await using small = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, fileSizeMb: 8 });
    await small.files.write('/workspace/keep.bin', 'old');
    expect(await codeOf(small.files.uploadFrom(big, '/workspace/keep.bin', { overwrite: true }))).toBe('FILE_TOO_LARGE');
    expect(await small.files.read('/workspace/keep.bin')).toBe('old');
    expect(await remoteLeftovers(small)).toBe('');

    await using tiny = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, diskMb: 32 });
    const folder = path.join(local, 'too-much');
    await mkdir(folder, { recursive: true });
    for (let i = 0; i < 5; i++) await writeFile(path.join(folder, `f${i}.bin`), randomBytes(10 * MiB));
    expect(await codeOf(tiny.files.uploadFrom(folder, '/workspace/too-much'))).toBe('RESOURCE_EXHAUSTED');
    expect((await tiny.commands.run('ls -A /workspace')).stdout).not.toContain('too-much');
    expect(await remoteLeftovers(tiny)).toBe('');
    // The space the staged files took is free again: a 20 MiB write fits.
    await tiny.files.write('/workspace/after.bin', new Uint8Array(20 * MiB));
  }, 120_000);

  it('ends downloads of a file a sandbox process grows without end, and of a FIFO, with typed errors', async () => {
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    // About 6 MiB/s: it outgrows any download, yet fills no disk during the test.
    const grower = await sandbox.commands.start(
      "sh -c 'head -c 8388608 /dev/urandom > /workspace/grow.log; while :; do head -c 65536 /dev/zero; sleep 0.01; done >> /workspace/grow.log'",
    );
    try {
      await sandbox.commands.run('while [ ! -s /workspace/grow.log ]; do sleep 0.05; done; sleep 0.3');
      expect(await codeOf(sandbox.files.downloadFile('/workspace/grow.log', path.join(local, 'grow.log')))).toBe('CONFLICT');
    } finally {
      await grower.kill();
    }
    await expect(readdir(local)).resolves.not.toContain('grow.log');

    await sandbox.commands.run('mkfifo /workspace/fifo && echo ok > /workspace/ok.txt');
    expect(await codeOf(sandbox.files.downloadFile('/workspace/fifo', path.join(local, 'fifo')))).toBe('UNSUPPORTED_FILE_TYPE');
  }, 120_000);
});
