import { describe, expect, it } from '@jest/globals';
import { METHODS, parseResult, tolerant, type MethodName } from '../src/index.js';

describe('answers are read tolerantly', () => {
  it('a field a newer server added is dropped, at any depth, instead of failing the call', () => {
    const listed = parseResult('fs.list', {
      path: '.',
      entries: [{ path: 'a', type: 'file', size: 1, mtimeMs: 0, addedLater: 'x' }],
      truncated: false,
      sortedBy: 'name',
    });
    expect(listed).toEqual({ path: '.', entries: [{ path: 'a', type: 'file', size: 1, mtimeMs: 0 }], truncated: false });
    expect(parseResult('system.info', { agentVersion: '9', protocolVersion: 1, pid: 1, uid: 0, rssBytes: 1, uptimeMs: 1, gpu: true })).not.toHaveProperty(
      'gpu',
    );
  });

  it('still refuses an answer that breaks the contract (a missing or wrong field)', () => {
    expect(() => parseResult('fs.list', { path: '.', truncated: false })).toThrow(/off-contract/);
    expect(() => parseResult('system.info', { agentVersion: 9 })).toThrow(/off-contract/);
  });

  it('every result schema has a tolerant reading', () => {
    for (const method of Object.keys(METHODS) as MethodName[]) expect(typeof tolerant(METHODS[method].result).safeParse).toBe('function');
  });
});
