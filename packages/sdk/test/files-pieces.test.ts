import { randomBytes } from 'node:crypto';
import { describe, expect, it } from '@jest/globals';
import type { MethodName } from '@warren/protocol';
import type { Channel } from '../src/channel.js';
import type { RawCallOptions } from '../src/connection.js';
import { makeError, WarrenError } from '../src/errors.js';
import { Files, WRITE_PIECE_BYTES, WRITE_PIECES_IN_FLIGHT } from '../src/files.js';

type Params = { path?: string; from?: string; to?: string; offset?: number; overwrite?: boolean };

/**
 * A channel over an in-memory disk that answers the calls a large write makes (stat, write,
 * write at an offset, move, delete) after a delay chosen per piece, so pieces finish out of order.
 * Honours abort signals as the real connection does.
 */
function fakeDisk(options: { delayMs?: (offset: number) => number; failAt?: number } = {}) {
  const files = new Map<string, Buffer>();
  const log: string[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const answer = (method: MethodName, p: Params, payload: Buffer): unknown => {
    const path = p.path ?? '';
    switch (method) {
      case 'fs.stat': {
        const file = files.get(path);
        if (!file) throw makeError('NOT_FOUND', `No such file: '${path}'.`);
        return { path, type: 'file', size: file.length, mode: 0o100640, mtimeMs: 0, nlink: 1, readable: true, writable: true };
      }
      case 'fs.write': {
        if (p.offset === undefined) {
          files.set(path, Buffer.from(payload));
          return { path, bytesWritten: payload.length, created: true };
        }
        if (p.offset === options.failAt) throw makeError('RESOURCE_EXHAUSTED', `No space left to write '${path}'.`);
        const file = files.get(path);
        if (!file) throw makeError('NOT_FOUND', `No such file: '${path}'.`);
        const grown = Buffer.alloc(Math.max(file.length, p.offset + payload.length));
        file.copy(grown);
        payload.copy(grown, p.offset);
        files.set(path, grown);
        return { path, bytesWritten: payload.length, created: false };
      }
      case 'fs.move': {
        const file = files.get(p.from!);
        if (!file) throw makeError('NOT_FOUND', `No such file: '${p.from}'.`);
        if (files.has(p.to!) && !p.overwrite) throw makeError('ALREADY_EXISTS', `'${p.to}' already exists.`);
        files.delete(p.from!);
        files.set(p.to!, file);
        return { from: p.from, to: p.to, type: 'file' };
      }
      case 'fs.delete':
        if (!files.delete(path)) throw makeError('NOT_FOUND', `No such file: '${path}'.`);
        return { path, type: 'file' };
      default:
        throw new Error(`unexpected ${method}`);
    }
  };
  const channel: Channel = {
    call: (async (method: MethodName, params: Params, call: RawCallOptions = {}) => {
      if (call.signal?.aborted) throw makeError('CANCELLED', `${method} was cancelled before it was sent.`);
      const piece = method === 'fs.write' && params.offset !== undefined;
      log.push(piece ? `piece ${params.offset} sent` : `${method} ${params.path ?? params.from}`);
      if (piece) maxInFlight = Math.max(maxInFlight, ++inFlight);
      try {
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(resolve, piece ? (options.delayMs?.(params.offset!) ?? 1) : 0);
          call.signal?.addEventListener('abort', () => {
            clearTimeout(timer);
            reject(makeError('CANCELLED', `${method} was cancelled by its AbortSignal.`));
          });
        });
        const result = answer(method, params, Buffer.from(call.payload ?? new Uint8Array(0)));
        if (piece) log.push(`piece ${params.offset} done`);
        return { result };
      } finally {
        if (piece) inFlight--;
      }
    }) as Channel['call'],
    pauseReading: () => undefined,
    resumeReading: () => undefined,
  };
  return {
    files,
    log,
    channel,
    get maxInFlight() {
      return maxInFlight;
    },
  };
}

const content = randomBytes(5 * WRITE_PIECE_BYTES + 123);
const done = (log: string[]) => log.filter((l) => l.endsWith('done')).map((l) => Number(l.split(' ')[1]));

describe('files.write above one frame', () => {
  it(`sends ${WRITE_PIECES_IN_FLIGHT} pieces at a time to their offsets; they finish in any order and the file is byte-identical`, async () => {
    // Every third piece is slow, so later pieces finish before it.
    const disk = fakeDisk({ delayMs: (offset) => ((offset / WRITE_PIECE_BYTES) % 3 === 0 ? 40 : 2) });
    disk.files.set('out/big.bin', Buffer.from('old'));
    const result = await new Files(() => disk.channel).write('out/big.bin', content, { hash: true });
    expect(result).toMatchObject({ path: 'out/big.bin', bytesWritten: content.length, created: false });
    expect(disk.files.get('out/big.bin')!.equals(content)).toBe(true);
    expect([...disk.files.keys()]).toEqual(['out/big.bin']);
    expect(disk.maxInFlight).toBe(WRITE_PIECES_IN_FLIGHT);
    const finished = done(disk.log);
    expect([...finished].sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5].map((i) => i * WRITE_PIECE_BYTES));
    expect(finished).not.toEqual([...finished].sort((a, b) => a - b));
    // The temporary file is made by a whole-file write before any piece goes out, and moved last.
    expect(disk.log[0]).toBe('fs.stat out/big.bin');
    expect(disk.log[1]).toMatch(/^fs\.write out\/\.warren-upload-[0-9a-f]{12}-big\.bin$/);
    expect(disk.log.at(-1)).toMatch(/^fs\.move out\/\.warren-upload-/);
  });

  it('a piece that fails stops the others, removes the temporary file, leaves the old file as it was, and throws its own error', async () => {
    const disk = fakeDisk({ delayMs: () => 5, failAt: 2 * WRITE_PIECE_BYTES });
    disk.files.set('big.bin', Buffer.from('the old content'));
    const err = (await new Files(() => disk.channel).write('big.bin', content).catch((e: unknown) => e)) as WarrenError;
    expect(err.code).toBe('RESOURCE_EXHAUSTED');
    expect([...disk.files.entries()]).toEqual([['big.bin', Buffer.from('the old content')]]);
    // No piece goes out after the failure.
    const sent = disk.log.filter((l) => l.endsWith('sent')).length;
    expect(sent).toBeLessThan(6);
    expect(disk.log.at(-1)).toMatch(/^fs\.delete \.warren-upload-/);
  });

  it('an abort mid-way cancels the pieces on their way, removes the temporary file and leaves the old file as it was', async () => {
    // The first two pieces finish at once and the rest would take a minute, so the abort always lands mid-way, however loaded the machine.
    const disk = fakeDisk({ delayMs: (offset) => (offset < 2 * WRITE_PIECE_BYTES ? 1 : 60_000) });
    disk.files.set('big.bin', Buffer.from('the old content'));
    const abort = new AbortController();
    const writing = new Files(() => disk.channel).write('big.bin', content, { signal: abort.signal });
    const timer = setInterval(() => {
      if (done(disk.log).length >= 2) abort.abort();
    }, 1);
    const err = (await writing.catch((e: unknown) => e)) as WarrenError;
    clearInterval(timer);
    expect(err.code).toBe('CANCELLED');
    expect([...disk.files.entries()]).toEqual([['big.bin', Buffer.from('the old content')]]);
    expect(done(disk.log).length).toBeLessThan(6);
  });
});
