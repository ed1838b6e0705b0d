// Builds the daemon for the sandbox runtime volume (no node_modules inside a sandbox), as two files:
// dist/warren-agent.cjs, the whole daemon in one bundle, and dist/warren-agent.mjs, the small file a
// sandbox starts, which loads the bundle with V8's code cache for it (src/boot.ts says why); and
// beside them dist/runtimes/, the code interpreter's programs (src/runtimes/), which the bundle
// reads at run time (src/services/code-runtimes.ts) and the runtime volume carries.
import { cpSync } from 'node:fs';
import { build } from 'esbuild';

const common = { bundle: true, platform: 'node', target: 'node20', legalComments: 'none', logLevel: 'warning' };

await build({
  ...common,
  entryPoints: [new URL('./src/main.ts', import.meta.url).pathname],
  outfile: new URL('./dist/warren-agent.cjs', import.meta.url).pathname,
  // CommonJS: node:vm compiles a script with a code cache; an ES module only behind a flag.
  format: 'cjs',
  // import() of a package left outside (node-pty) becomes require(): a script compiled from a code
  // cache has no loader for import() ("A dynamic import callback was not specified").
  supported: { 'dynamic-import': false },
  conditions: ['warren-source'],
  // ws loads these optional native speed-ups when present; the bundle runs without them.
  // node-pty is native: the runtime volume ships its package folders in /opt/warren/node_modules.
  external: ['bufferutil', 'utf-8-validate', '@lydell/node-pty'],
  // The bundle finds its programs in runtimes/ beside itself, not through import.meta (src/services/code-runtimes.ts).
  define: { WARREN_AGENT_BUNDLE: 'true' },
  logOverride: { 'empty-import-meta': 'silent' },
});

cpSync(new URL('./src/runtimes/', import.meta.url), new URL('./dist/runtimes/', import.meta.url), { recursive: true });

await build({
  ...common,
  entryPoints: [new URL('./src/boot.ts', import.meta.url).pathname],
  outfile: new URL('./dist/warren-agent.mjs', import.meta.url).pathname,
  format: 'esm',
});
