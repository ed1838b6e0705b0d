import { randomInt } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';
import { sandboxCode } from '../support/redteam.js';

/**
 * Processes that leave their command's tree every way sandbox code can (a new session with
 * `setsid`, an empty environment with `env -i`, and their parent gone before the kill): where the
 * daemon has cgroups of its own (docs/security.md, "The daemon's CPU"), each command, background
 * process, terminal and code context runs in a cgroup of its own, and its end kills everything in
 * it. Under user-namespace remap there are none, and the documented limit stands.
 */
describe.each(['socket', 'exec'] as const)('red team: processes that leave their tree (daemon channel: %s)', (daemonChannel) => {
  let warren: TestController;
  let sandbox: Sandbox;
  const cgroups = process.env.WARREN_TEST_ENGINE !== 'userns-remap';

  beforeAll(async () => {
    warren = await startTestController({ config: { daemonChannel } });
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, ttlSeconds: 600 });
  }, 60_000);

  afterAll(async () => {
    await sandbox?.kill().catch(() => undefined);
    await warren?.[Symbol.asyncDispose]();
  });

  /** A sleep no other test runs, so its presence names the escapee. */
  const uniqueSleep = () => String(700_000 + randomInt(99_999));
  /** How many `sleep <seconds>` processes live in the sandbox. */
  const alive = async (seconds: string) => {
    const { facts } = await sandboxCode(
      sandbox,
      `n=0; for c in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < "$c" 2>/dev/null | grep -q "^sleep ${seconds} " && n=$((n+1)); done; echo alive=$n`,
    );
    return Number(facts.alive);
  };
  /** A sleep in a new session with an empty environment, whose parent (a shell) exits at once. */
  const escape = (seconds: string) => `env -i setsid sh -c 'sleep ${seconds} >/dev/null 2>&1 &' >/dev/null 2>&1;`;

  it('a command that returns takes its escaped child with it', async () => {
    const seconds = uniqueSleep();
    await sandbox.commands.run(`${escape(seconds)} sleep 0.3`);
    expect(await alive(seconds)).toBe(cgroups ? 0 : 1);
  });

  it('a background process that is killed takes its escaped child with it', async () => {
    const seconds = uniqueSleep();
    const background = await sandbox.commands.start(`${escape(seconds)} sleep 0.3; sleep 1000`);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect(await alive(seconds)).toBe(1);
    await background.kill();
    await background.wait({ timeoutMs: 10_000 }).catch(() => undefined);
    expect(await alive(seconds)).toBe(cgroups ? 0 : 1);
  });

  it('a removed code context takes what its cells started, in a new session with an empty environment', async () => {
    const seconds = uniqueSleep();
    const context = await sandbox.code.createContext({ language: 'python' });
    // The shell between them exits at once: the sleep has no parent of the tree, no marker, no session of it.
    await sandbox.code.run(`import subprocess\nsubprocess.Popen(['setsid', 'env', '-i', 'sh', '-c', 'sleep ${seconds} >/dev/null 2>&1 &'])`, {
      context,
      timeoutMs: 120_000,
    });
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await alive(seconds)).toBe(1);
    await sandbox.code.removeContext(context);
    expect(await alive(seconds)).toBe(cgroups ? 0 : 1);
  }, 180_000);
});
