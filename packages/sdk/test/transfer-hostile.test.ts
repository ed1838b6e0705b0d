import { describe, expect, it } from '@jest/globals';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { MethodName, ParsedEvent } from '@warren/protocol';
import type { Channel } from '../src/channel.js';
import type { RawCallOptions } from '../src/connection.js';
import { makeError, WarrenError } from '../src/errors.js';
import { Files } from '../src/files.js';
import { archive, file, header } from '../../../test/support/tar-bytes.js';

/**
 * A channel whose daemon is hostile: `fs.downloadStream` answers with the pieces and result the
 * test scripts, as a compromised daemon could. Records whether the call was cancelled.
 */
function hostileDaemon(script: { pieces: Buffer[]; offsets?: number[]; bytes?: number; endless?: boolean }) {
  const seen = { cancelled: false, sent: 0 };
  const channel: Channel = {
    call: (async (method: MethodName, _params: unknown, call: RawCallOptions = {}) => {
      if (method !== 'fs.downloadStream') throw new Error(`unexpected ${method}`);
      const emit = (event: string, data: unknown, payload?: Buffer) => call.onEvent?.({ method, event, data } as ParsedEvent, payload);
      let offset = 0;
      emit('start', { totalBytes: 1 });
      for (let i = 0; script.endless || i < script.pieces.length; i++) {
        if (call.signal?.aborted) {
          seen.cancelled = true;
          throw makeError('CANCELLED', 'cancelled');
        }
        const piece = script.pieces[i % script.pieces.length]!;
        emit('data', { offset: script.offsets?.[i] ?? offset }, piece);
        offset += piece.length;
        seen.sent += piece.length;
        await new Promise((resolve) => setImmediate(resolve));
      }
      return { result: { path: 'x', files: 1, directories: 0, symlinks: 0, bytes: script.bytes ?? offset, skipped: [] } };
    }) as Channel['call'],
    pauseReading: () => undefined,
    resumeReading: () => undefined,
  };
  return { files: new Files(() => channel), seen };
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return 'OK';
  } catch (err) {
    if (err instanceof WarrenError) return err.code;
    throw err;
  }
}

async function inTemp(work: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'warren-hostile-'));
  try {
    await work(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe('a streamed download checks what the daemon sends (the daemon is on the sandbox side)', () => {
  it.each([
    ['a name that leaves the folder', archive(file('ok.txt', 'fine'), file('../escape.txt', 'x')), 'INVALID_PARAMS'],
    ['a file below a link of the same archive', archive(header({ name: 'l', flag: '2', linkname: 'sub' }), file('l/evil', 'x')), 'INVALID_PARAMS'],
    ['a link that leaves', archive(header({ name: 'l', flag: '2', linkname: '../../outside' })), 'INVALID_PARAMS'],
    ['a device', archive(header({ name: 'dev', flag: '3' })), 'INVALID_PARAMS'],
    ['an archive cut short', archive(file('a.bin', Buffer.alloc(4096, 1))).subarray(0, 2048), 'INVALID_PARAMS'],
  ])('%s is refused and leaves nothing behind', async (_label, bytes, code) => {
    await inTemp(async (dir) => {
      const { files } = hostileDaemon({ pieces: [bytes.subarray(0, 700), bytes.subarray(700)] });
      expect(await codeOf(files.downloadTo('x', path.join(dir, 'out')))).toBe(code);
      expect(await readdir(dir)).toEqual([]);
    });
  });

  it('refuses pieces out of order and a result that disagrees with what arrived', async () => {
    await inTemp(async (dir) => {
      const bytes = archive(file('a.txt', 'a'));
      const skipped = hostileDaemon({ pieces: [bytes.subarray(0, 512), bytes.subarray(512)], offsets: [0, 1024] });
      expect(await codeOf(skipped.files.downloadTo('x', path.join(dir, 'a')))).toBe('INVALID_FRAME');
      const lying = hostileDaemon({ pieces: [bytes], bytes: bytes.length + 1 });
      expect(await codeOf(lying.files.downloadFile('x', path.join(dir, 'b.txt')))).toBe('INVALID_FRAME');
      expect(await readdir(dir)).toEqual([]);
    });
  });

  it('stops an endless archive at maxBytes and cancels the call', async () => {
    await inTemp(async (dir) => {
      // A file header that claims little, then data and headers without end.
      const endless = hostileDaemon({ pieces: [Buffer.alloc(64 * 1024)], endless: true });
      expect(await codeOf(endless.files.downloadTo('x', path.join(dir, 'e'), { maxBytes: 1024 * 1024 }))).toMatch(/FILE_TOO_LARGE|INVALID_PARAMS/);
      expect(endless.seen.sent).toBeLessThan(2 * 1024 * 1024);
      expect(endless.seen.cancelled).toBe(true);
      // Without a cap, zero padding past the end blocks is still refused once it passes 1 MiB.
      const zeros = hostileDaemon({ pieces: [Buffer.alloc(64 * 1024)], endless: true });
      expect(await codeOf(zeros.files.downloadTo('x', path.join(dir, 'z')))).toBe('INVALID_PARAMS');
      expect(zeros.seen.sent).toBeLessThan(2 * 1024 * 1024);
      const huge = hostileDaemon({ pieces: [header({ name: 'big', size: 2 ** 40 })], endless: false });
      expect(await codeOf(huge.files.downloadFile('x', path.join(dir, 'big'), { maxBytes: 1024 }))).toBe('FILE_TOO_LARGE');
      expect(await readdir(dir)).toEqual([]);
    });
  });
});

describe('an upload the daemon refuses while the SDK still packs', () => {
  it('reports the refusal, never the packer tripping over the archive it ended (every time)', async () => {
    await inTemp(async (dir) => {
      const folder = path.join(dir, 'many');
      await mkdir(folder);
      for (let i = 0; i < 40; i++) await writeFile(path.join(folder, `f${String(i).padStart(2, '0')}.bin`), Buffer.alloc(256 * 1024, i));
      const channel: Channel = {
        call: (async (method: MethodName): Promise<{ result: unknown }> => {
          if (method === 'fs.uploadOpen') return { result: { uploadId: 'u1' } };
          // The daemon's disk fills at the first piece, as a sandbox's quota does.
          if (method === 'fs.uploadChunk') throw makeError('RESOURCE_EXHAUSTED', 'No space left on the sandbox disk.');
          // Undoing takes a round trip, in which the packer runs on.
          if (method === 'fs.uploadAbort') return await new Promise((resolve) => setTimeout(() => resolve({ result: {} }), 20));
          throw new Error(`unexpected ${method}`);
        }) as unknown as Channel['call'],
        pauseReading: () => undefined,
        resumeReading: () => undefined,
      };
      const files = new Files(() => channel);
      for (let round = 0; round < 20; round++) expect([round, await codeOf(files.uploadFrom(folder, 'in'))]).toEqual([round, 'RESOURCE_EXHAUSTED']);
    });
  });
});
