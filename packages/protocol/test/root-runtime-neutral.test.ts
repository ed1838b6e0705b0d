import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import path from 'node:path';

const src = path.resolve(import.meta.dirname, '../src');
const BUILTINS = new Set(builtinModules.flatMap((name) => [name, name.split('/')[0]!]));

/** Every module specifier a source file names: static imports and re-exports (type-only too) and dynamic imports. */
function specifiers(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const found: string[] = [];
  for (const match of text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^'"`;]*?\bfrom\s*['"]([^'"]+)['"]/g)) found.push(match[1]!);
  for (const match of text.matchAll(/(?:^|\n)\s*import\s*['"]([^'"]+)['"]/g)) found.push(match[1]!);
  for (const match of text.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g)) found.push(match[1]!);
  return found;
}

/** The package root's module graph: each file reachable from `src/index.ts`, with what it imports from outside. */
function rootGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  const queue = [path.join(src, 'index.ts')];
  while (queue.length > 0) {
    const file = queue.pop()!;
    if (graph.has(file)) continue;
    const outside: string[] = [];
    graph.set(file, outside);
    for (const spec of specifiers(file)) {
      if (spec.startsWith('.')) queue.push(path.resolve(path.dirname(file), spec.replace(/\.js$/, '.ts')));
      else outside.push(spec);
    }
  }
  return graph;
}

const isNodeBuiltin = (spec: string) => spec.startsWith('node:') || BUILTINS.has(spec) || BUILTINS.has(spec.split('/')[0]!);

describe("the protocol package's root loads outside Node (the console imports it in a browser)", () => {
  it('reaches no node: module and no bare Node builtin', () => {
    const graph = rootGraph();
    const offenders = [...graph].flatMap(([file, outside]) => outside.filter(isNodeBuiltin).map((spec) => `${path.relative(src, file)} imports ${spec}`));
    expect(offenders).toEqual([]);
    // The walk itself works: it found the codec and the registry, and it does see a Node import where there is one.
    expect(graph.has(path.join(src, 'frame.ts'))).toBe(true);
    expect(graph.has(path.join(src, 'wire-client.ts'))).toBe(true);
    expect(specifiers(path.join(src, 'daemon-tls.ts')).filter(isNodeBuiltin)).toEqual(['node:crypto', 'node:tls']);
  });

  it('keeps the Node-only parts at the ./node subpath', () => {
    const manifest = JSON.parse(readFileSync(path.resolve(src, '../package.json'), 'utf8')) as { exports: Record<string, unknown> };
    expect(Object.keys(manifest.exports)).toEqual(['.', './node']);
    expect([...rootGraph().keys()].map((file) => path.relative(src, file))).not.toContain('node.ts');
  });
});
