import { describe, expect, it } from '@jest/globals';
import { CodedError, ERROR_CODE_LIST, ERROR_CODES, METHODS, parseParams, parseResult, type MethodName } from '../src/index.js';

/** One valid params and result example per method: a method added without one fails here. */
const EXAMPLES: { [M in MethodName]: { params: unknown; result: unknown } } = {
  'system.info': { params: {}, result: { agentVersion: '0.1.0', protocolVersion: 1, pid: 7, uid: 1000, rssBytes: 1, uptimeMs: 2 } },
  'fs.read': { params: { path: 'a.py' }, result: { path: 'a.py', size: 3, mtimeMs: 1700000000000 } },
  'fs.write': { params: { path: 'a.py', mode: 0o644 }, result: { path: 'a.py', bytesWritten: 3 } },
  'process.exec': {
    params: { cmd: 'echo hi', cwd: '.', env: { A: '1' }, stdin: 'x', timeoutMs: 1000 },
    result: { exitCode: 0, signal: null, stdout: 'hi\n', stderr: '', durationMs: 3, timedOut: false, truncated: false, stdoutBytes: 3, stderrBytes: 0 },
  },
};

describe('method registry', () => {
  it.each(Object.keys(METHODS) as MethodName[])('%s params and result round-trip through JSON and their schemas', (method) => {
    const { params, result } = EXAMPLES[method];
    expect(parseParams(method, JSON.parse(JSON.stringify(params)))).toEqual(params);
    expect(parseResult(method, JSON.parse(JSON.stringify(result)))).toEqual(result);
  });

  it('refuses unknown params keys with INVALID_PARAMS naming the key', () => {
    try {
      parseParams('fs.read', { path: 'a', extra: 1 });
      throw new Error('parsed');
    } catch (err) {
      expect((err as CodedError).code).toBe('INVALID_PARAMS');
      expect((err as CodedError).message).toContain('extra');
    }
  });

  it('refuses a path with a NUL byte', () => {
    expect(() => parseParams('fs.read', { path: 'a\0b' })).toThrow(/NUL/);
  });

  it('refuses a __proto__ key instead of merging it', () => {
    const hostile = JSON.parse('{"path":"a","__proto__":{"polluted":true}}');
    expect(() => parseParams('fs.read', hostile)).toThrow(CodedError);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('refuses an env name with =', () => {
    expect(() => parseParams('process.exec', { cmd: 'true', env: { 'A=B': '1' } })).toThrow(/env\.A=B/);
  });

  it('gives every error code an HTTP status and a suggestion', () => {
    for (const code of ERROR_CODE_LIST) {
      expect(ERROR_CODES[code].status).toBeGreaterThanOrEqual(400);
      expect(ERROR_CODES[code].suggestion.length).toBeGreaterThan(10);
    }
  });
});
