import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { appendFile, mkdir, mkdtemp, readdir, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import os from 'node:os';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import path from 'node:path';
import { MAX_FRAME_BYTES } from '@warren/protocol';
import { createHandlers, type CallContext } from '@warren/agent';
import { Sandbox, type TransferProgress } from '@warren/sdk';
import { runCli } from '../support/cli.js';
import { codeOf } from '../support/files.js';
import { archive, file } from '../support/tar-bytes.js';
import { startLocalController, type LocalController } from '../support/local-controller.js';

const MiB = 1024 * 1024;

/** The SHA-256 of every regular file below `folder`, by relative path. */
async function digests(folder: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const walk = async (dir: string, rel: string) => {
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const name = rel ? `${rel}/${entry.name}` : entry.name;
      if (entry.isDirectory()) await walk(path.join(dir, entry.name), name);
      else if (entry.isFile()) {
        const hash = createHash('sha256');
        for await (const chunk of createReadStream(path.join(dir, entry.name))) hash.update(chunk as Buffer);
        out[name] = hash.digest('hex');
      }
    }
  };
  await walk(folder, '');
  return out;
}

/** Every name below `folder` that a transfer might leave behind (temporary and set-aside files). */
async function leftovers(folder: string): Promise<string[]> {
  const names = await readdir(folder, { recursive: true });
  return names.filter((n) => /\.warren-(new|old)-|\.warren-[0-9a-f]{12}$/.test(n));
}

/** A full garbage collection, so a sample counts live memory only (Buffers not yet collected would hide a leak or fake one). */
const collectGarbage = (() => {
  v8.setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
})();

/**
 * Samples this process's live Buffer memory twice a second while `work` runs (a full collection
 * each time, so not more often); resolves its result and the peak growth. A transfer that held
 * its data whole would show it for the whole of its second half.
 */
async function peakBufferGrowth<T>(work: () => Promise<T>): Promise<{ result: T; peak: number }> {
  collectGarbage();
  const base = process.memoryUsage().arrayBuffers;
  let peak = 0;
  const timer = setInterval(() => {
    collectGarbage();
    peak = Math.max(peak, process.memoryUsage().arrayBuffers - base);
  }, 500);
  try {
    const result = await work();
    return { result, peak };
  } finally {
    clearInterval(timer);
  }
}

function monotonic(progress: TransferProgress[]): boolean {
  return progress.every((p, i) => i === 0 || p.bytes >= progress[i - 1]!.bytes);
}

