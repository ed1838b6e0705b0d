import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { collectRuntime, daemonNodePath, loadConfig, type AgentRuntime } from '@warren/controller';
import { DAEMON_NODE_FLAGS, runtimeTar } from '../../packages/controller/src/runtime.js';

const run = promisify(execFile);

/** The runtime's tar unpacked into `into` by the system's tar; the names it holds. */
async function untar(tar: Buffer, into: string): Promise<string[]> {
  const file = path.join(into, '..', `${path.basename(into)}.tar`);
  await writeFile(file, tar);
  try {
    await run('tar', ['-xf', file, '-C', into]);
    return (await run('tar', ['-tf', file])).stdout.split('\n').filter(Boolean);
  } finally {
    await rm(file, { force: true });
  }
}

// The daemon's boot file compiles its bundle with V8's code cache, which the controller makes when it
// writes the runtime (packages/agent/src/boot.ts, runtime.ts). Needs `pnpm build` (the bundle).
describe("the runtime's code cache for the daemon", () => {
  let runtime: AgentRuntime;
  let dir: string;
  beforeAll(async () => {
    runtime = await collectRuntime(loadConfig().agentBundlePath);
    dir = await mkdtemp(path.join(os.tmpdir(), 'warren-runtime-'));
  }, 60_000);
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("is written with the runtime, and V8 takes it with the daemon's flags (it rejects it with others)", async () => {
    const names = await untar(await runtimeTar(runtime), dir);
    // The code interpreter's programs beside the bundle, which reads them (packages/agent/src/runtimes).
    expect(names).toEqual(
      expect.arrayContaining(['warren-agent.mjs', 'warren-agent.cjs', 'warren-agent.code-cache', 'runtimes/python-bridge.py', 'runtimes/node-repl.cjs']),
    );
    // What boot.ts does, reporting whether V8 rejected the cache.
    const check = [
      "const fs = require('fs'), vm = require('vm'), M = require('module'), p = require('path');",
      `const file = p.join(${JSON.stringify(dir)}, 'warren-agent.cjs');`,
      "const s = new vm.Script(M.wrap(fs.readFileSync(file, 'utf8')), { filename: file, cachedData: fs.readFileSync(p.join(p.dirname(file), 'warren-agent.code-cache')) });",
      'process.stdout.write(String(s.cachedDataRejected));',
    ].join('\n');
    const env = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
    // The Node the runtime carries made the cache (Node 24's binary package, else this one).
    const node = (await daemonNodePath()).path;
    expect((await run(node, [...DAEMON_NODE_FLAGS, '-e', check], { env })).stdout).toBe('false');
    expect((await run(node, ['-e', check], { env })).stdout).toBe('true');
  }, 60_000);

  it('starts the daemon from the runtime with the cache: the bundle loads and runs its main', async () => {
    // Without arguments main refuses to start: proof that the bundle loaded and its main ran.
    const failed = await run((await daemonNodePath()).path, [...DAEMON_NODE_FLAGS, path.join(dir, 'warren-agent.mjs')], {
      env: { PATH: '/usr/bin:/bin' },
    }).then(
      () => ({ stderr: 'exited 0' }),
      (e: { stderr: string }) => e,
    );
    expect(failed.stderr).toMatch(/^warren-agent: usage: warren-agent --socket PATH/);
  });

  it("leaves the cache's bytes out of the runtime's hash: V8 writes a different cache each time, the volume stays the same", async () => {
    const again = await collectRuntime(loadConfig().agentBundlePath);
    expect(again.hash).toBe(runtime.hash);
  });
});
