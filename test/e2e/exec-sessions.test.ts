import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import { startTestSandbox, type TestController } from '../support/fixtures.js';

describe('background processes and shell sessions in a real sandbox', () => {
  let warren: TestController;
  let sandbox: Sandbox;
  beforeAll(async () => ({ warren, sandbox } = await startTestSandbox()), 60_000);
  afterAll(async () => warren?.[Symbol.asyncDispose]());

  const connect = () => Sandbox.connect(sandbox.id, { baseUrl: warren.url, apiKey: warren.apiKey });

  /** Live (non-zombie) processes `ps` shows inside the sandbox whose command starts with `prefix`. */
  async function psGrep(prefix: string): Promise<string[]> {
    const { stdout } = await sandbox.commands.run(['ps', '-eo', 'stat,pid,pgid,sid,args']);
    return stdout.split('\n').filter((line) => {
      const [stat, , , , ...args] = line.trim().split(/\s+/);
      return args.join(' ').startsWith(prefix) && !stat?.startsWith('Z');
    });
  }

  it('kills a background tree with setsid, nohup and double-forked children, checked with ps', async () => {
    const proc = await sandbox.commands.start(
      "setsid sleep 98811 & nohup sleep 98812 >/dev/null 2>&1 & (sleep 98813 &); sh -c 'sleep 98814 & exec sleep 98815'",
    );
    // However slow the machine, the kill must find the whole tree: wait for it (the test timeout bounds this).
    while ((await psGrep('sleep 9881')).length < 5) await new Promise((r) => setTimeout(r, 50));
    expect(await psGrep('sleep 9881')).toHaveLength(5);
    expect((await sandbox.commands.list()).find((p) => p.handle === proc.handle)?.running).toBe(true);
    expect(await proc.kill()).toMatchObject({ running: false, signal: 'SIGKILL' });
    expect(await psGrep('sleep 9881')).toEqual([]);
  });

  it('writes stdin to a background process and reports its exit', async () => {
    const proc = await sandbox.commands.start(['python3', '-c', 'import sys\nfor line in sys.stdin: print(line.strip().upper(), flush=True)'], {
      keepStdinOpen: true,
    });
    await proc.write('hello\n');
    await proc.write('world\n');
    await proc.closeStdin();
    expect(await proc.wait({ timeoutMs: 20_000 })).toMatchObject({ running: false, exitCode: 0 });
    expect((await proc.output()).stdout).toBe('HELLO\nWORLD\n');
  });

  it('reattaches after the SDK connection is cut, from the last offset seen, missing no byte', async () => {
    const lines = 3000;
    const expected = Array.from({ length: lines }, (_, i) => `line ${i + 1}\n`).join('');
    const first = await connect();
    const proc = await first.commands.start(`for i in $(seq 1 ${lines}); do echo "line $i"; [ $((i % 200)) = 0 ] && sleep 0.05; done`);
    const seen: Buffer[] = [];
    let bytes = 0;
    for await (const event of proc.attach()) {
      if (event.type !== 'stdout') continue;
      seen.push(event.data);
      bytes += event.data.length;
      if (bytes >= 5000) break;
    }
    const offset = proc.offsets.stdout;
    expect(offset).toBe(bytes);
    first.close(); // cut: this client's connection is gone for good

    const second = await connect();
    try {
      const again = await second.commands.connect(proc.handle);
      let exit;
      for await (const event of again.attach({ stdoutOffset: offset })) {
        if (event.type === 'stdout') {
          expect(event.offset).toBe(bytes); // contiguous: no gap, no overlap
          seen.push(event.data);
          bytes += event.data.length;
        } else if (event.type === 'exit') exit = event.info;
      }
      expect(exit).toMatchObject({ running: false, exitCode: 0 });
      expect(Buffer.concat(seen).toString()).toBe(expected);
    } finally {
      second.close();
    }
  });

  it('keeps cd and export in a named bash session, with exit codes per command and a timeout that keeps the session', async () => {
    const shell = await sandbox.commands.shell('agent');
    expect((await shell.run('mkdir -p /workspace/proj && cd /workspace/proj && export STAGE=test')).exitCode).toBe(0);
    expect(await shell.run('pwd; echo "$STAGE"')).toMatchObject({ exitCode: 0, stdout: '/workspace/proj\ntest\n' });
    expect(await shell.run('ls /nonexistent')).toMatchObject({ exitCode: 2, stdout: '' });
    expect((await shell.run('ls /nonexistent')).stderr).toContain('No such file');

    // Long enough for the command to start and print on a loaded machine before the timeout hits.
    const slow = await shell.run('echo partial; sleep 98821', { timeoutMs: 3_000 });
    expect(slow).toMatchObject({ timedOut: true, stdout: 'partial\n', sessionRestarted: false });
    expect(await psGrep('sleep 98821')).toEqual([]);
    const rejoined = await (await connect()).commands.shell('agent');
    expect(await rejoined.run('pwd; echo "$STAGE"')).toMatchObject({ exitCode: 0, stdout: '/workspace/proj\ntest\n' });
    expect(await shell.close()).toBe(true);
  });
});
