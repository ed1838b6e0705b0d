import { describe, expect, it } from '@jest/globals';
import { IdleCollector } from '../src/idle-gc.js';

/** A timer that fires when the test says so, and counts its refreshes. */
function manualTimer() {
  const state = { fn: undefined as (() => void) | undefined, ms: 0, refreshes: 0, created: 0 };
  return {
    state,
    setTimer: (fn: () => void, ms: number) => {
      state.fn = fn;
      state.ms = ms;
      state.created++;
      return { refresh: () => state.refreshes++, unref: () => undefined };
    },
    fire: () => state.fn?.(),
  };
}

describe('the idle collector', () => {
  it('collects once after a quiet period, never while frames keep arriving, and once again after the next burst', () => {
    const timer = manualTimer();
    let collections = 0;
    const idle = new IdleCollector({ idleMs: 1500, collect: () => collections++, setTimer: timer.setTimer });
    expect(idle.enabled).toBe(true);
    idle.activity();
    idle.activity();
    idle.activity();
    // One timer for the whole burst, pushed back by each frame.
    expect(timer.state).toMatchObject({ created: 1, refreshes: 2, ms: 1500 });
    timer.fire();
    expect(collections).toBe(1);
    // A quiet daemon whose timer fires again does not collect again.
    timer.fire();
    expect(collections).toBe(1);
    idle.activity();
    expect(timer.state.created).toBe(1);
    timer.fire();
    expect(collections).toBe(2);
  });

  it('does nothing where Node does not expose gc', () => {
    const timer = manualTimer();
    const idle = new IdleCollector({ setTimer: timer.setTimer });
    expect(idle.enabled).toBe(false);
    idle.activity();
    expect(timer.state.created).toBe(0);
  });
});
