import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from '@jest/globals';

const repo = path.resolve(import.meta.dirname, '..', '..', '..');

/** The patterns of an ignore file: no comments, no blank lines. */
function patterns(file: string): string[] {
  return readFileSync(path.join(repo, file), 'utf8')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
}

/**
 * A .dockerignore pattern as a test of a context path: `**\/NAME` matches NAME at any depth,
 * anything else is anchored at the context's root; `*` stays within one path segment. Enough for
 * the patterns this repository uses (no `!`, no `?`, no character classes).
 */
function dockerMatcher(pattern: string): RegExp {
  const anywhere = pattern.startsWith('**/');
  const rest = (anywhere ? pattern.slice(3) : pattern).replace(/^\/+|\/+$/g, '');
  const body = rest
    .split('*')
    .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
    .join('[^/]*');
  return new RegExp(`${anywhere ? '(^|/)' : '^'}${body}(/|$)`);
}

/**
 * The controller image is built with the repository's root as its context (compose.yaml,
 * `COPY . .` in images/controller/Dockerfile): what the host made must stay out of it, and the
 * sources must stay in.
 */
describe('the Docker build context of the repository root (.dockerignore)', () => {
  const ignored = patterns('.dockerignore');

  it('leaves out everything .gitignore names, at any depth where .gitignore does, and .git', () => {
    const missing = patterns('.gitignore')
      .map((p) => p.replace(/\/+$/, ''))
      .map((p) => (p.includes('/') ? p.replace(/^\/+/, '') : `**/${p}`))
      .filter((wanted) => !ignored.includes(wanted));
    expect(missing).toEqual([]);
    expect(ignored).toContain('.git');
  });

  it("leaves out a host's node_modules, build output and compose's .env at any depth", () => {
    const out = (file: string) => ignored.some((p) => dockerMatcher(p).test(file));
    for (const file of [
      'node_modules/esbuild/bin/esbuild',
      'packages/sdk/node_modules/ws/index.js',
      'packages/controller/dist/index.js',
      'packages/sdk/tsconfig.tsbuildinfo',
      '.git/HEAD',
      '.warren/test-results/unit.xml',
      '.env',
      'packages/sdk-python/build/lib/warren/__init__.py',
      'packages/sdk-python/warren/__pycache__/sandbox.cpython-311.pyc',
      '.venv/bin/python',
    ])
      expect([file, out(file)]).toEqual([file, true]);
  });

  it('keeps every tracked file: the image builds from the sources as committed', () => {
    const tracked = execFileSync('git', ['ls-files', '-z'], { cwd: repo, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 })
      .split('\0')
      .filter((file) => file !== '');
    expect(tracked.length).toBeGreaterThan(100);
    const matchers = ignored.map(dockerMatcher);
    expect(tracked.filter((file) => matchers.some((m) => m.test(file)))).toEqual([]);
  });
});
