import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { CancelledError, Sandbox, type CommandEvent } from '@warren/sdk';
import { testEngine } from '../support/engine.js';
import { startTestSandbox, type TestController } from '../support/fixtures.js';

const MiB = 1024 * 1024;

describe('process.exec in a real sandbox', () => {
  let warren: TestController;
  let sandbox: Sandbox;
  beforeAll(async () => ({ warren, sandbox } = await startTestSandbox()), 60_000);
  afterAll(async () => warren?.[Symbol.asyncDispose]());

  /** Every process line `ps` shows inside the sandbox whose command matches. */
  async function psGrep(pattern: string): Promise<string[]> {
    const { stdout } = await sandbox.commands.run(['ps', '-eo', 'pid,ppid,pgid,sid,stat,args']);
    return stdout.split('\n').filter((line) => line.includes(pattern) && !/\bZ/.test(line.split(/\s+/).filter(Boolean)[4] ?? ''));
  }

  /** Polls {@link psGrep} until some process matches (or, with `running` false, none does); the test timeout bounds it. */
  async function waitPs(pattern: string, running = true): Promise<string[]> {
    for (;;) {
      const lines = await psGrep(pattern);
      if (lines.length > 0 === running) return lines;
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  it('kills the whole tree on timeout: background job, setsid, nohup and double fork; the output so far is returned', async () => {
    const cmd = [
      'sleep 98711 &',
      'setsid sleep 98712 &',
      'nohup sleep 98713 >/dev/null 2>&1 &',
      '(sleep 98714 &) &',
      "setsid sh -c 'sleep 98715 & exec sleep 98716' &",
      // The timeout must find the whole tree: wait until all six sleeps run, however slow the machine.
      'until [ "$(pgrep -c -f \'^sleep 9871[1-6]$\')" -ge 6 ]; do sleep 0.05; done;',
      'echo started; printf partial >&2; sleep 98719',
    ].join(' ');
    // A timeout long enough for the tree to start and the output to be written on a loaded machine.
    const result = await sandbox.commands.run(cmd, { timeoutMs: 5_000 });
    expect(result).toMatchObject({ timedOut: true, stdout: 'started\n', stderr: 'partial', exitCode: null });
    expect(await psGrep('sleep 987')).toEqual([]);
  });

  it('kills what a foreground command leaves behind when it exits, without waiting for its timeout', async () => {
    const result = await sandbox.commands.run('setsid sleep 98721 & (nohup sleep 98722 >/dev/null 2>&1 &); echo done', { timeoutMs: 30_000 });
    expect(result).toMatchObject({ exitCode: 0, stdout: 'done\n', timedOut: false });
    expect(await psGrep('sleep 9872')).toEqual([]);
  });

  it('starts children with the highest OOM score and the marker, never with the daemon secret, token or API key', async () => {
    // `cat` opens its own /proc/self/environ (a redirect would open the shell's, empty after exec).
    const probe = await sandbox.commands.run('cat /proc/self/oom_score_adj; cat /proc/self/environ | tr "\\0" "\\n" | sort');
    const [score, ...env] = probe.stdout.trim().split('\n');
    expect(score).toBe('1000');
    // The daemon keeps the default score: the kernel picks any command before it.
    const daemon = await sandbox.daemonInfo();
    expect((await sandbox.commands.run(['cat', `/proc/${daemon.pid}/oom_score_adj`])).stdout).toBe('0\n');
    // The defaults, the container's own environment (Docker's HOSTNAME; the image's ENV and the create
    // env when there are any), the shell's PWD and the tree marker: nothing of the daemon's.
    // Podman marks every container with container=podman (systemd's convention); Docker adds nothing.
    const engineOwn = (await testEngine()).name === 'podman' ? ['container'] : [];
    expect(env.map((line) => line.split('=')[0])).toEqual(['HOME', 'HOSTNAME', 'LANG', 'LC_ALL', 'PATH', 'PWD', 'TERM', 'WARREN_EXEC_ID', ...engineOwn]);
    const secrets = [warren.controller.sandboxes.agentSecret(sandbox.id), sandbox.token, warren.apiKey];
    // Every environment and command line in the sandbox the sandbox user can read, the daemon's included.
    const dump = await sandbox.commands.run('for p in /proc/[0-9]*; do tr "\\0" "\\n" < $p/environ; tr "\\0" " " < $p/cmdline; echo; done 2>/dev/null', {
      outputCapBytes: 8 * MiB,
    });
    expect(dump.truncated).toBe(false);
    expect(dump.stdout).toContain('WARREN_EXEC_ID=');
    for (const secret of secrets) expect(dump.stdout).not.toContain(secret);
  });

  it("gives commands the sandbox's environment: the create request's env, under each call's own", async () => {
    await using withEnv = await Sandbox.create({
      baseUrl: warren.url,
      apiKey: warren.apiKey,
      env: { PROJECT: 'warren', PATH: '/opt/tools/bin:/usr/local/bin:/usr/bin:/bin' },
    });
    const seen = await withEnv.commands.run('echo "$PROJECT $PATH"');
    expect(seen.stdout).toBe('warren /opt/tools/bin:/usr/local/bin:/usr/bin:/bin\n');
    expect((await withEnv.commands.run('echo $PROJECT', { env: { PROJECT: 'override' } })).stdout).toBe('override\n');
    const shell = await withEnv.commands.shell('env-check');
    expect((await shell.run('echo $PROJECT')).stdout).toBe('warren\n');
  });

  it('sees EOF on stdin at once, and reads text and bytes given as stdin', async () => {
    expect(await sandbox.commands.run('cat; echo eof', { timeoutMs: 5_000 })).toMatchObject({ stdout: 'eof\n', timedOut: false });
    expect((await sandbox.commands.run('sha256sum', { stdin: new Uint8Array(1 * MiB).fill(7) })).stdout).toMatch(/^[0-9a-f]{64} {2}-\n$/);
    expect((await sandbox.commands.run(['python3', '-c', 'import sys; print(sys.stdin.read()[::-1])'], { stdin: 'olleh' })).stdout).toBe('hello\n');
  });

  it('keeps the daemon flat under 100 MB floods of yes and /dev/urandom, capping head and tail and saving the full output', async () => {
    const before = (await sandbox.daemonInfo()).rssBytes;
    const yes = await sandbox.commands.run('yes | head -c 100000000', { outputCapBytes: 64 * 1024, saveOutput: true, timeoutMs: 60_000 });
    expect(yes).toMatchObject({ exitCode: 0, truncated: true, stdoutBytes: 100_000_000 });
    expect(yes.stdout).toMatch(/^y\ny\n[\s\S]*\n\[\.\.\. 99934464 bytes omitted \.\.\.\]\n[\s\S]*y\n$/);
    expect((await sandbox.commands.run(['stat', '-c', '%s', yes.stdoutFile!])).stdout).toBe('100000000\n');
    const random = await sandbox.commands.run('head -c 100000000 /dev/urandom', { timeoutMs: 60_000 });
    expect(random).toMatchObject({ exitCode: 0, truncated: true, stdoutBytes: 100_000_000 });
    let streamed = 0;
    for await (const event of sandbox.commands.stream('head -c 100000000 /dev/urandom', { timeoutMs: 60_000, outputCapBytes: 4096 })) {
      if (event.type === 'stdout') streamed += event.data.length;
    }
    expect(streamed).toBe(100_000_000);
    const after = (await sandbox.daemonInfo()).rssBytes;
    process.stderr.write(`daemon RSS: ${(before / MiB).toFixed(1)} MiB before, ${(after / MiB).toFixed(1)} MiB after 300 MB of output (2 runs + 1 stream)\n`);
    expect(after - before).toBeLessThan(64 * MiB);
  });

  it('streams events as they happen, with onStdout/onStderr as sugar, and cancels on AbortSignal', async () => {
    const events: CommandEvent['type'][] = [];
    for await (const event of sandbox.commands.stream('echo a; sleep 0.2; echo b >&2; exit 3')) events.push(event.type);
    expect(events).toEqual(['stdout', 'stderr', 'exit']);

    let out = '';
    let err = '';
    const result = await sandbox.commands.run('echo hi; echo ho >&2', { onStdout: (t) => (out += t), onStderr: (t) => (err += t) });
    expect([out, err, result.stdout, result.stderr]).toEqual(['hi\n', 'ho\n', 'hi\n', 'ho\n']);

    const controller = new AbortController();
    const running = sandbox.commands.run('sleep 98731', { signal: controller.signal, timeoutMs: 60_000 });
    await waitPs('sleep 98731'); // cancel a command that surely runs
    controller.abort();
    await expect(running).rejects.toBeInstanceOf(CancelledError);
    // The SDK rejects at once; the agent kills once the cancel frame reaches it.
    expect(await waitPs('sleep 98731', false)).toEqual([]);
  });

  it('slows the process down when the stream consumer stalls, through the controller relay', async () => {
    const observer = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, apiKey: warren.apiKey });
    try {
      // Each round writes 64 KiB and then records its count in a file.
      const stream = sandbox.commands.stream('i=0; while :; do head -c 65536 /dev/zero; i=$((i+1)); echo $i > /tmp/rounds; done', { timeoutMs: 60_000 });
      expect((await stream.next()).done).toBe(false);
      await new Promise((r) => setTimeout(r, 2_000)); // the consumer stalls
      const rounds = Number((await observer.commands.run('cat /tmp/rounds')).stdout.trim());
      process.stderr.write(`backpressure through the relay: ${rounds} x 64 KiB written while the consumer stalled for 2 s\n`);
      // Pipe + daemon + relay + SDK high-water marks and socket buffers: some MiB, not the GiBs `head` writes unthrottled.
      expect(rounds * 65536).toBeLessThan(64 * MiB);
      await stream.return?.();
    } finally {
      observer.close();
    }
  });

  it('stops a foreground command when the SDK connection is cut', async () => {
    const other = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, apiKey: warren.apiKey });
    const running = other.commands.run('sleep 98741', { timeoutMs: 60_000 });
    await waitPs('sleep 98741'); // cut the connection of a command that surely runs
    other.close();
    await expect(running).rejects.toThrow();
    // The agent learns of the cut when the controller closes its side of the relay.
    expect(await waitPs('sleep 98741', false)).toEqual([]);
  });
});
