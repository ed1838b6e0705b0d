import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';

/** A process that sheds every link to its tree: a new session, an empty environment, and a parent that exits at once. */
const escapee = (seconds: number) => `(setsid env -i sh -c 'exec sleep ${seconds}' >/dev/null 2>&1 </dev/null &)`;

let next = 61_000 + Math.floor(Math.random() * 1000) * 10;
/** A sleep length no other test uses, so `ps` finds this test's escapee alone. */
const uniqueSeconds = () => (next += 1);

/**
 * Sandbox code against the end of its own process tree (docs/security.md, "Process trees"): a
 * child that leaves its session (`setsid`), clears its environment (`env -i`, which drops the
 * tree's marker) and whose parent exits at once has nothing left that links it to the command,
 * cell, terminal or background process that started it, except its cgroup: each tree has one, in
 * a hierarchy of Warren's own that only the daemon can move processes in. So it ends with its
 * tree. Under user-namespace remap the daemon cannot move the sandbox user's processes, so there
 * trees are found by marker, session and parent alone, and the test says so.
 */
describe.each(['socket', 'exec'] as const)('red team: process trees (daemon channel: %s)', (daemonChannel) => {
  let warren: TestController;
  let sandbox: Sandbox;
  const remapped = process.env.WARREN_TEST_ENGINE === 'userns-remap';

  /** The live, non-zombie processes whose command line is `sleep <seconds>`. */
  async function sleepers(seconds: number): Promise<string[]> {
    const { stdout } = await sandbox.commands.run(['ps', '-eo', 'pid,stat,args']);
    return stdout
      .split('\n')
      .map((line) => line.trim().split(/\s+/))
      .filter(([, stat, ...args]) => args.join(' ') === `sleep ${seconds}` && !stat?.startsWith('Z'))
      .map(([pid]) => pid!);
  }

  /** Waits until the escapee runs (the test's timeout bounds it), so a later empty answer means it was killed. */
  async function untilRunning(seconds: number): Promise<void> {
    while ((await sleepers(seconds)).length === 0) await new Promise((resolve) => setTimeout(resolve, 100));
  }

  beforeAll(async () => {
    warren = await startTestController({ config: { daemonChannel } });
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
  }, 60_000);

  afterAll(async () => {
    await sandbox?.kill().catch(() => undefined);
    await warren?.[Symbol.asyncDispose]();
  });

  it('puts every tree in a cgroup of its own that sandbox code can neither leave nor reach', async () => {
    const probe = await sandbox.commands.run(
      [
        'awk -F: \'$2 == "name=warren" { print "cgroup=" $3 }\' /proc/self/cgroup',
        'ls /run/warren >/dev/null 2>&1 && echo listed=/run/warren',
        'for f in /run/warren/trees/cgroup.procs /run/warren/trees/daemon/cgroup.procs /sys/fs/cgroup/cgroup.procs; do',
        '  if (echo $$ > "$f") 2>/dev/null; then echo "wrote=$f"; fi',
        'done',
      ].join('\n'),
    );
    expect(probe.stdout).not.toMatch(/listed=|wrote=/);
    if (remapped) {
      // No tree cgroups: the process stays where the engine started the container (the hierarchy's root, if a controller mounted it).
      expect(probe.stdout).not.toContain('cgroup=/sandboxes/');
      return;
    }
    expect(probe.stdout).toMatch(new RegExp(`^cgroup=/sandboxes/${sandbox.id}/t-[0-9a-f]+$`, 'm'));
  });

  it('ends an escapee with the command that started it', async () => {
    const seconds = uniqueSeconds();
    // The command waits until its escapee runs, then returns; its tree's end must take the escapee.
    const result = await sandbox.commands.run(`${escapee(seconds)}; until pgrep -x -f 'sleep ${seconds}' >/dev/null; do sleep 0.05; done; echo done`);
    expect(result).toMatchObject({ exitCode: 0, stdout: 'done\n' });
    const left = await sleepers(seconds);
    if (remapped) {
      // The documented limit without tree cgroups: nothing links it to the command any more.
      expect(left).toHaveLength(1);
      await sandbox.commands.run(['kill', '-9', ...left]);
      return;
    }
    expect(left).toEqual([]);
  });

  it('ends an escapee with the background process, the terminal and the code context that started it', async () => {
    if (remapped) return; // the documented limit, shown for commands above
    const [inBackground, inTerminal, inCell] = [uniqueSeconds(), uniqueSeconds(), uniqueSeconds()];

    const background = await sandbox.commands.start(['sh', '-c', `${escapee(inBackground)}; sleep 600`]);
    const term = await sandbox.pty.create({ cols: 80, rows: 24, cmd: ['sh', '-c', `${escapee(inTerminal)}; sleep 600`] });
    const context = await sandbox.code.createContext();
    await sandbox.code.run(`import subprocess\nsubprocess.run(["sh", "-c", ${JSON.stringify(escapee(inCell))}])`, { context, timeoutMs: 120_000 });
    for (const seconds of [inBackground, inTerminal, inCell]) await untilRunning(seconds);

    await background.kill();
    expect(await sleepers(inBackground)).toEqual([]);
    await term.kill('SIGKILL');
    // A terminal's tree is ended when it closes; the daemon answers the kill before the tree's end.
    while ((await sleepers(inTerminal)).length > 0) await new Promise((resolve) => setTimeout(resolve, 100));
    await sandbox.code.removeContext(context);
    expect(await sleepers(inCell)).toEqual([]);
  }, 180_000);
});
