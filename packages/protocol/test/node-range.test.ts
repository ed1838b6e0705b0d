import { readFileSync } from 'node:fs';
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
  };

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
        const theirs = read(path.join(dir, 'node_modules', dep, 'package.json')).engines?.node;
        if (theirs === undefined) continue;
        expect([dep, theirs, semver.subset(ours, theirs)]).toEqual([dep, theirs, true]);
      }
    }
  });
});
