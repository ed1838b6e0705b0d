// Runs before `pnpm pack` / `pnpm publish`: the published controller carries the agent's two files
// (dist/agent/warren-agent.mjs, which a sandbox starts, and the bundle warren-agent.cjs it loads)
// and the code interpreter's programs the bundle reads (dist/agent/runtimes/), which the runtime
// volume serves to every sandbox, because the agent package itself is not
// published. Build first: `pnpm build` at the repository root.
import { cpSync, existsSync, mkdirSync } from 'node:fs';

const AGENT_FILES = ['warren-agent.mjs', 'warren-agent.cjs', 'runtimes'];
for (const name of AGENT_FILES) {
  const from = new URL(`../agent/dist/${name}`, import.meta.url);
  if (!existsSync(from)) {
    console.error(`prepack: ${from.pathname} is missing; run 'pnpm build' at the repository root first.`);
    process.exit(1);
  }
}
if (!existsSync(new URL('./dist/index.js', import.meta.url))) {
  console.error("prepack: dist/index.js is missing; run 'pnpm build' at the repository root first.");
  process.exit(1);
}
mkdirSync(new URL('./dist/agent/', import.meta.url), { recursive: true });
for (const name of AGENT_FILES)
  cpSync(new URL(`../agent/dist/${name}`, import.meta.url), new URL(`./dist/agent/${name}`, import.meta.url), { recursive: true });
