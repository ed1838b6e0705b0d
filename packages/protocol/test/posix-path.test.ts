import { describe, expect, it } from '@jest/globals';
import path from 'node:path';
import { dirnamePosix, joinPosix, normalizePosix, resolvePosix } from '../src/posix-path.js';

/** Paths made of the pieces where path arithmetic goes wrong: `.`, `..`, empty segments, leading and trailing slashes. */
function samples(): string[] {
  const pieces = ['', '.', '..', 'a', 'b.c', '...', '..a', '.b'];
  const out = new Set<string>(['', '/', '//', '///', '.', '..', './', '../', '/..', '/../..', 'a/../..', '//a//b//']);
  let seed = 7;
  const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31);
  for (let n = 0; n < 3000; n++) {
    const count = 1 + (next() % 6);
    const parts: string[] = [];
    for (let i = 0; i < count; i++) parts.push(pieces[next() % pieces.length]!);
    out.add(parts.join('/'));
  }
  return [...out];
}

describe('posix path arithmetic (the protocol root has no node:path)', () => {
  const all = samples();

  it('normalizes, joins and takes dirnames exactly as path.posix does', () => {
    for (const p of all) {
      expect([p, normalizePosix(p)]).toEqual([p, path.posix.normalize(p)]);
      expect([p, dirnamePosix(p)]).toEqual([p, path.posix.dirname(p)]);
      expect([p, joinPosix('x/y', p)]).toEqual([p, path.posix.join('x/y', p)]);
      expect([p, joinPosix(p, '..', 'z')]).toEqual([p, path.posix.join(p, '..', 'z')]);
    }
  });

  it('resolves against an absolute base exactly as path.posix does', () => {
    for (const p of all) {
      expect([p, resolvePosix('/workspace', p)]).toEqual([p, path.posix.resolve('/workspace', p)]);
      expect([p, resolvePosix('/', p)]).toEqual([p, path.posix.resolve('/', p)]);
      if (p.startsWith('/')) expect([p, resolvePosix(p)]).toEqual([p, path.posix.resolve(p)]);
    }
  });

  it('resolves a path that stays relative from /, not from a working folder', () => {
    expect(resolvePosix('a/../b')).toBe('/b');
    expect(resolvePosix('')).toBe('/');
  });
});
