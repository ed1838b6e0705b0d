#!/usr/bin/env node
// Runs one example: `node examples/run.mjs codin`. Examples are TypeScript; this bundles the one
// asked for with esbuild (already a dev dependency) against the workspace sources, then calls its
// main(). The controller comes from WARREN_URL and WARREN_API_KEY (see `scripts/start`).
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';

const here = path.dirname(fileURLToPath(import.meta.url));
const names = ['codin', 'filesystem', 'toolsmith', 'partial-read', 'builtin', 'vercel-ai', 'e2b-data-analysis', 'e2b-sudo-apt'];
const name = process.argv[2];
if (!names.includes(name)) {
  console.error(`Usage: node examples/run.mjs <${names.join('|')}>`);
  process.exit(2);
}
const outdir = path.join(here, '..', 'node_modules', '.cache', 'warren-examples');
await mkdir(outdir, { recursive: true });
const outfile = path.join(outdir, `${name}.mjs`);
await build({
  entryPoints: [path.join(here, `${name}.ts`)],
  outfile,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  conditions: ['warren-source'],
  logLevel: 'warning',
  banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
});
console.log(`example ${name}:`);
const { main } = await import(pathToFileURL(outfile).href);
await main();
