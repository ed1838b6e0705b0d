import { describe, expect, it } from '@jest/globals';
import { MAX_REPEATS, ReconnectingChannel, type Connection } from '../src/index.js';
import { makeError } from '../src/errors.js';

/**
 * A stand-in connection whose every call drops it (as a request that kills the daemon would):
 * the call fails with CONNECTION_CLOSED and the connection is closed.
 */
function droppingConnection(sent: string[]): Connection {
  const closers: (() => void)[] = [];
  let open = true;
  const fake = {
    get isOpen() {
      return open;
    },
    onApproval: undefined,
    onClose: (listener: () => void) => void closers.push(listener),
    call: async (method: string) => {
      sent.push(method);
      open = false;
      for (const close of closers) close();
      throw makeError('CONNECTION_CLOSED', 'the connection dropped');
    },
    close: () => undefined,
    pauseReading: () => undefined,
    resumeReading: () => undefined,
  };
  return fake as unknown as Connection;
}

describe('repeats after a dropped connection are bounded', () => {
  it(`sends an idempotent call at most ${MAX_REPEATS + 1} times when every send drops the connection, then fails typed`, async () => {
    const sent: string[] = [];
    const channel = new ReconnectingChannel(async () => droppingConnection(sent), droppingConnection(sent), { baseDelayMs: 1, maxDelayMs: 2 });
    await expect(channel.call('fs.download', { path: '.' }, { timeoutMs: 10_000 })).rejects.toMatchObject({
      code: 'CONNECTION_CLOSED',
      message: expect.stringContaining('not sent again'),
    });
    expect(sent).toEqual(Array(MAX_REPEATS + 1).fill('fs.download'));
    channel.close();
  });

  it('never repeats a call that is not idempotent', async () => {
    const sent: string[] = [];
    const channel = new ReconnectingChannel(async () => droppingConnection(sent), droppingConnection(sent), { baseDelayMs: 1, maxDelayMs: 2 });
    await expect(channel.call('process.exec', { cmd: 'true' }, { timeoutMs: 10_000 })).rejects.toMatchObject({
      code: 'CONNECTION_CLOSED',
      message: expect.stringContaining('may or may not have run'),
    });
    expect(sent).toEqual(['process.exec']);
    channel.close();
  });
});
