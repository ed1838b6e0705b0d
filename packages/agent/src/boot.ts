/**
 * The file a sandbox starts the daemon with (`/opt/warren/warren-agent.mjs`). It loads the
 * daemon's bundle (`warren-agent.cjs`, next to it) and calls its `main`.
 *
 * It compiles the bundle itself, with V8's code cache for it when the runtime carries one
 * (`warren-agent.code-cache`, written by the controller on the host with the same Node and the same
 * flags when it fills the runtime; see the controller's `runtime.ts`). Parsing and compiling the
 * bundle's 2 MB at every start was about a tenth of a cold create (docs/benchmarks.md); with the
 * cache V8 takes the compiled code as it is. A cache V8 rejects (another Node, other flags) only
 * costs that time back: the bundle is then compiled from its source, as without one.
 *
 * `warren-agent.mjs --write-code-cache FILE` loads the bundle, writes the code cache of what loading
 * compiled to FILE and exits without starting the daemon.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import Module, { createRequire } from 'node:module';
import path from 'node:path';
import { Script } from 'node:vm';

const BUNDLE = 'warren-agent.cjs';
const CODE_CACHE = 'warren-agent.code-cache';

const here = path.dirname(new URL(import.meta.url).pathname);
const bundle = path.join(here, BUNDLE);
const writeTo = process.argv[2] === '--write-code-cache' ? process.argv[3] : undefined;

try {
  let cachedData: Buffer | undefined;
  if (writeTo === undefined) {
    try {
      cachedData = readFileSync(path.join(here, CODE_CACHE));
    } catch {
      // no cache in this runtime: compile from the source
    }
  }
  // The bundle has no import(): a script compiled from a code cache cannot load a module (build.mjs).
  const script = new Script(Module.wrap(readFileSync(bundle, 'utf8')), { filename: bundle, ...(cachedData ? { cachedData } : {}) });
  const module = { exports: {} as { main?: () => Promise<void> } };
  (script.runInThisContext() as (...args: unknown[]) => void).call(module.exports, module.exports, createRequire(bundle), module, bundle, here);
  if (writeTo !== undefined) {
    writeFileSync(writeTo, script.createCachedData());
    process.exit(0);
  }
  if (typeof module.exports.main !== 'function') throw new Error(`${bundle} exports no main function`);
  module.exports.main().catch(fail);
} catch (err) {
  fail(err);
}

function fail(err: unknown): void {
  process.stderr.write(`warren-agent: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
