// Faults: a sandbox's daemon SIGKILLed, a container removed from outside, and the controller
// SIGKILLed in the middle of a load. Each ends in typed errors and clear states, never a hang,
// neighbours carry on, and nothing a client was told is written is lost. (Restarting the Docker
// engine is in the soak runner only: it would break the other tests sharing this engine.)
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Docker from 'dockerode';
import { Sandbox } from '@warren/sdk';
import { ControllerProcess, sleep, typedOutcome, until } from '../support/reliability.js';

const run = promisify(execFile);
const docker = new Docker();

async function containerOf(sandboxId: string): Promise<string> {
  const found = await docker.listContainers({ all: true, filters: { label: [`warren.sandbox=${sandboxId}`] } });
  expect(found).toHaveLength(1);
  return found[0]!.Id;
}

/** The sandbox's state as GET reports it, or the error code when it answers with one. */
async function reportedState(sandbox: Sandbox): Promise<string> {
  try {
    return (await sandbox.info()).state;
  } catch (err) {
    return (err as { code?: string }).code ?? 'UNTYPED';
  }
}

async function healthy(sandbox: Sandbox, tag: string): Promise<void> {
  await sandbox.files.write(`health-${tag}.txt`, tag);
  expect(await sandbox.files.read(`health-${tag}.txt`)).toBe(tag);
  expect((await sandbox.commands.run(['echo', tag])).stdout).toBe(`${tag}\n`);
}

