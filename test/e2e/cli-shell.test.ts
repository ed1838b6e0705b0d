import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import { WARREN_BIN } from '../support/cli.js';
import { startTestController, type TestController } from '../support/fixtures.js';

// tmux drives `warren shell` as a person would: a real terminal, keys typed, the screen read
// (capture-pane drops trailing spaces, so a prompt reads as `...$`).
let warren: TestController;
let sandbox: Sandbox;
const server = `warren-e2e-${randomBytes(4).toString('hex')}`;

function tmux(...args: string[]): string {
  return execFileSync('tmux', ['-L', server, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/** The visible screen, trailing blank lines dropped. */
function screen(): string {
  return tmux('capture-pane', '-p').replace(/\n+$/, '');
}

/** Waits until some process in the sandbox runs a command line matching `pattern`; the test timeout bounds it. */
async function waitProcess(pattern: RegExp): Promise<void> {
  while (!pattern.test((await sandbox.commands.run(['ps', '-eo', 'args'])).stdout)) await new Promise((r) => setTimeout(r, 100));
}

/** Waits for the screen to match; after `timeoutMs` (60 s: a hang guard) fails showing what the screen holds. */
async function waitForScreen(pattern: RegExp, timeoutMs = 60_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const text = screen();
    if (pattern.test(text)) return text;
    if (Date.now() > deadline) throw new Error(`The screen never matched ${pattern}; it shows:\n${text}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

beforeAll(async () => {
  try {
    execFileSync('tmux', ['-V']);
  } catch {
    throw new Error('tmux is not installed; this test drives a real terminal with it (apt-get install tmux).');
  }
  warren = await startTestController();
  sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
});

afterAll(async () => {
  try {
    tmux('kill-server');
  } catch {
    // no server left
  }
  await sandbox?.kill().catch(() => undefined);
  await warren?.[Symbol.asyncDispose]();
});

function startShell(args: string[], cols = 100, rows = 30): void {
  const env = `WARREN_URL=${warren.url} WARREN_API_KEY=${warren.apiKey}`;
  // After warren exits, the pane shows its exit status and stays open to be read.
  const command = `env ${env} ${process.execPath} ${WARREN_BIN} ${args.join(' ')}; echo "warren-exit=$?"; sleep 600`;
  tmux('new-session', '-d', '-x', String(cols), '-y', String(rows), command);
}

describe('warren shell in a real terminal (tmux)', () => {
  it('types into the sandbox shell, shows the answer on screen, follows a resize, and exits with the status', async () => {
    startShell(['shell', sandbox.id]);
    await waitForScreen(/warren@[^:]+:~\$$/m);
    tmux('send-keys', 'echo $((6*7))', 'Enter');
    const answered = await waitForScreen(/^42$/m);
    expect(answered).toMatch(/\$ echo \$\(\(6\*7\)\)\n42\n/);

    tmux('send-keys', 'stty size', 'Enter');
    await waitForScreen(/^30 100$/m);
    tmux('resize-window', '-x', '120', '-y', '40');
    // The new size travels tmux -> warren -> the sandbox's terminal on its own time: a `stty size`
    // typed at once can still see the old one, so ask again until the shell sees the new size.
    for (let attempt = 1; ; attempt++) {
      tmux('send-keys', 'stty size', 'Enter');
      const seen = await waitForScreen(/^40 120$/m, 2_000).then(
        () => true,
        () => false,
      );
      if (seen) break;
      if (attempt === 30) await waitForScreen(/^40 120$/m, 0);
    }

    // Ctrl-C reaches the program in the sandbox, not warren. As a person would, wait for the
    // program to run before pressing it, and for the prompt before typing on (a terminal drops
    // keys typed ahead when Ctrl-C interrupts). `sleeping` on screen is not enough: until bash's
    // child has exec'd sleep (and taken the terminal), a SIGINT can be swallowed by the fork.
    tmux('send-keys', 'echo sleeping; sleep 300', 'Enter');
    await waitForScreen(/^sleeping$/m);
    await waitProcess(/^\s*sleep 300\s*$/m);
    tmux('send-keys', 'C-c');
    await waitForScreen(/\nsleeping\n[\s\S]*\$$/);
    tmux('send-keys', 'echo still-here', 'Enter');
    await waitForScreen(/^still-here$/m);

    tmux('send-keys', 'exit 3', 'Enter');
    await waitForScreen(/^warren-exit=3$/m);
    tmux('kill-session');
  });

  it('runs a given program instead of the shell, in the busybox image too', async () => {
    await using busybox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, image: 'warren/test-busybox:latest' });
    startShell(['shell', busybox.id, '--', 'sh'], 80, 24);
    await waitForScreen(/\/workspace \$$/m);
    tmux('send-keys', 'echo $((6*7)); stty size', 'Enter');
    await waitForScreen(/^42\n24 80$/m);
    tmux('send-keys', 'C-d');
    await waitForScreen(/^warren-exit=0$/m);
    tmux('kill-session');
  });

  it('fails in one line when the sandbox does not exist', async () => {
    startShell(['shell', 'NoSuchSandbox0000000000x']);
    const text = await waitForScreen(/^warren-exit=\d+$/m);
    expect(text).toMatch(/warren: SANDBOX_NOT_FOUND: /);
    expect(text).toMatch(/^warren-exit=1$/m);
    tmux('kill-session');
  });
});