describe('streamed uploads and downloads of any size, through a real controller', () => {
  let warren: LocalController;
  let sandbox: Sandbox;
  let local: string;
  beforeAll(async () => {
    warren = await startLocalController();
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: warren.root } });
    local = await mkdtemp(path.join(os.tmpdir(), 'warren-streamed-'));
  });
  afterAll(async () => {
    await sandbox?.kill().catch(() => undefined);
    await warren?.[Symbol.asyncDispose]();
    await rm(local, { recursive: true, force: true });
  });

  it('moves 200+ MiB of files, one of them larger than a frame, both ways, with progress and bounded memory', async () => {
    const source = path.join(local, 'big');
    await mkdir(path.join(source, 'nested/deeper'), { recursive: true });
    const block = randomBytes(8 * MiB);
    // One file past the old 32 MiB frame limit, and many smaller ones: 216 MiB in all.
    const big = Buffer.concat([...Array.from({ length: 5 }, () => block), block.subarray(0, 3 * MiB + 17)]);
    expect(big.length).toBeGreaterThan(MAX_FRAME_BYTES);
    await writeFile(path.join(source, 'big.bin'), big);
    let total = big.length;
    for (let i = 0; i < 22; i++) {
      const part = Buffer.concat([block.subarray(i), block.subarray(0, i ? i - 1 : 0)]);
      await writeFile(path.join(source, i % 2 ? 'nested' : 'nested/deeper', `part-${i}.bin`), part);
      total += part.length;
    }
    await writeFile(path.join(source, 'empty.txt'), '');
    const expected = await digests(source);

    const up: TransferProgress[] = [];
    const uploaded = await peakBufferGrowth(() => sandbox.files.uploadFrom(source, 'big', { onProgress: (p) => up.push(p) }));
    expect(uploaded.result).toMatchObject({ kind: 'directory', files: 24, directories: 2 });
    expect(await digests(path.join(warren.root, 'big'))).toEqual(expected);
    expect(total).toBeGreaterThan(200 * MiB);
    expect(up.length).toBeGreaterThan(10);
    expect(monotonic(up)).toBe(true);
    expect(up.at(-1)).toEqual({ bytes: total, totalBytes: total });
    // SDK, controller and daemon all run in this process: together they hold a small part of what moved.
    expect(uploaded.peak).toBeLessThan(64 * MiB);

    const down: TransferProgress[] = [];
    const target = path.join(local, 'back');
    const downloaded = await peakBufferGrowth(() => sandbox.files.downloadTo('big', target, { onProgress: (p) => down.push(p) }));
    expect(downloaded.result).toMatchObject({ files: 24, directories: 2, skipped: [] });
    expect(await digests(target)).toEqual(expected);
    expect(down[0]).toEqual({ bytes: 0, totalBytes: total });
    expect(down.at(-1)).toEqual({ bytes: total, totalBytes: total });
    expect(monotonic(down)).toBe(true);
    expect(downloaded.peak).toBeLessThan(64 * MiB);

    // One file each way, past the frame limit, to a name of its own.
    await sandbox.files.uploadFrom(path.join(source, 'big.bin'), 'single/copy.bin');
    expect(await digests(path.join(warren.root, 'single'))).toEqual({ 'copy.bin': expected['big.bin'] });
    await sandbox.files.downloadFile('single/copy.bin', path.join(local, 'copy.bin'));
    expect(
      createHash('sha256')
        .update(await readFile(path.join(local, 'copy.bin')))
        .digest('hex'),
    ).toBe(expected['big.bin']);
    expect(await codeOf(sandbox.files.downloadFile('single/copy.bin', path.join(local, 'copy.bin')))).toBe('ALREADY_EXISTS');
    expect(await codeOf(sandbox.files.downloadFile('big', path.join(local, 'folder.bin')))).toBe('IS_A_DIRECTORY');
    expect(await leftovers(local)).toEqual([]);
    expect(await leftovers(warren.root)).toEqual([]);
  }, 300_000);

  it('replaces files only with overwrite, and a refused upload leaves the old file and no partial one', async () => {
    await sandbox.files.write('keep/a.txt', 'old');
    const fresh = path.join(local, 'fresh.txt');
    await writeFile(fresh, 'new');
    expect(await codeOf(sandbox.files.uploadFrom(fresh, 'keep/a.txt'))).toBe('ALREADY_EXISTS');
    expect(await readFile(path.join(warren.root, 'keep/a.txt'), 'utf8')).toBe('old');

    // A valid large entry replacing a.txt, a new file, then a hostile one: refused as a whole.
    const hostile = archive(file('a.txt', randomBytes(3 * MiB)), file('b.txt', 'b'), file('../escape.txt', 'x'));
    expect(await codeOf(sandbox.files.upload('keep', pieces(hostile, 256 * 1024), { overwrite: true }))).toBe('INVALID_PARAMS');
    expect(await readFile(path.join(warren.root, 'keep/a.txt'), 'utf8')).toBe('old');
    expect(await readdir(path.join(warren.root, 'keep'))).toEqual(['a.txt']);
    await expect(readFile(path.join(warren.root, 'escape.txt'))).rejects.toThrow();

    for (const [label, bytes, code] of [
      ['a hard link', archive(file('h', '', { flag: '1', linkname: 'a.txt' })), 'INVALID_PARAMS'],
      ['a device', archive(file('dev', '', { flag: '3' })), 'INVALID_PARAMS'],
      ['a FIFO', archive(file('fifo', '', { flag: '6' })), 'INVALID_PARAMS'],
      ['a link that leaves', archive(file('l', '', { flag: '2', linkname: '../../etc/passwd' })), 'INVALID_PARAMS'],
      ['an archive cut short', archive(file('cut.bin', randomBytes(2 * MiB))).subarray(0, MiB + 100), 'INVALID_PARAMS'],
    ] as const) {
      expect([label, await codeOf(sandbox.files.upload('keep', pieces(bytes, 64 * 1024), { overwrite: true }))]).toEqual([label, code]);
    }
    expect(await readdir(path.join(warren.root, 'keep'))).toEqual(['a.txt']);

    const replaced = await sandbox.files.upload('keep', pieces(archive(file('a.txt', 'newer')), 1000), { overwrite: true });
    expect(replaced).toMatchObject({ files: 1, bytes: 5 });
    expect(await readFile(path.join(warren.root, 'keep/a.txt'), 'utf8')).toBe('newer');
    expect(await leftovers(warren.root)).toEqual([]);
  });

  it('stops both ends when the caller aborts, and undoes what the upload staged', async () => {
    await sandbox.files.write('abort/a.txt', 'old');
    const abort = new AbortController();
    const entries = archive(file('a.txt', randomBytes(6 * MiB)), file('b.txt', randomBytes(6 * MiB)));
    const err = await sandbox.files.upload('abort', slowly(entries, abort), { overwrite: true, signal: abort.signal }).then(
      () => undefined,
      (e: unknown) => e as { code: string },
    );
    expect(err?.code).toBe('CANCELLED');
    expect(await readFile(path.join(warren.root, 'abort/a.txt'), 'utf8')).toBe('old');
    expect(await readdir(path.join(warren.root, 'abort'))).toEqual(['a.txt']);

    await writeFile(path.join(warren.root, 'abort/big.bin'), randomBytes(40 * MiB));
    const stop = new AbortController();
    const down = sandbox.files.downloadTo('abort', path.join(local, 'aborted'), {
      signal: stop.signal,
      onProgress: ({ bytes }) => bytes > 0 && stop.abort(),
    });
    expect(await codeOf(down)).toBe('CANCELLED');
    await expect(readdir(path.join(local, 'aborted'))).rejects.toThrow();
    // The connection still serves calls afterwards.
    expect(await sandbox.files.read('abort/a.txt')).toBe('old');
  });

  it('undoes an upload whose connection closes halfway', async () => {
    const child = await sandbox.derive({ inherit: true });
    let hang: () => void = () => undefined;
    const stalled = (async function* () {
      yield archive(file('gone/half.bin', randomBytes(3 * MiB))).subarray(0, 2 * MiB);
      await new Promise<void>((resolve) => (hang = resolve));
    })();
    const upload = child.files.upload('closing', stalled, {
      onProgress: ({ bytes }) => {
        if (bytes === 0) return;
        child.close();
        // Both pieces may have been answered already: the source's next step then meets the closed handle.
        hang();
      },
    });
    expect(await codeOf(upload)).toMatch(/CONNECTION_CLOSED|CANCELLED/);
    // The daemon sees the connection end and undoes what the upload staged and made.
    for (let i = 0; i < 100 && (await readdir(warren.root)).includes('closing'); i++) await new Promise((r) => setTimeout(r, 20));
    expect(await readdir(warren.root)).not.toContain('closing');
    expect(await leftovers(warren.root)).toEqual([]);
  }, 60_000);

  it('ends hostile downloads with a typed error: a file grown without end, a huge sparse file, a FIFO', async () => {
    await mkdir(path.join(warren.root, 'hostile'), { recursive: true });
    const growing = path.join(warren.root, 'hostile/growing.log');
    await writeFile(growing, randomBytes(4 * MiB));
    let writing = true;
    const writer = (async () => {
      while (writing) await appendFile(growing, Buffer.alloc(256 * 1024, 1));
    })();
    try {
      expect(await codeOf(sandbox.files.downloadFile('hostile/growing.log', path.join(local, 'growing.log')))).toBe('CONFLICT');
    } finally {
      writing = false;
      await writer;
    }
    await rm(growing);
    expect(await leftovers(local)).toEqual([]);

    await writeFile(path.join(warren.root, 'hostile/sparse.bin'), '');
    await truncate(path.join(warren.root, 'hostile/sparse.bin'), 64 * 1024 * MiB);
    expect(await codeOf(sandbox.files.downloadFile('hostile/sparse.bin', path.join(local, 'sparse.bin'), { maxBytes: 8 * MiB }))).toBe('FILE_TOO_LARGE');
    await expect(readFile(path.join(local, 'sparse.bin'))).rejects.toThrow();
    await rm(path.join(warren.root, 'hostile/sparse.bin'));

    execFileSync('mkfifo', [path.join(warren.root, 'hostile/fifo')]);
    expect(await codeOf(sandbox.files.downloadFile('hostile/fifo', path.join(local, 'fifo')))).toBe('UNSUPPORTED_FILE_TYPE');
    await writeFile(path.join(warren.root, 'hostile/ok.txt'), 'ok');
    const folder = await sandbox.files.downloadTo('hostile', path.join(local, 'hostile'));
    expect(folder.skipped).toEqual([{ path: 'fifo', reason: 'not a regular file, folder or link' }]);
    expect(await readdir(path.join(local, 'hostile'))).toEqual(['ok.txt']);
  }, 60_000);

  it('warren cp streams a file past the frame limit and a folder both ways, with no progress output off a terminal', async () => {
    const env = { WARREN_URL: warren.url, WARREN_API_KEY: warren.apiKey };
    const folder = path.join(local, 'cp-up');
    await mkdir(path.join(folder, 'sub'), { recursive: true });
    const big = randomBytes(MAX_FRAME_BYTES + 5 * MiB);
    await writeFile(path.join(folder, 'sub/big.bin'), big);
    await writeFile(path.join(folder, 'a.txt'), 'alpha\n');
    const up = await runCli(['cp', folder, `${sandbox.id}:${warren.root}/cp`, '--json'], { env, timeoutMs: 120_000 });
    expect([up.code, up.stderr]).toEqual([0, '']);
    expect(JSON.parse(up.stdout)).toMatchObject({ kind: 'directory', files: 2, bytes: big.length + 6 });
    expect(await digests(path.join(warren.root, 'cp'))).toEqual(await digests(folder));

    const one = await runCli(['cp', path.join(folder, 'sub/big.bin'), `${sandbox.id}:${warren.root}/cp/`], { env, timeoutMs: 120_000 });
    expect([one.code, one.stderr]).toEqual([0, '']);
    expect(one.stdout).toBe(`${path.join(folder, 'sub/big.bin')} -> ${sandbox.id}:${warren.root}/cp/big.bin: ${big.length} bytes\n`);

    const down = path.join(local, 'cp-down');
    const back = await runCli(['cp', `${sandbox.id}:${warren.root}/cp`, down], { env, timeoutMs: 120_000 });
    expect([back.code, back.stderr]).toEqual([0, '']);
    expect(await digests(down)).toEqual(await digests(path.join(warren.root, 'cp')));
    const file = await runCli(['cp', `${sandbox.id}:${warren.root}/cp/big.bin`, `${local}/`], { env, timeoutMs: 120_000 });
    expect([file.code, file.stderr]).toEqual([0, '']);
    expect((await readFile(path.join(local, 'big.bin'))).equals(big)).toBe(true);
  }, 180_000);

  it('applies the policy and the grant to streamed data: read-only handles, suffixes, file size, approvals', async () => {
    const small = path.join(local, 'small.txt');
    await writeFile(small, 'x'.repeat(100));
    const reader = await sandbox.derive({ allowRead: [path.join(warren.root, 'ro')], readonly: true });
    try {
      expect(await codeOf(reader.files.uploadFrom(small, 'ro/small.txt'))).toMatch(/FORBIDDEN|PATH_NOT_WRITABLE/);
      await sandbox.files.write('ro/readable.txt', 'r');
      await reader.files.downloadFile('ro/readable.txt', path.join(local, 'readable.txt'));
      expect(await readFile(path.join(local, 'readable.txt'), 'utf8')).toBe('r');
    } finally {
      reader.close();
    }

    const strict = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: warren.root, suffixes: ['.txt'], maxFileBytes: 50 } });
    try {
      expect(await codeOf(strict.files.uploadFrom(small, 'strict/small.txt'))).toBe('FILE_TOO_LARGE');
      const bad = path.join(local, 'bad.sh');
      await writeFile(bad, 'x');
      expect(await codeOf(strict.files.uploadFrom(bad, 'strict/bad.sh'))).toBe('SUFFIX_NOT_ALLOWED');
      // The folder the upload made for itself went with the rest.
      await expect(readdir(path.join(warren.root, 'strict'))).rejects.toThrow('ENOENT');
    } finally {
      await strict.kill();
    }

    const asking = await Sandbox.create({
      baseUrl: warren.url,
      apiKey: warren.apiKey,
      policy: { paths: { data: { root: path.join(warren.root, 'approved'), mode: 'rw', writeApproval: true } } },
    });
    await mkdir(path.join(warren.root, 'approved'), { recursive: true });
    try {
      const asked: string[] = [];
      asking.onApproval = (request) => {
        asked.push(request.path);
        return !request.path.endsWith('no.txt');
      };
      const folder = path.join(local, 'approve');
      await mkdir(folder);
      await writeFile(path.join(folder, 'yes.txt'), 'y');
      await writeFile(path.join(folder, 'no.txt'), 'n');
      expect(await codeOf(asking.files.uploadFrom(folder, '/data/in'))).toBe('APPROVAL_DENIED');
      expect(asked).toEqual(['/data/in', '/data/in/no.txt']);
      expect(await readdir(path.join(warren.root, 'approved'))).toEqual([]);
    } finally {
      await asking.kill();
    }
  });
});

