import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { startTestAgent, type TestAgent } from '../../support/fixtures.js';

/** Pids of live processes whose command line is exactly `sleep <seconds>`. */
function sleepers(seconds: string): number[] {
  const found: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, 'latin1') !== `sleep\0${seconds}\0`) continue;
      if (/^\S+ \(.*\) Z/.test(readFileSync(`/proc/${name}/stat`, 'latin1'))) continue; // a zombie is dead
      found.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** A `sleep` duration no other process on this machine uses, to find exactly ours. */
const uniqueSeconds = () => `${900 + Math.floor(Math.random() * 99)}.${randomBytes(4).readUInt32BE()}`;

/**
 * Pins what docs/exec.md ("The limit") says about tree kills: a process is found when it keeps
 * the marker variable, or its session, or a live parent chain into the tree; it escapes only when
 * it has lost all three before the kill. These are the documented cases, as they behave today.
 */
describe('which processes a tree kill finds', () => {
  let agent: TestAgent;
  const leftovers: number[] = [];
  beforeAll(async () => {
    agent = await startTestAgent();
  });
  afterAll(async () => {
    for (const pid of leftovers) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    await agent[Symbol.asyncDispose]();
  });

  it.each([
    ['a background job', (s: string) => `sleep ${s} >/dev/null 2>&1 &`],
    ['setsid (keeps the marker)', (s: string) => `setsid sleep ${s} >/dev/null 2>&1 &`],
    ['env -i (keeps the session)', (s: string) => `env -i sleep ${s} >/dev/null 2>&1 &`],
  ])('kills %s when the command returns', async (_label, command) => {
    const seconds = uniqueSeconds();
    // `sleep 0.3` keeps the leader alive until the child runs; the kill after the leader exits
    // still finds the child by its marker or its session.
    await agent.commands.run(`${command(seconds)} sleep 0.3`);
    const left = sleepers(seconds);
    leftovers.push(...left);
    expect(left).toEqual([]);
  });

  it('kills env -i setsid while its parent still lives: a timeout finds it by its parent', async () => {
    const seconds = uniqueSeconds();
    const result = await agent.commands.run(`env -i setsid sh -c 'exec sleep ${seconds}' >/dev/null 2>&1 & sleep 100`, { timeoutMs: 1000 });
    expect(result.timedOut).toBe(true);
    const left = sleepers(seconds);
    leftovers.push(...left);
    expect(left).toEqual([]);
  });

  it('does not find env -i setsid whose parent exited first without tree cgroups (a daemon on the host): the documented limit', async () => {
    const seconds = uniqueSeconds();
    const started = performance.now();
    const result = await agent.commands.run(`env -i setsid sh -c 'exec sleep ${seconds}' >/dev/null 2>&1 & sleep 0.3`);
    expect(result.exitCode).toBe(0);
    expect(performance.now() - started).toBeLessThan(5_000);
    const escaped = sleepers(seconds);
    leftovers.push(...escaped);
    // It lives on: no marker (env -i), its own session (setsid), and its parent (the command's
    // shell) is gone, so nothing links it to the tree. The sandbox's end kills it; until then the
    // pids and memory limits bound it.
    expect(escaped).toHaveLength(1);
    const status = readFileSync(`/proc/${escaped[0]}/status`, 'latin1');
    expect(status).not.toMatch(new RegExp(`^PPid:\\s+${process.pid}$`, 'm'));
    expect(readFileSync(`/proc/${escaped[0]}/environ`, 'latin1')).not.toContain('WARREN_EXEC_ID');
  });
});
