import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from '@jest/globals';

const repo = path.resolve(import.meta.dirname, '..', '..', '..');

/**
 * Names the package exports for embedders although nothing in this repository imports them: the
 * types of `startController`'s options and of the provider seam, which someone writing their own
 * configuration or provider names.
 */
const FOR_EMBEDDERS = new Set([
  'StartControllerOptions',
  'ImageSettings',
  'EngineSettings',
  'LogLevel',
  'LoggerOptions',
  'SnapshotCapability',
  'VolumeCapability',
  'SharedState',
  'SharedEgressStore',
  'DockerProviderOptions',
  'ProvidedImage',
  'SandboxStats',
  'ProvidedSnapshot',
  'PullOptions',
  'PullProgress',
  'BuildOptions',
  'SharedRecords',
  'StoredRecord',
]);

/** Where the package's users are: the CLI, the test tiers, the benchmark, scripts and the documents that show embedding. */
const USERS = ['packages/cli/src', 'test', 'bench', 'soak', 'examples', 'scripts', 'docs', 'README.md', 'packages/controller/README.md'];

function filesUnder(relative: string): string[] {
  const full = path.join(repo, relative);
  let stats;
  try {
    stats = statSync(full);
  } catch {
    return [];
  }
  if (stats.isFile()) return [full];
  return readdirSync(full, { withFileTypes: true }).flatMap((entry) => (entry.name === 'node_modules' ? [] : filesUnder(path.join(relative, entry.name))));
}

/** The names in `{ a, type B, c as d }`: what the module exports them as. */
function namesIn(list: string, side: 'exported' | 'imported'): string[] {
  return list
    .split(',')
    .map((part) => part.trim().replace(/^type\s+/, ''))
    .filter(Boolean)
    .map((part) => {
      const [first, second] = part.split(/\s+as\s+/);
      return (side === 'exported' ? (second ?? first) : first)!.trim();
    });
}

/** What `src/index.ts` exports, by name. */
function exported(): Set<string> {
  const text = readFileSync(path.join(repo, 'packages/controller/src/index.ts'), 'utf8');
  expect(text).not.toMatch(/export\s*\*/);
  return new Set([...text.matchAll(/export\s+(?:type\s+)?\{([^}]*)\}\s*from/g)].flatMap((m) => namesIn(m[1]!, 'exported')));
}

/** Each name imported from `@warren/controller` outside the package, with the first file that does. */
function imported(): Map<string, string> {
  const found = new Map<string, string>();
  const statement =
    /(?:import|export)\s+(?:type\s+)?\{([^}]*)\}\s*from\s*['"]@warren\/controller['"]|\{([^}]*)\}\s*=\s*await\s+import\(\s*['"]@warren\/controller['"]\s*\)/g;
  for (const file of USERS.flatMap(filesUnder)) {
    const text = readFileSync(file, 'utf8');
    if (!text.includes('@warren/controller')) continue;
    for (const m of text.matchAll(statement)) {
      for (const name of namesIn(m[1] ?? m[2]!, 'imported')) if (!found.has(name)) found.set(name, path.relative(repo, file));
    }
  }
  return found;
}

describe("the controller package's surface (src/index.ts)", () => {
  it('exports every name its users import, scripts and documents included', () => {
    const names = exported();
    const missing = [...imported()].filter(([name]) => !names.has(name)).map(([name, file]) => `${name} (${file})`);
    expect(missing).toEqual([]);
  });

  it('exports nothing that no user imports, but the types named for embedders', () => {
    const used = imported();
    const unused = [...exported()].filter((name) => !used.has(name) && !FOR_EMBEDDERS.has(name));
    expect(unused).toEqual([]);
  });
});
