import { describe, expect, it } from '@jest/globals';
import { CodedError } from '@warren/protocol';
import type { CallContext } from '../src/dispatch.js';
import { DEFAULT_POLICY } from '../src/policy.js';
import { importPty, ptyHandlers } from '../src/services/pty.js';

function context(): CallContext {
  return { signal: new AbortController().signal, emit: () => undefined, congested: () => false, drained: async () => undefined };
}

describe('pty where node-pty cannot load', () => {
  it('answers PTY_UNAVAILABLE with the reason and what still works', async () => {
    const failing = () => importPty(() => Promise.reject(new Error("Cannot find module '@lydell/node-pty'\nRequire stack: ...")));
    await expect(failing()).rejects.toMatchObject({ code: 'PTY_UNAVAILABLE' });
    const handlers = ptyHandlers({ policy: DEFAULT_POLICY, home: '/tmp', load: failing });
    const err = await handlers['pty.open']({ cols: 80, rows: 24 }, context()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CodedError);
    expect(err).toMatchObject({ code: 'PTY_UNAVAILABLE' });
    expect((err as Error).message).toBe(
      "The terminal library (node-pty) could not load in this sandbox: Cannot find module '@lydell/node-pty'. Commands without a terminal still work.",
    );
  });

  it('names a terminal handle that is not open', async () => {
    const handlers = ptyHandlers({ policy: DEFAULT_POLICY, home: '/tmp' });
    await expect(handlers['pty.write']({ handle: 'nope' }, context())).rejects.toMatchObject({ code: 'NOT_FOUND' });
    await expect(handlers['pty.resize']({ handle: 'nope', cols: 1, rows: 1 }, context())).rejects.toMatchObject({ code: 'NOT_FOUND' });
  });
});
