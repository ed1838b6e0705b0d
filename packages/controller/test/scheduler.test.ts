import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { Scheduler } from '../src/scheduler.js';

/** A logger that keeps every error line it is given. */
function errorLog() {
  const lines: { fields: unknown; event: string }[] = [];
  return { lines, logger: { error: (fields: unknown, event: string) => void lines.push({ fields, event }) } };
}

/** Lets the promise continuations of a round run. */
const settle = async () => {
  for (let i = 0; i < 5; i++) await Promise.resolve();
};

beforeEach(() => {
  jest.useFakeTimers();
});

afterEach(() => {
  jest.useRealTimers();
});

describe('Scheduler', () => {
  it('runs a job once per interval, the first round after one interval', async () => {
    const { logger } = errorLog();
    const scheduler = new Scheduler(logger as never);
    let rounds = 0;
    scheduler.every('count', 100, () => rounds++);
    jest.advanceTimersByTime(99);
    expect(rounds).toBe(0);
    jest.advanceTimersByTime(1);
    await settle();
    for (let i = 0; i < 2; i++) {
      jest.advanceTimersByTime(100);
      await settle();
    }
    expect(rounds).toBe(3);
    scheduler.close();
  });

  it('skips a tick while the round before is still running', async () => {
    const { logger } = errorLog();
    const scheduler = new Scheduler(logger as never);
    let started = 0;
    let finish: () => void = () => undefined;
    scheduler.every('slow', 100, () => {
      started++;
      return new Promise<void>((resolve) => (finish = resolve));
    });
    jest.advanceTimersByTime(100);
    await settle();
    jest.advanceTimersByTime(300);
    await settle();
    expect(started).toBe(1);
    finish();
    await settle();
    jest.advanceTimersByTime(100);
    await settle();
    expect(started).toBe(2);
    scheduler.close();
  });

  it('logs a failed round as <name>.failed and keeps the job running', async () => {
    const { lines, logger } = errorLog();
    const scheduler = new Scheduler(logger as never);
    let rounds = 0;
    scheduler.every('reaper', 100, async () => {
      rounds++;
      throw new Error('engine gone');
    });
    jest.advanceTimersByTime(100);
    await settle();
    jest.advanceTimersByTime(100);
    await settle();
    expect(rounds).toBe(2);
    expect(lines).toEqual([
      { fields: { error: 'Error: engine gone' }, event: 'reaper.failed' },
      { fields: { error: 'Error: engine gone' }, event: 'reaper.failed' },
    ]);
    scheduler.close();
  });

  it('stops every job on close and schedules nothing after it', async () => {
    const { logger } = errorLog();
    const scheduler = new Scheduler(logger as never);
    let rounds = 0;
    scheduler.every('a', 100, () => rounds++);
    scheduler.every('b', 50, () => rounds++);
    expect(scheduler.names).toEqual(['a', 'b']);
    scheduler.close();
    scheduler.every('c', 10, () => rounds++);
    jest.advanceTimersByTime(1000);
    await settle();
    expect(rounds).toBe(0);
    expect(scheduler.names).toEqual([]);
  });

  it('refuses a second job of the same name', () => {
    const { logger } = errorLog();
    const scheduler = new Scheduler(logger as never);
    scheduler.every('reaper', 100, () => undefined);
    expect(() => scheduler.every('reaper', 100, () => undefined)).toThrow("A job named 'reaper' is already scheduled.");
    scheduler.close();
  });
});
