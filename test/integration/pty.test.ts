import { describe, expect, it } from '@jest/globals';
import { NotFoundError, PathNotInSandboxError, Pty } from '@warren/sdk';
import { startTestAgent } from '../support/fixtures.js';

describe('pty over a real socket to an in-process agent', () => {
  it('runs a program on a terminal: raw bytes both ways, resize, exit status', async () => {
    await using agent = await startTestAgent();
    const pty = new Pty(() => agent.connection);
    const term = await pty.create({ cols: 40, rows: 10, cmd: ['/bin/sh'], env: { PS1: '$ ' } });
    let out = '';
    const reading = (async () => {
      for await (const chunk of term) out += chunk.toString('utf8');
    })();
    const waitFor = async (pattern: RegExp) => {
      while (!pattern.test(out)) await new Promise((r) => setTimeout(r, 20));
    };
    await term.write(Buffer.from('printf "\\303\\251\\n"; stty size; pwd\r'));
    await waitFor(/é\r\n10 40\r\n/);
    // pwd's line may arrive in a later chunk than stty's.
    while (!out.includes(agent.root)) await new Promise((r) => setTimeout(r, 20));
    await term.resize(100, 33);
    await term.write('stty size; exit 9\r');
    expect(await term.wait()).toMatchObject({ exitCode: 9, signal: null });
    await reading;
    expect(out).toMatch(/33 100\r\n/);
  });

  it('resolves its working folder through the policy', async () => {
    await using agent = await startTestAgent();
    const pty = new Pty(() => agent.connection);
    await expect(pty.create({ cols: 80, rows: 24, cwd: '/etc' })).rejects.toBeInstanceOf(PathNotInSandboxError);
  });

  it('names a program that is not there instead of starting a terminal', async () => {
    await using agent = await startTestAgent();
    const pty = new Pty(() => agent.connection);
    await expect(pty.create({ cols: 80, rows: 24, cmd: ['/nonexistent/tool'] })).rejects.toThrow(NotFoundError);
    await expect(pty.create({ cols: 80, rows: 24, cmd: ['no-such-program-here'] })).rejects.toThrow(
      /No program 'no-such-program-here' in the sandbox \(looked in PATH=/,
    );
    const found = await pty.create({ cols: 80, rows: 24, cmd: ['true'] });
    expect(await found.wait()).toMatchObject({ exitCode: 0 });
  });
});
