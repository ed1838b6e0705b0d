// Bundles test/support/controller-entry.ts into one file (Warren's packages from source, third-party
// packages loaded from the controller's node_modules, so write the output below packages/controller), for tests that run the controller as a
// child process. Run as its own process: esbuild does not work inside jest's VM modules.
import path from 'node:path';
import { build } from 'esbuild';

const repo = path.resolve(import.meta.dirname, '..', '..');
const outfile = process.argv[2];
await build({
  entryPoints: [path.join(repo, 'test', 'support', 'controller-entry.ts')],
  outfile,
  bundle: true,
  platform: 'node',
  target: 'node20',
  format: 'esm',
  conditions: ['warren-source'],
  // Third-party packages stay imports, resolved at run time from the controller's node_modules.
  external: ['dockerode', 'ws', 'prom-client', 'yaml', 'nanoid', 'tar-stream', 'zod', 'bufferutil', 'utf-8-validate'],
  logLevel: 'warning',
});
