import { describe, expect, it } from '@jest/globals';
import { Writable } from 'node:stream';
import { BATCH_FRAME_MAX_BYTES, WriteBatch } from '../src/index.js';

/** A socket stand-in that records each write it is handed: one entry per system call a socket would make. */
function recordingSocket() {
  const writes: string[][] = [];
  const socket = new Writable({
    write(chunk: Buffer, _encoding, done) {
      writes.push([chunk.toString()]);
      done();
    },
    writev(chunks, done) {
      writes.push(chunks.map((c) => (c.chunk as Buffer).toString()));
      done();
    },
  });
  return { socket, writes };
}

const turnEnd = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('WriteBatch: the small frames of one turn leave in two writes, the first at once', () => {
  it('the first frame of a turn goes at once; the rest go out together, in order, once the turn ends', async () => {
    const { socket, writes } = recordingSocket();
    const batch = new WriteBatch({ _socket: socket });
    for (const frame of ['a', 'b', 'c', 'd']) {
      batch.add(frame.length);
      socket.write(frame);
    }
    expect(writes).toEqual([['a']]);
    await turnEnd();
    expect(writes).toEqual([['a'], ['b', 'c', 'd']]);
    // A lone frame of a later turn never waits.
    batch.add(1);
    socket.write('e');
    expect(writes).toEqual([['a'], ['b', 'c', 'd'], ['e']]);
    await turnEnd();
    expect(writes).toEqual([['a'], ['b', 'c', 'd'], ['e']]);
    expect(socket.writableCorked).toBe(0);
  });

  it('a large frame lets out what waits before it and goes at once: order kept, large transfers unbatched', async () => {
    const { socket, writes } = recordingSocket();
    const batch = new WriteBatch({ _socket: socket });
    const large = 'L'.repeat(BATCH_FRAME_MAX_BYTES + 1);
    batch.add(1);
    socket.write('a');
    batch.add(large.length);
    socket.write(large);
    expect(writes).toEqual([['a'], [large]]);
    batch.add(1);
    socket.write('b');
    await turnEnd();
    expect(writes).toEqual([['a'], [large], ['b']]);
  });

  it('a WebSocket without a corkable socket (not open yet, or another kind) is left as it is', async () => {
    for (const ws of [{}, { _socket: null }, { _socket: { write() {} } }]) {
      const odd = new WriteBatch(ws);
      expect(() => [odd.add(1), odd.add(1)]).not.toThrow();
    }
    const { socket, writes } = recordingSocket();
    const batch = new WriteBatch({ _socket: socket });
    batch.add(1);
    socket.write('a');
    batch.flush();
    batch.flush();
    expect(writes).toEqual([['a']]);
    await turnEnd();
    expect(socket.writableCorked).toBe(0);
  });
});
