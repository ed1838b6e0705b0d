import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { AuthenticationError, CommandExitError, NotFoundError, Sandbox, TimeoutError } from 'e2b';
import { startLocalController, type LocalController } from '../support/local-controller.js';

/** The real `e2b` SDK against a real controller: E2B_API_URL and E2B_SANDBOX_URL both at `<controller>/e2b`. */
describe('the e2b SDK against the gateway: lifecycle and commands', () => {
  let warren: LocalController;
  let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
  beforeAll(async () => {
    warren = await startLocalController();
    opts = { apiKey: warren.apiKey, apiUrl: `${warren.url}/e2b`, sandboxUrl: `${warren.url}/e2b` };
  });
  afterAll(async () => {
    await warren[Symbol.asyncDispose]();
  });

  it('creates, describes, lists, extends, connects to and kills a sandbox', async () => {
    const sandbox = await Sandbox.create({ ...opts, metadata: { task: 't-42' } });
    try {
      expect(await sandbox.isRunning()).toBe(true);
      const info = await sandbox.getInfo();
      expect(info).toMatchObject({ sandboxId: sandbox.sandboxId, templateId: 'base', metadata: { task: 't-42' }, state: 'running' });
      const listed = await Sandbox.list({ ...opts, query: { metadata: { task: 't-42' } } }).nextItems();
      expect(listed.map((s) => s.sandboxId)).toEqual([sandbox.sandboxId]);
      expect(await Sandbox.list({ ...opts, query: { metadata: { task: 'other' } } }).nextItems()).toEqual([]);
      await sandbox.setTimeout(600_000);
      const longer = await sandbox.getInfo();
      expect(longer.endAt.getTime() - Date.now()).toBeGreaterThan(500_000);
      const again = await Sandbox.connect(sandbox.sandboxId, opts);
      expect((await again.commands.run('echo again')).stdout).toBe('again\n');
    } finally {
      expect(await sandbox.kill()).toBe(true);
    }
    expect(await sandbox.isRunning()).toBe(false);
    expect(await Sandbox.kill(sandbox.sandboxId, opts)).toBe(false);
    await expect(Sandbox.connect(sandbox.sandboxId, opts)).rejects.toThrow(NotFoundError);
  });

  it('pauses, and resumes on connect; serves the older create and connect paths Python and JS 2.45 call', async () => {
    const sandbox = await Sandbox.create(opts);
    try {
      expect(await sandbox.pause()).toBe(true);
      expect((await sandbox.getInfo()).state).toBe('paused');
      expect(await sandbox.pause()).toBe(false);
      const resumed = await Sandbox.connect(sandbox.sandboxId, opts);
      expect((await resumed.getInfo()).state).toBe('running');
      expect((await resumed.commands.run('echo back')).stdout).toBe('back\n');
    } finally {
      await sandbox.kill();
    }
    const headers = { 'x-api-key': warren.apiKey, 'content-type': 'application/json' };
    const created = await fetch(`${opts.apiUrl}/sandboxes`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ templateID: 'base', timeout: 300, secure: true }),
    });
    expect(created.status).toBe(201);
    const body = (await created.json()) as { sandboxID: string; envdVersion: string; envdAccessToken: string };
    expect(body).toMatchObject({ templateID: 'base', clientID: expect.any(String), envdVersion: expect.stringMatching(/^0\.\d+\.\d+$/) });
    const connected = await fetch(`${opts.apiUrl}/sandboxes/${body.sandboxID}/connect`, { method: 'POST', headers, body: JSON.stringify({ timeout: 60 }) });
    expect(connected.status).toBe(200);
    expect(await fetch(`${opts.apiUrl}/sandboxes/${body.sandboxID}`, { method: 'DELETE', headers })).toMatchObject({ status: 204 });
  });

  it('answers an unknown template and a wrong API key with the SDK error classes', async () => {
    await expect(Sandbox.create('no-such-template', opts)).rejects.toThrow(/Template 'no-such-template' not found.*base/);
    await expect(Sandbox.create({ ...opts, apiKey: 'e2b_0000' })).rejects.toThrow(AuthenticationError);
  });

  it('runs foreground, failing, streaming, background and stdin commands', async () => {
    const sandbox = await Sandbox.create(opts);
    try {
      const ok = await sandbox.commands.run('echo out; echo err >&2', { envs: { A: '1' } });
      expect(ok).toMatchObject({ exitCode: 0, stdout: 'out\n', stderr: 'err\n' });
      expect((await sandbox.commands.run('echo $A', { envs: { A: 'from-env' } })).stdout).toBe('from-env\n');
      expect((await sandbox.commands.run('pwd')).stdout.trim()).toBe(warren.root);

      const failed = await sandbox.commands.run('echo partial; exit 3').catch((err: unknown) => err);
      expect(failed).toBeInstanceOf(CommandExitError);
      expect(failed).toMatchObject({ exitCode: 3, stdout: 'partial\n' });

      const chunks: string[] = [];
      await sandbox.commands.run('for i in 1 2 3; do echo line$i; sleep 0.05; done', { onStdout: (data) => void chunks.push(data) });
      expect(chunks.join('')).toBe('line1\nline2\nline3\n');

      const background = await sandbox.commands.run('sleep 30', { background: true });
      expect(background.pid).toBeGreaterThan(0);
      expect((await sandbox.commands.list()).map((p) => p.pid)).toContain(background.pid);
      expect(await sandbox.commands.kill(background.pid)).toBe(true);
      const killed = await background.wait().catch((err: unknown) => err);
      expect(killed).toBeInstanceOf(CommandExitError);
      expect((killed as CommandExitError).exitCode).toBe(-1);
      expect(await sandbox.commands.kill(999_999)).toBe(false);

      const cat = await sandbox.commands.run('cat', { background: true, stdin: true });
      await sandbox.commands.sendStdin(cat.pid, 'hello stdin\n');
      await sandbox.commands.closeStdin(cat.pid);
      expect((await cat.wait()).stdout).toBe('hello stdin\n');

      // Calls through the gateway are counted as the relay counts Warren's own.
      const metrics = await (await fetch(`${warren.url}/metrics`, { headers: { authorization: `Bearer ${warren.apiKey}` } })).text();
      expect(metrics).toMatch(/warren_calls_total\{method="process\.start",outcome="ok"\} [1-9]/);
      expect(metrics).toMatch(/warren_calls_total\{method="process\.write",outcome="ok"\} [1-9]/);
    } finally {
      await sandbox.kill();
    }
  });

  it('ends a command at its timeout with the SDK timeout error', async () => {
    const sandbox = await Sandbox.create(opts);
    try {
      const started = Date.now();
      const err = await sandbox.commands.run('sleep 20', { timeoutMs: 1000 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TimeoutError);
      expect((err as Error).message).toMatch(/timeoutMs/);
      expect(Date.now() - started).toBeLessThan(10_000);
    } finally {
      await sandbox.kill();
    }
  });

  it('runs a terminal: output, input, resize, reconnect, kill', async () => {
    const sandbox = await Sandbox.create(opts);
    try {
      let out = '';
      const decoder = new TextDecoder();
      const terminal = await sandbox.pty.create({ cols: 40, rows: 10, onData: (data) => void (out += decoder.decode(data)), envs: { PS1: '$ ' } });
      const waitFor = async (pattern: RegExp) => {
        for (let i = 0; i < 250 && !pattern.test(out); i++) await new Promise((r) => setTimeout(r, 20));
        expect(out).toMatch(pattern);
      };
      expect((await sandbox.commands.list()).map((p) => p.pid)).toContain(terminal.pid);
      await sandbox.pty.sendInput(terminal.pid, new TextEncoder().encode('stty size\r'));
      await waitFor(/10 40/);
      await sandbox.pty.resize(terminal.pid, { cols: 100, rows: 33 });
      await terminal.disconnect();
      let again = '';
      const reattached = await sandbox.pty.connect(terminal.pid, { onData: (data) => void (again += decoder.decode(data)) });
      await sandbox.pty.sendInput(terminal.pid, new TextEncoder().encode('stty size; exit 7\r'));
      const exit = await reattached.wait().catch((err: unknown) => err);
      expect(exit).toBeInstanceOf(CommandExitError);
      expect((exit as CommandExitError).exitCode).toBe(7);
      expect(again).toMatch(/33 100/);

      const killed = await sandbox.pty.create({ cols: 80, rows: 24, onData: () => undefined });
      expect(await sandbox.pty.kill(killed.pid)).toBe(true);
      await expect(killed.wait()).rejects.toThrow(CommandExitError);
      expect(await sandbox.pty.kill(killed.pid)).toBe(false);
    } finally {
      await sandbox.kill();
    }
  });
});
