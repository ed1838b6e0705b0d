// Runs before `pnpm pack` / `pnpm publish`: the published controller carries the agent bundle
// (dist/agent/warren-agent.mjs) that the runtime volume serves to every sandbox, because the
// agent package itself is not published. Build first: `pnpm build` at the repository root.
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';

const from = new URL('../agent/dist/warren-agent.mjs', import.meta.url);
const to = new URL('./dist/agent/warren-agent.mjs', import.meta.url);
if (!existsSync(from)) {
  console.error(`prepack: ${from.pathname} is missing; run 'pnpm build' at the repository root first.`);
  process.exit(1);
}
if (!existsSync(new URL('./dist/index.js', import.meta.url))) {
  console.error("prepack: dist/index.js is missing; run 'pnpm build' at the repository root first.");
  process.exit(1);
}
mkdirSync(new URL('./dist/agent/', import.meta.url), { recursive: true });
copyFileSync(from, to);
