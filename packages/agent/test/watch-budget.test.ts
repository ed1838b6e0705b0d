import { describe, expect, it } from '@jest/globals';
import { CodedError } from '@warren/protocol';
import { DEFAULT_WATCH_QUOTA, hostWatchQuota, WatchBudget } from '../src/services/watch-budget.js';

/** What `act` throws, or undefined. */
function refusal(act: () => void): unknown {
  try {
    act();
  } catch (err) {
    return err;
  }
  return undefined;
}

describe('the watch budget of a sandbox', () => {
  it('gives derived handles half of the watches together, however many they are, and the owner the rest', () => {
    const budget = new WatchBudget({ watches: 8, folders: 100 });
    const narrow = [budget.account(true), budget.account(true)];
    const owner = budget.account(false);
    for (let i = 0; i < 4; i++) narrow[i % 2]!.openWatch();
    expect(refusal(() => narrow[0]!.openWatch())).toMatchObject({ code: 'RESOURCE_EXHAUSTED', details: { limit: 4, derived: true } });
    for (let i = 0; i < 4; i++) owner.openWatch();
    expect(refusal(() => owner.openWatch())).toMatchObject({ code: 'RESOURCE_EXHAUSTED', details: { limit: 8 } });
    narrow[1]!.closeWatch();
    // A slot a derived handle gave back is the sandbox's again: the owner may take it.
    owner.openWatch();
    expect(() => narrow[1]!.openWatch()).toThrow(CodedError);
    expect(budget.usage()).toEqual({ all: { watches: 8, folders: 0 }, derived: { watches: 3, folders: 0 } });
  });

  it('splits folders the same way, and a derived handle that spent its share leaves the owner its own', () => {
    const budget = new WatchBudget({ watches: 8, folders: 100 });
    const narrow = budget.account(true);
    const owner = budget.account(false);
    let taken = 0;
    while (narrow.takeFolder()) taken++;
    expect(taken).toBe(50);
    expect(narrow.foldersSpent('pub').message).toMatch(/derived handles may watch 50 of this sandbox's 100 folders/);
    while (owner.takeFolder()) taken++;
    expect(taken).toBe(100);
    narrow.releaseFolders(10);
    expect(budget.usage().derived.folders).toBe(40);
    expect(owner.takeFolder()).toBe(true);
  });

  it("takes at most a sixteenth of the host's inotify watches by default", () => {
    expect(hostWatchQuota(() => '192540\n')).toEqual(DEFAULT_WATCH_QUOTA);
    expect(hostWatchQuota(() => '8192\n')).toEqual({ watches: 64, folders: 512 });
    expect(hostWatchQuota(() => 'nonsense')).toEqual(DEFAULT_WATCH_QUOTA);
    expect(
      hostWatchQuota(() => {
        throw new Error('no /proc');
      }),
    ).toEqual(DEFAULT_WATCH_QUOTA);
  });

  it('refuses a quota too small to split', () => {
    expect(() => new WatchBudget({ watches: 1, folders: 100 })).toThrow(/at least 2/);
  });
});
