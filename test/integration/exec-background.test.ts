import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { startAgentServer, type AgentServer } from '@warren/agent';
import { Commands, Connection, NotFoundError, ResourceExhaustedError, type AttachEvent } from '@warren/sdk';

/** An in-process agent with a small process cap, and a way to open more connections to it. */
describe('background processes, shell sessions and the process cap on an in-process agent', () => {
  let dir: string;
  let server: AgentServer;
  let secret: string;
  let connection: Connection;
  let commands: Commands;
  const connect = () => Connection.open(`ws+unix://${path.join(dir, 'agent.sock')}:/`, secret);

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'warren-exec-'));
    await mkdir(path.join(dir, 'workspace'));
    secret = randomBytes(32).toString('hex');
    server = await startAgentServer({
      socketPath: path.join(dir, 'agent.sock'),
      secret,
      policy: { root: path.join(dir, 'workspace'), readOnly: false },
      home: path.join(dir, 'workspace'),
      maxProcesses: 4,
    });
    connection = await connect();
    commands = new Commands(() => connection);
  });
  afterAll(async () => {
    connection.close();
    await server.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('writes to and closes the stdin of a background process, then reports its exit and output', async () => {
    const proc = await commands.start('cat; echo closed', { keepStdinOpen: true, tag: 'echo' });
    expect(proc.info).toMatchObject({ running: true, stdinOpen: true, tag: 'echo' });
    expect(await proc.write('hello\n')).toBe(6);
    await proc.write(new Uint8Array([0x62, 0x79, 0x65, 0x0a]));
    await proc.closeStdin();
    expect(await proc.wait()).toMatchObject({ running: false, exitCode: 0 });
    expect((await proc.output()).stdout).toBe('hello\nbye\nclosed\n');
    expect((await commands.list()).map((p) => p.handle)).toContain(proc.handle);
  });

  it('sends a chosen signal to the tree, and SIGKILL leaves nothing', async () => {
    const proc = await commands.start('trap "echo got TERM; exit 7" TERM; echo trapped; while :; do sleep 0.05; done');
    // Signal only once the trap is set (a SIGTERM before it would kill the shell outright).
    while ((await proc.output()).stdout !== 'trapped\n') await new Promise((r) => setTimeout(r, 20));
    await proc.kill('SIGTERM');
    expect(await proc.wait({ timeoutMs: 10_000 })).toMatchObject({ running: false, exitCode: 7 });
    expect((await proc.output()).stdout).toBe('trapped\ngot TERM\n');

    const stubborn = await commands.start('trap "" TERM; sleep 98761 & wait');
    const waited = await stubborn.wait({ timeoutMs: 100 });
    expect(waited.running).toBe(true);
    expect(await stubborn.kill()).toMatchObject({ running: false, signal: 'SIGKILL' });
  });

  it('keeps a bounded ring of output with byte offsets', async () => {
    const proc = await commands.start('head -c 1000000 /dev/zero; echo end >&2', { bufferBytes: 4096 });
    const info = await proc.wait();
    expect(info.stdout).toEqual({ start: 1_000_000 - 4096, end: 1_000_000 });
    expect(info.stderr).toEqual({ start: 0, end: 4 });
    const events: AttachEvent[] = [];
    for await (const event of proc.attach({ stdoutOffset: 10 })) events.push(event);
    const first = events.find((e) => e.type === 'stdout');
    // The bytes between 10 and the ring's start were dropped: the event's offset shows the gap.
    expect(first?.type === 'stdout' && first.offset).toBe(1_000_000 - 4096);
    expect(events.at(-1)?.type).toBe('exit');
  });

  it('reattaches over a new connection from the last offset seen and misses nothing', async () => {
    const expected = Array.from({ length: 2000 }, (_, i) => `line${i + 1}\n`).join('');
    const first = await connect();
    const proc = await new Commands(() => first).start('i=1; while [ $i -le 2000 ]; do echo line$i; i=$((i+1)); [ $((i % 100)) = 0 ] && sleep 0.02; done');
    const seen: Buffer[] = [];
    let seenBytes = 0;
    for await (const event of proc.attach()) {
      if (event.type !== 'stdout') continue;
      seen.push(event.data);
      seenBytes += event.data.length;
      if (seenBytes > 2000) break;
    }
    first.close(); // the connection is cut mid-stream

    const second = await connect();
    try {
      const again = await new Commands(() => second).connect(proc.handle);
      for await (const event of again.attach({ stdoutOffset: proc.offsets.stdout })) if (event.type === 'stdout') seen.push(event.data);
      expect(Buffer.concat(seen).toString()).toBe(expected);
    } finally {
      second.close();
    }
  });

  it('keeps cd and export in a shell session, reports each exit code, and survives a timeout', async () => {
    const shell = await commands.shell('main');
    expect(await shell.run('mkdir -p sub && cd sub && export FOO=bar')).toMatchObject({ exitCode: 0, stdout: '', timedOut: false });
    expect(await shell.run('basename "$PWD"; echo $FOO; echo err >&2; false')).toMatchObject({ exitCode: 1, stdout: 'sub\nbar\n', stderr: 'err\n' });
    expect((await shell.run('printf abc')).stdout).toBe('abc');
    expect((await shell.run('cat; echo after-eof')).stdout).toBe('after-eof\n');

    // Timeouts long enough for the command to start (and print) on a loaded machine before they hit.
    const slept = await shell.run('echo before; sleep 98771; echo never', { timeoutMs: 2_000 });
    expect(slept).toMatchObject({ timedOut: true, stdout: 'before\n', sessionRestarted: false });
    expect(slept.exitCode).not.toBe(0);
    const looped = await shell.run('while :; do :; done', { timeoutMs: 2_000 });
    expect(looped).toMatchObject({ timedOut: true, sessionRestarted: false });
    expect(await shell.run('echo $FOO; basename "$PWD"')).toMatchObject({ exitCode: 0, stdout: 'bar\nsub\n' });
    expect(await shell.close()).toBe(true);
    await expect(shell.run('true')).rejects.toBeInstanceOf(NotFoundError);
  });

  it('refuses a process beyond the cap with RESOURCE_EXHAUSTED naming the cap', async () => {
    const held = await Promise.all([1, 2, 3, 4].map(() => commands.start('sleep 98781')));
    const refused = await commands.run('true').catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(ResourceExhaustedError);
    expect((refused as Error).message).toContain('maxProcesses = 4');
    await Promise.all(held.map((p) => p.kill()));
    expect((await commands.run('echo ok')).stdout).toBe('ok\n');
  });
});
