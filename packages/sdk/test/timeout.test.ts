import { describe, expect, it } from '@jest/globals';
import { InvalidParamsError } from '../src/index.js';
import { sandboxTimeoutSeconds } from '../src/timeout.js';

describe('sandboxTimeoutSeconds: setTimeout takes milliseconds, as E2B does', () => {
  it('turns milliseconds into whole seconds, rounding up as E2B does', () => {
    expect(sandboxTimeoutSeconds(300_000)).toBe(300);
    expect(sandboxTimeoutSeconds(1000)).toBe(1);
    expect(sandboxTimeoutSeconds(1001)).toBe(2);
    expect(sandboxTimeoutSeconds(30 * 24 * 3600 * 1000)).toBe(30 * 24 * 3600);
  });

  it.each([600, 1, 0, 999, -5_000, Number.NaN, Number.POSITIVE_INFINITY])(
    'refuses %p, which reads as seconds or is no time at all, naming the fix',
    (value) => {
      let thrown: unknown;
      try {
        sandboxTimeoutSeconds(value);
      } catch (err) {
        thrown = err;
      }
      expect(thrown).toBeInstanceOf(InvalidParamsError);
      expect((thrown as Error).message).toMatch(/milliseconds/);
      expect((thrown as Error).message).toContain('600_000');
    },
  );

  it('refuses a value that is not a number (a string from a config file)', () => {
    expect(() => sandboxTimeoutSeconds('60000' as unknown as number)).toThrow(InvalidParamsError);
  });
});
