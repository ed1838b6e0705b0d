// Bundles the daemon into one file for the sandbox runtime volume: no node_modules inside a sandbox.
import { build } from 'esbuild';

await build({
  entryPoints: [new URL('./src/main.ts', import.meta.url).pathname],
  outfile: new URL('./dist/warren-agent.mjs', import.meta.url).pathname,
  bundle: true,
  platform: 'node',
  target: 'node20',
  format: 'esm',
  conditions: ['warren-source'],
  // ws loads these optional native speed-ups when present; the bundle runs without them.
  // node-pty is native: the runtime volume ships its package folders in /opt/warren/node_modules.
  external: ['bufferutil', 'utf-8-validate', '@lydell/node-pty'],
  banner: { js: "import { createRequire as __warrenRequire } from 'node:module'; const require = __warrenRequire(import.meta.url);" },
  legalComments: 'none',
  logLevel: 'warning',
});
