import { describe, expect, it } from '@jest/globals';
import { UsageHistory } from '../src/usage-history.js';

const at = (seconds: number) => new Date(Date.UTC(2026, 10, 26, 0, 0, seconds)).toISOString();

describe('the short history of a sandbox’s use', () => {
  it('gives each sample after the first its CPU share since the one before, as a percentage of one core', () => {
    const history = new UsageHistory(10);
    const first = history.add({ sandboxId: 'a', time: at(0), cpuSeconds: 10, memoryBytes: 1, pids: 1 });
    expect(first.cpuPercent).toBeUndefined();
    expect(history.add({ sandboxId: 'a', time: at(2), cpuSeconds: 11, memoryBytes: 1, pids: 1 }).cpuPercent).toBe(50);
    expect(history.add({ sandboxId: 'a', time: at(3), cpuSeconds: 13, memoryBytes: 1, pids: 1 }).cpuPercent).toBe(200);
    // A counter that went backwards (a restarted container) is never a negative share.
    expect(history.add({ sandboxId: 'a', time: at(4), cpuSeconds: 0, memoryBytes: 1, pids: 1 }).cpuPercent).toBe(0);
    expect(history.list('a').map((s) => s.time)).toEqual([at(0), at(2), at(3), at(4)]);
  });

  it('keeps at most its size per sandbox, oldest dropped, and forgets a sandbox that is gone', () => {
    const history = new UsageHistory(3);
    for (let i = 0; i < 10; i++) history.add({ sandboxId: 'a', time: at(i), cpuSeconds: i, memoryBytes: 1, pids: 1 });
    history.add({ sandboxId: 'b', time: at(0), cpuSeconds: 0, memoryBytes: 1, pids: 1 });
    expect(history.list('a').map((s) => s.time)).toEqual([at(7), at(8), at(9)]);
    expect(history.latest().map((s) => [s.sandboxId, s.time])).toEqual([
      ['a', at(9)],
      ['b', at(0)],
    ]);
    history.forget('a');
    expect(history.list('a')).toEqual([]);
    expect(history.latest().map((s) => s.sandboxId)).toEqual(['b']);
  });
});