describe('faults', () => {
  let warren: ControllerProcess;
  let bystander: Sandbox;
  const made: Sandbox[] = [];

  beforeAll(async () => {
    warren = await ControllerProcess.start({ WARREN_REAP_INTERVAL_MS: '500' });
    bystander = await Sandbox.create(warren.options);
    made.push(bystander);
  });
  afterAll(async () => {
    await Promise.all(made.map((s) => s.kill().catch(() => undefined)));
    await warren?.dispose();
  });

  const create = async () => {
    const s = await Sandbox.create(warren.options);
    made.push(s);
    return s;
  };

  /** Kills a sandbox's daemon from the host; it is the container's main process (under docker-init), so the container ends. */
  async function killDaemon(victim: Sandbox): Promise<void> {
    const { pid } = await victim.daemonInfo();
    // The exec's shell runs in the container too: when the container ends before that shell has
    // exited, it is killed with it and docker exec exits 137. That is the kill working; the callers
    // wait for the sandbox to be reported ended.
    await run('docker', ['exec', await containerOf(victim.id), 'sh', '-c', `kill -9 ${pid}`]).catch((err: { code?: unknown }) => {
      if (err.code !== 137) throw err;
    });
  }

  /** When the sandbox's current daemon started, by the host's clock. */
  const daemonStart = async (sandbox: Sandbox) => Date.now() - (await sandbox.daemonInfo({ timeoutMs: 5_000 })).uptimeMs;

  /** Kills the daemon and waits until the controller has started the sandbox again (a daemon that started later). */
  async function killAndAwaitRestart(victim: Sandbox): Promise<void> {
    const before = await daemonStart(victim);
    await killDaemon(victim);
    await until('the sandbox to be started again', async () => ((await daemonStart(victim)) > before + 500 ? true : undefined), 60_000);
  }

  it("SIGKILL of one sandbox's daemon: the controller starts that sandbox again with its files; others are unaffected", async () => {
    const victim = await create();
    await victim.files.write('before.txt', 'x');
    await victim.commands.start('sleep 1000');
    await killAndAwaitRestart(victim);

    // The same handle carries on: the SDK reconnected by itself. Files are kept, processes are not.
    expect((await victim.info()).state).toBe('running');
    expect(await victim.files.read('before.txt')).toBe('x');
    expect((await victim.commands.list()).filter((p) => p.running)).toEqual([]);
    await healthy(victim, 'restarted');
    await healthy(bystander, 'after-daemon-kill');
  });

  // Regression: an upgrade to a sandbox whose container has exited used to answer SANDBOX_NOT_READY
  // (retryable), so the SDK kept reconnecting and the call waited out its whole timeout. Now a
  // daemon that keeps dying is left exited after its restarts, and calls fail fast and typed.
  it('a daemon that keeps dying is left exited after three restarts, and a call fails fast with a typed error, not its timeout', async () => {
    const victim = await create();
    for (let restart = 0; restart < 3; restart++) await killAndAwaitRestart(victim);
    await killDaemon(victim);
    await until('the sandbox to be reported ended', async () =>
      ['exited', 'gone', 'SANDBOX_NOT_FOUND'].includes(await reportedState(victim)) ? true : undefined,
    );
    expect(await typedOutcome(victim.daemonInfo({ timeoutMs: 10_000 }))).toMatch(/^(CONNECTION_CLOSED|SANDBOX_NOT_FOUND)$/);
    const reconnect = await typedOutcome(Sandbox.connect(victim.id, { baseUrl: warren.url, token: victim.token, reconnect: { giveUpAfterMs: 5_000 } }));
    expect(reconnect).toBe('SANDBOX_NOT_FOUND');
    await healthy(bystander, 'after-crash-loop');
    expect(await typedOutcome(victim.kill())).toMatch(/^(ok|SANDBOX_NOT_FOUND)$/);
  });

  it('a container removed from outside (docker rm -f) is reported gone, not left hanging', async () => {
    const victim = await create();
    const container = await containerOf(victim.id);
    await docker.getContainer(container).remove({ force: true, v: true });

    expect(await typedOutcome(victim.daemonInfo({ timeoutMs: 30_000 }))).toMatch(
      /^(CONNECTION_CLOSED|SANDBOX_NOT_READY|SANDBOX_NOT_FOUND|UPSTREAM_UNAVAILABLE)$/,
    );
    const state = await until('the sandbox to be reported gone', async () => {
      const s = await reportedState(victim);
      return ['gone', 'SANDBOX_NOT_FOUND'].includes(s) ? s : undefined;
    });
    expect(['gone', 'SANDBOX_NOT_FOUND']).toContain(state);
    const listed = (await Sandbox.list(warren.options)).find((s) => s.id === victim.id);
    expect(listed === undefined || listed.state === 'gone').toBe(true);
    expect(await typedOutcome(Sandbox.connect(victim.id, { baseUrl: warren.url, token: victim.token }))).toMatch(/^(SANDBOX_NOT_READY|SANDBOX_NOT_FOUND)$/);
    expect(await typedOutcome(victim.kill())).toMatch(/^(ok|SANDBOX_NOT_FOUND)$/);
    await healthy(bystander, 'after-rm');
  });

  it('SIGKILL of the controller mid-load: clients reconnect, every acknowledged write is intact, none is torn, background processes survive', async () => {
    const sandboxes = await Promise.all([create(), create(), create()]);
    for (const s of sandboxes) {
      await s.files.mkdir('k', { parents: true }).catch(() => undefined);
      await s.commands.start(['sh', '-c', 'while true; do date >> /workspace/tick; sleep 0.2; done'], { tag: 'ticker' });
    }

    const acked = new Map<string, string>(); // `${sandbox}:${path}` -> content the write was acknowledged with
    const attempted = new Map<string, string>();
    const outcomes = new Map<string, number>();
    let reconnects = 0;
    let stop = false;

    const worker = async (index: number, w: number) => {
      const owner = sandboxes[index]!;
      let client = await Sandbox.connect(owner.id, { baseUrl: warren.url, token: owner.token });
      for (let seq = 0; !stop; seq++) {
        const file = `k/w${w}-${seq}.txt`;
        const content = `${file} ${randomBytes(24).toString('hex')}\n`.repeat(1 + (seq % 50));
        const key = `${index}:${file}`;
        attempted.set(key, content);
        const outcome = await typedOutcome(client.files.write(file, content, { timeoutMs: 30_000 }));
        outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
        if (outcome === 'ok') {
          acked.set(key, content);
          continue;
        }
        // The connection is gone: reconnect explicitly until the controller answers again.
        client.close();
        for (;;) {
          if (stop) return;
          try {
            client = await Sandbox.connect(owner.id, { baseUrl: warren.url, token: owner.token });
            reconnects++;
            break;
          } catch {
            await sleep(200);
          }
        }
      }
      client.close();
    };

    const workers = sandboxes.flatMap((_, i) => [worker(i, 0), worker(i, 1)]);
    // Mid-load: writes are being acknowledged (however slowly the machine gets there) when the kill lands.
    await until('writes to be acknowledged before the kill', async () => (acked.size >= 30 ? true : undefined), 60_000);
    const ackedBeforeKill = acked.size;
    await warren.stop('SIGKILL');
    await sleep(1000);
    warren = await ControllerProcess.start({}, warren);
    const ackedAtRestart = acked.size;
    await until('writes to be acknowledged again after the restart', async () => (acked.size > ackedAtRestart + 20 ? true : undefined), 60_000);
    stop = true;
    await Promise.all(workers);

    const lost: string[] = [];
    const torn: string[] = [];
    for (const [i, s] of sandboxes.entries()) {
      const fresh = await Sandbox.connect(s.id, { baseUrl: warren.url, token: s.token });
      try {
        for (const [key, content] of attempted) {
          if (!key.startsWith(`${i}:`)) continue;
          const file = key.slice(key.indexOf(':') + 1);
          const got = await fresh.files.read(file).catch(() => undefined);
          if (acked.get(key) !== undefined && got !== content) lost.push(key);
          if (got !== undefined && got !== content) torn.push(key);
        }
        // The background process kept ticking through the controller's death and after.
        const ticks = async () => Number((await fresh.commands.run('wc -l < /workspace/tick')).stdout.trim());
        const before = await ticks();
        await until('the background process to tick again', async () => ((await ticks()) > before ? true : undefined), 15_000);
        expect((await fresh.commands.list()).some((p) => p.tag === 'ticker' && p.running)).toBe(true);
      } finally {
        fresh.close();
      }
    }
    process.stderr.write(
      `[reliability] controller SIGKILL mid-load: ${attempted.size} writes attempted, ${acked.size} acknowledged (${ackedBeforeKill} before the kill), ` +
        `outcomes ${JSON.stringify(Object.fromEntries(outcomes))}, ${reconnects} reconnects, ${lost.length} lost, ${torn.length} torn\n`,
    );
    expect([...outcomes.keys()].filter((o) => o.startsWith('UNTYPED'))).toEqual([]);
    expect(ackedBeforeKill).toBeGreaterThan(0);
    expect(lost).toEqual([]);
    expect(torn).toEqual([]);
    await healthy(bystander, 'after-controller-kill');
  });
});
