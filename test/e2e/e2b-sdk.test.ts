import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { CommandExitError, Sandbox } from 'e2b';
import { startTestController, type TestController } from '../support/fixtures.js';

/**
 * The real `e2b` SDK against a real controller and real containers: the `base` template is
 * warren/e2b-base with Warren's default hardening, user `user` at /home/user (docs/e2b.md).
 */
describe('the e2b SDK on real sandboxes', () => {
  let warren: TestController;
  let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
  beforeAll(async () => {
    warren = await startTestController();
    opts = { apiKey: warren.apiKey, apiUrl: `${warren.url}/e2b`, sandboxUrl: `${warren.url}/e2b` };
  });
  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
  });

  it('runs a program the way E2B documents it: files, commands, exit codes, a terminal', async () => {
    const sandbox = await Sandbox.create({ ...opts, envs: { GREETING: 'hi' } });
    try {
      await sandbox.files.write('hello.py', 'import os\nprint(os.environ["GREETING"], "from the sandbox")\n');
      expect((await sandbox.commands.run('python3 hello.py')).stdout).toBe('hi from the sandbox\n');
      // Where E2B programs expect to be: user `user`, home and working folder /home/user, writable.
      expect((await sandbox.commands.run('pwd')).stdout.trim()).toBe('/home/user');
      expect((await sandbox.commands.run('whoami')).stdout.trim()).toBe('user');
      expect((await sandbox.commands.run('echo $HOME')).stdout.trim()).toBe('/home/user');
      expect((await sandbox.commands.run('id -u')).stdout.trim()).not.toBe('0');
      await sandbox.files.write('/home/user/abs.txt', 'absolute');
      expect(await sandbox.files.read('abs.txt')).toBe('absolute');
      expect((await sandbox.commands.run('cat /home/user/abs.txt && touch made-by-shell')).stdout).toBe('absolute');
      expect(await sandbox.files.exists('/home/user/made-by-shell')).toBe(true);
      await expect(sandbox.commands.run('exit 4')).rejects.toBeInstanceOf(CommandExitError);
      await expect(sandbox.commands.run('sudo true')).rejects.toBeInstanceOf(CommandExitError);
      await expect(sandbox.files.write('/etc/evil', 'x')).rejects.toThrow(/403|permission/i);
      const written = await sandbox.files.write([
        { path: 'a/one.txt', data: '1' },
        { path: 'a/two.txt', data: '2' },
      ]);
      expect(written).toHaveLength(2);
      expect((await sandbox.files.list('a')).map((e) => e.name).sort()).toEqual(['one.txt', 'two.txt']);

      let out = '';
      const terminal = await sandbox.pty.create({ cols: 80, rows: 24, onData: (d) => void (out += new TextDecoder().decode(d)) });
      await sandbox.pty.sendInput(terminal.pid, new TextEncoder().encode('echo pty-$((6*7)); exit\n'));
      await terminal.wait().catch(() => undefined);
      expect(out).toContain('pty-42');
    } finally {
      await sandbox.kill();
    }
  });
});
