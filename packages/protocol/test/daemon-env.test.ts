import { describe, expect, it } from '@jest/globals';
import { containerEnv, isDaemonGuarded, SANDBOX_ENV_VARIABLE, sandboxEnvFrom } from '../src/daemon-env.js';

/** The container's environment as the engine makes it: the image's ENV, then the container's entries over it. */
function engineMerge(imageEnv: string[], entries: string[]): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const entry of [...imageEnv, ...entries]) env[entry.slice(0, entry.indexOf('='))] = entry.slice(entry.indexOf('=') + 1);
  return env;
}

describe("the daemon's environment", () => {
  it('blanks what would run code inside the daemon, from the request and the image, and gives the real values back to commands', () => {
    const image = ['PATH=/usr/bin:/bin', 'LD_AUDIT=/img/audit.so', 'NODE_ENV=production', 'LD_WEIRD_NEW=x'];
    const request = { NODE_OPTIONS: '--require /workspace/pwn.js', LD_PRELOAD: '/workspace/pwn.so', GLIBC_TUNABLES: 'glibc.x=1', A: '1' };
    const daemonEnv = engineMerge(image, containerEnv(request, image));
    // What the daemon's process starts with: every guarded name empty, the rest as the sandbox set it.
    for (const name of ['NODE_OPTIONS', 'LD_PRELOAD', 'GLIBC_TUNABLES', 'LD_AUDIT', 'NODE_ENV', 'LD_WEIRD_NEW', 'GCONV_PATH', 'OPENSSL_CONF'])
      expect([name, daemonEnv[name]]).toEqual([name, '']);
    expect(daemonEnv.A).toBe('1');
    expect(daemonEnv.PATH).toBe('/usr/bin:/bin');
    // What commands get: the sandbox's own values, no empty leftovers, no hand-over.
    const commands = sandboxEnvFrom(daemonEnv);
    expect(commands).toEqual({
      PATH: '/usr/bin:/bin',
      A: '1',
      NODE_OPTIONS: '--require /workspace/pwn.js',
      LD_PRELOAD: '/workspace/pwn.so',
      GLIBC_TUNABLES: 'glibc.x=1',
      LD_AUDIT: '/img/audit.so',
      NODE_ENV: 'production',
      LD_WEIRD_NEW: 'x',
    });
    expect(daemonEnv[SANDBOX_ENV_VARIABLE]).toBeUndefined();
  });

  it("keeps a snapshot's real values: an image committed from a sandbox holds the blanks and the hand-over", () => {
    const first = containerEnv({ NODE_OPTIONS: '--max-old-space-size=64', B: '2' });
    const committed = first; // the committed image's ENV is the container's
    const daemonEnv = engineMerge(committed, containerEnv({ C: '3' }, committed));
    expect(daemonEnv.NODE_OPTIONS).toBe('');
    expect(sandboxEnvFrom(daemonEnv)).toEqual({ B: '2', C: '3', NODE_OPTIONS: '--max-old-space-size=64' });
  });

  it('a request cannot forge the hand-over or un-blank a name', () => {
    const entries = containerEnv({ [SANDBOX_ENV_VARIABLE]: 'forged', NODE_OPTIONS: '--title=x' });
    expect(entries.filter((e) => e.startsWith(`${SANDBOX_ENV_VARIABLE}=`))).toHaveLength(1);
    expect(entries).toContain('NODE_OPTIONS=');
    expect(entries).not.toContain('NODE_OPTIONS=--title=x');
    // Without a hand-over (an older controller) the fixed list stays out of commands, the rest is kept.
    expect(sandboxEnvFrom({ NODE_OPTIONS: '', A: '1' })).toEqual({ A: '1' });
    expect(isDaemonGuarded('LD_ANYTHING')).toBe(true);
    expect(isDaemonGuarded('LDX')).toBe(false);
  });
});
