/**
 * Where the controller's time comes from: injected so that expiry, the reaper and the crash-loop
 * window are unit-tested without sleeping.
 *
 * @example
 * const clock = systemClock;
 * if (record.expiresAt.getTime() <= clock.now()) await kill(record.id);
 */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Resolves after `ms`; never keeps the process alive by itself. */
  sleep(ms: number): Promise<void>;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms).unref()),
};
