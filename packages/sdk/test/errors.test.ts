import { describe, expect, it } from '@jest/globals';
import { ERROR_CODE_LIST } from '@warren/protocol';
import {
  ERROR_CLASSES,
  LOCAL_ERROR_CODES,
  makeError,
  NotFoundError,
  PathNotInSandboxError,
  SandboxNotFoundError,
  StaleAnchorError,
  WarrenConflictError,
  WarrenError,
  WarrenForbiddenError,
  WarrenNotFoundError,
  type WarrenErrorCode,
} from '../src/index.js';

describe('SDK errors are declared classes', () => {
  it('every code, from the wire and local, has its own class, named after it, that makeError builds', () => {
    const codes = [...ERROR_CODE_LIST, ...(Object.keys(LOCAL_ERROR_CODES) as WarrenErrorCode[])];
    for (const code of codes) {
      const cls = ERROR_CLASSES[code];
      expect([code, typeof cls]).toEqual([code, 'function']);
      const err = makeError(code, 'm', { details: { a: 1 } });
      expect(err).toBeInstanceOf(cls);
      expect(err).toBeInstanceOf(WarrenError);
      expect(err.code).toBe(code);
      expect(err.name).toBe(cls.name);
      expect(err.toJSON()).toMatchObject({ code, message: 'm', details: { a: 1 } });
    }
    expect(new Set(Object.values(ERROR_CLASSES)).size).toBe(codes.length);
  });

  it('instanceof narrows to the class, and families catch every kind at once', () => {
    const err: unknown = makeError('SANDBOX_NOT_FOUND', 'gone');
    if (err instanceof SandboxNotFoundError) {
      // The class is a type: `code` is narrowed to its own literal.
      const code: 'SANDBOX_NOT_FOUND' = err.code;
      expect(code).toBe('SANDBOX_NOT_FOUND');
    } else throw new Error('not narrowed');
    expect(err).toBeInstanceOf(WarrenNotFoundError);
    expect(err).not.toBeInstanceOf(NotFoundError);
    expect(makeError('NOT_FOUND', 'x')).toBeInstanceOf(WarrenNotFoundError);
    expect(makeError('PATH_NOT_IN_SANDBOX', 'x')).toBeInstanceOf(WarrenForbiddenError);
    expect(makeError('PATH_NOT_IN_SANDBOX', 'x')).toBeInstanceOf(PathNotInSandboxError);
    expect(makeError('STALE_ANCHOR', 'x')).toBeInstanceOf(WarrenConflictError);
    expect(new StaleAnchorError('x').isRetryable).toBe(false);
    expect(makeError('CONNECTION_CLOSED', 'x').isRetryable).toBe(true);
  });
});
