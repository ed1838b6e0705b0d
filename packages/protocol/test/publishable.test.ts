import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from '@jest/globals';

// The fast half of scripts/pack-check: what each published manifest must say, checked without
// packing. The slow half (pack, install outside the workspace, run) is the script.
const root = path.resolve(import.meta.dirname, '../../..');
const PUBLISHED = ['protocol', 'sdk', 'controller', 'cli'];
const PRIVATE = ['agent'];

interface Manifest {
  name: string;
  private?: boolean;
  license?: string;
  repository?: { type: string; url: string; directory: string };
  files?: string[];
  types?: string;
  exports?: Record<string, unknown>;
  publishConfig?: { access?: string; exports?: Record<string, unknown> };
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
}
const manifest = (name: string) => JSON.parse(readFileSync(path.join(root, 'packages', name, 'package.json'), 'utf8')) as Manifest;

/** The exports a consumer sees: the workspace's, without the `warren-source` condition that points at src/. */
function withoutSourceCondition(exports: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(exports).map(([key, target]) => [
      key,
      typeof target === 'object' && target !== null
        ? Object.fromEntries(Object.entries(target).filter(([condition]) => condition !== 'warren-source'))
        : target,
    ]),
  );
}

describe.each(PUBLISHED)('@warren/%s is publishable', (name) => {
  const pkg = manifest(name);

  it('is public, Apache-2.0, and names its folder in the repository', () => {
    expect(pkg.private).toBeUndefined();
    expect(pkg.license).toBe('Apache-2.0');
    expect(pkg.publishConfig?.access).toBe('public');
    expect(pkg.repository).toEqual(expect.objectContaining({ type: 'git', directory: `packages/${name}` }));
  });

  it('ships dist, its README and the same LICENSE as the repository', () => {
    expect(pkg.files).toEqual(expect.arrayContaining(['dist', 'README.md', 'LICENSE']));
    expect(readFileSync(path.join(root, 'packages', name, 'LICENSE'), 'utf8')).toBe(readFileSync(path.join(root, 'LICENSE'), 'utf8'));
    expect(readFileSync(path.join(root, 'packages', name, 'README.md'), 'utf8')).toMatch(new RegExp(`^# @warren/${name}\\n`));
  });

  it("publishes the workspace's exports minus the source condition, plus package.json", () => {
    expect(pkg.exports?.['.']).toEqual(expect.objectContaining({ 'warren-source': './src/index.ts' }));
    expect(pkg.publishConfig?.exports).toEqual({ ...withoutSourceCondition(pkg.exports ?? {}), './package.json': './package.json' });
    expect(pkg.types).toBe((pkg.publishConfig?.exports?.['.'] as { types?: string }).types);
  });

  it('depends only on packages that are published too', () => {
    for (const dep of Object.keys({ ...pkg.dependencies, ...pkg.optionalDependencies }).filter((d) => d.startsWith('@warren/'))) {
      expect([dep, PRIVATE.includes(dep.slice('@warren/'.length))]).toEqual([dep, false]);
    }
  });
});

describe('native addons', () => {
  it('are optional for the SDK and the controller: both run without bufferutil or node-pty', () => {
    const native = ['bufferutil', 'utf-8-validate', '@lydell/node-pty'];
    for (const name of ['protocol', 'sdk', 'controller', 'cli']) {
      const hard = Object.keys(manifest(name).dependencies ?? {});
      expect([name, hard.filter((dep) => native.includes(dep))]).toEqual([name, []]);
    }
  });
});
