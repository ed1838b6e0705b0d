import { describe, expect, it } from '@jest/globals';
import type { Channel } from '../src/channel.js';
import { EventQueue, QUEUE_HIGH_WATER_BYTES, withOutput } from '../src/event-queue.js';

/** Counts pause/resume calls; the queue needs nothing else of its channel. */
function fakeChannel(): Channel & { paused: number; resumed: number } {
  const channel = {
    paused: 0,
    resumed: 0,
    call: () => Promise.reject(new Error('not used')),
    pauseReading: () => void channel.paused++,
    resumeReading: () => void channel.resumed++,
  };
  return channel;
}

describe('EventQueue', () => {
  it('stops reading the connection above the high-water mark and reads again once drained', async () => {
    const channel = fakeChannel();
    const queue = new EventQueue<number>(channel, () => undefined);
    const chunk = 1024 * 1024;
    const count = QUEUE_HIGH_WATER_BYTES / chunk + 2;
    for (let i = 0; i < count - 1; i++) queue.push(i, chunk);
    queue.push(count - 1, 1);
    expect(channel.paused).toBe(1);
    for (let i = 0; i < count - 1; i++) expect((await queue.next()).value).toBe(i);
    expect(channel.resumed).toBe(1);
    queue.end();
    expect((await queue.next()).value).toBe(count - 1);
    expect((await queue.next()).done).toBe(true);
  });

  it('tells the producer when the consumer leaves early, and unpauses', async () => {
    const channel = fakeChannel();
    let abandoned = 0;
    const queue = new EventQueue<string>(channel, () => abandoned++);
    queue.push('big', QUEUE_HIGH_WATER_BYTES + 1);
    for await (const item of queue) {
      expect(item).toBe('big');
      break;
    }
    expect(abandoned).toBe(1);
    expect([channel.paused, channel.resumed]).toEqual([1, 1]);
  });

  it('hands a failure to the consumer after what was queued before it', async () => {
    const queue = new EventQueue<number>(fakeChannel(), () => undefined);
    queue.push(1);
    queue.fail(new Error('boom'));
    expect((await queue.next()).value).toBe(1);
    await expect(queue.next()).rejects.toThrow('boom');
  });
});

describe('withOutput', () => {
  it('puts stdout and stderr back from the payload and drops the layout', () => {
    const result = { exitCode: 0, stdout: '', stderr: '', outputPayload: { stdout: 6, stderr: 3 } };
    expect(withOutput(result, Buffer.from('héllo' + 'err'))).toEqual({ exitCode: 0, stdout: 'héllo', stderr: 'err' });
    expect(withOutput({ stdout: 'as is', stderr: '' }, undefined)).toEqual({ stdout: 'as is', stderr: '' });
  });
});
