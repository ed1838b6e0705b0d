import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { ForbiddenError, NotFoundError, Sandbox, type Terminal } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';

let warren: TestController;
const sandboxes: Record<string, Sandbox> = {};

const IMAGES = { debian: 'warren/sandbox:latest', busybox: 'warren/test-busybox:latest' } as const;

beforeAll(async () => {
  warren = await startTestController();
  for (const [name, image] of Object.entries(IMAGES)) sandboxes[name] = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, image });
});

afterAll(async () => {
  for (const sandbox of Object.values(sandboxes)) await sandbox.kill().catch(() => undefined);
  await warren?.[Symbol.asyncDispose]();
});

/** Waits until some process in the sandbox runs (or, with `running` false, none runs) a command line matching `pattern`; the test timeout bounds it. */
async function waitProcess(sandbox: Sandbox, pattern: RegExp, running = true): Promise<string> {
  for (;;) {
    const ps = (await sandbox.commands.run('ps -eo args 2>/dev/null || ps -o args')).stdout;
    if (pattern.test(ps) === running) return ps;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Collects a terminal's output as text, and waits until it contains a pattern. */
function screen(term: Terminal): { text: () => string; waitFor: (pattern: RegExp) => Promise<void>; done: Promise<void> } {
  let text = '';
  const waiters: { pattern: RegExp; resolve: () => void }[] = [];
  const done = (async () => {
    for await (const chunk of term) {
      text += chunk.toString('utf8');
      for (const w of [...waiters]) {
        if (!w.pattern.test(text)) continue;
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    }
  })();
  return {
    text: () => text,
    done,
    waitFor: (pattern) => (pattern.test(text) ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ pattern, resolve }))),
  };
}

describe.each(Object.keys(IMAGES))('sandbox.pty in the %s image', (name) => {
  it('runs the shell on a real terminal: input, output, resize and exit status', async () => {
    const sandbox = sandboxes[name]!;
    const term = await sandbox.pty.create({ cols: 80, rows: 24 });
    expect(term.pid).toBeGreaterThan(0);
    const out = screen(term);
    await term.write('tty; echo "answer=$((6*7))"; stty size\r');
    await out.waitFor(/answer=42\r\n24 80\r\n/);
    expect(out.text()).toMatch(/\/dev\/pts\/\d+/);
    await term.resize(132, 50);
    await term.write('stty size\r');
    await out.waitFor(/50 132\r\n/);
    await term.write('exit 7\r');
    expect(await term.wait()).toMatchObject({ exitCode: 7, signal: null });
    await out.done;
  });

  it('passes raw input: Ctrl-C interrupts the program in the terminal, bytes arrive untouched', async () => {
    const sandbox = sandboxes[name]!;
    const term = await sandbox.pty.create({ cols: 80, rows: 24, cmd: 'echo ready; sleep 300; echo not-interrupted' });
    const out = screen(term);
    // Press Ctrl-C only once `sleep` itself runs: a SIGINT that lands while the shell is forking it
    // can be swallowed by the shell's own handler in the child, and sleep then runs its 300 s.
    await out.waitFor(/ready/);
    await waitProcess(sandbox, /^\s*sleep 300\s*$/m);
    await term.write(new Uint8Array([0x03]));
    const exit = await term.wait();
    expect(exit.exitCode === 130 || exit.signal === 'SIGINT').toBe(true);
    await out.done;
    expect(out.text()).not.toContain('not-interrupted');
  });

  it('reports a signal, and kills what the program left running when the terminal ends', async () => {
    const sandbox = sandboxes[name]!;
    const term = await sandbox.pty.create({ cols: 80, rows: 24, cmd: ['/bin/sh', '-c', '(sleep 1000 &) ; echo started; sleep 1000'] });
    const out = screen(term);
    await out.waitFor(/started/);
    await term.kill('SIGKILL');
    expect(await term.wait()).toMatchObject({ exitCode: null, signal: 'SIGKILL' });
    expect(await waitProcess(sandbox, /sleep 1000/, false)).not.toMatch(/sleep 1000/);
  });
});

describe('sandbox.pty errors', () => {
  it('names a terminal that is not open, and refuses a handle derived without exec', async () => {
    const sandbox = sandboxes.debian!;
    const term = await sandbox.pty.create({ cols: 80, rows: 24, cmd: 'true' });
    await term.wait();
    await expect(term.write('x')).rejects.toBeInstanceOf(NotFoundError);

    const { token } = await sandbox.deriveToken({ readonly: true });
    const reader = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token });
    try {
      await expect(reader.pty.create({ cols: 80, rows: 24 })).rejects.toBeInstanceOf(ForbiddenError);
    } finally {
      reader.close();
    }
  });

  it('hangs up when the client closes the terminal', async () => {
    const sandbox = sandboxes.debian!;
    const term = await sandbox.pty.create({ cols: 80, rows: 24, cmd: 'sleep 1000' });
    term.close();
    await expect(term.wait()).rejects.toThrow();
    expect(await waitProcess(sandbox, /sleep 1000/, false)).not.toMatch(/sleep 1000/);
  });
});
