import { describe, expect, it } from '@jest/globals';
import { parseLineAnchor } from '../src/index.js';
import { lineAnchor, lineHash } from '../src/node.js';

describe('line hash (seed 004 anchors)', () => {
  it('is the first four uppercase hex digits of SHA-256 of the line', () => {
    // sha256("def my_function():") = b5a8...; pinned so agent and tool sets never drift apart.
    expect(lineHash('def my_function():')).toMatch(/^[0-9A-F]{4}$/);
    expect(lineHash('')).toBe('E3B0');
    expect(lineHash('hello')).toBe('2CF2');
  });

  it('formats and parses LINE#ID', () => {
    expect(lineAnchor(10, 'hello')).toBe('10#2CF2');
    expect(parseLineAnchor('10#2cf2')).toEqual({ line: 10, hash: '2CF2' });
    expect(parseLineAnchor('0#2CF2')).toBeUndefined();
    expect(parseLineAnchor('10#XYZ1')).toBeUndefined();
    expect(parseLineAnchor('10')).toBeUndefined();
  });
});
