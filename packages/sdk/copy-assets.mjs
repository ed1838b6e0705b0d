// Copies the SDK's programs that are not TypeScript into dist/ beside the modules that read them at
// run time (tsc copies only what it compiles): src/tools/toolsmith-helper.py, which
// src/tools/toolsmith-helper.ts reads by a path relative to itself. Run by the root's `pnpm build`.
import { copyFileSync, mkdirSync } from 'node:fs';

const ASSETS = ['tools/toolsmith-helper.py'];
for (const asset of ASSETS) {
  const to = new URL(`./dist/${asset}`, import.meta.url);
  mkdirSync(new URL('.', to), { recursive: true });
  copyFileSync(new URL(`./src/${asset}`, import.meta.url), to);
}