/** Yields `bytes` in pieces of `size`. */
async function* pieces(bytes: Buffer, size: number): AsyncGenerator<Buffer> {
  for (let i = 0; i < bytes.length; i += size) yield bytes.subarray(i, i + size);
}

/** Yields the first MiB, then aborts and waits: an upload cut off by its caller halfway. */
async function* slowly(bytes: Buffer, abort: AbortController): AsyncGenerator<Buffer> {
  yield bytes.subarray(0, 2 * 1024 * 1024);
  yield bytes.subarray(2 * 1024 * 1024, 4 * 1024 * 1024);
  await new Promise((resolve) => setTimeout(resolve, 200));
  abort.abort();
  await new Promise((resolve) => setTimeout(resolve, 200));
  yield bytes.subarray(4 * 1024 * 1024);
}

describe('an upload abandoned while a piece is in progress', () => {
  it('undoes what that piece made after it stops, not before (an abort while an approval is pending)', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'warren-race-'));
    try {
      await mkdir(path.join(dir, 'in'));
      await writeFile(path.join(dir, 'in/a.txt'), 'old');
      const handlers = createHandlers({ paths: { data: { root: dir, mode: 'rw', writeApproval: true, readApproval: false } } }, dir);
      const connection = new AbortController();
      let release: (allow: boolean) => void = () => undefined;
      let asked: () => void = () => undefined;
      const approvalAsked = new Promise<void>((resolve) => (asked = resolve));
      const ctx: CallContext = {
        signal: new AbortController().signal,
        connection: connection.signal,
        emit: () => undefined,
        congested: () => false,
        drained: async () => undefined,
        requestApproval: () =>
          new Promise<boolean>((resolve) => {
            release = resolve;
            asked();
          }),
      };
      const { result } = await handlers['fs.uploadOpen']({ path: '/data/in', overwrite: true }, ctx);
      const bytes = archive(file('a.txt', randomBytes(512 * 1024)), file('b.txt', 'b'));
      const piece = handlers['fs.uploadChunk']({ uploadId: result.uploadId, offset: 0 }, { ...ctx, payload: bytes }).then(
        () => 'OK',
        (e: { code: string }) => e.code,
      );
      expect(await Promise.race([approvalAsked.then(() => 'asked'), piece])).toBe('asked');
      const aborted = handlers['fs.uploadAbort']({ uploadId: result.uploadId }, ctx);
      release(true);
      expect(await aborted).toEqual({ result: { aborted: true } });
      expect(await piece).toBe('CANCELLED');
      expect(await readdir(path.join(dir, 'in'))).toEqual(['a.txt']);
      expect(await readFile(path.join(dir, 'in/a.txt'), 'utf8')).toBe('old');
      await expect(handlers['fs.uploadCommit']({ uploadId: result.uploadId }, ctx)).rejects.toMatchObject({ code: 'CANCELLED' });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 20_000);
});
