import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';
import { DaemonIdentity, HostSentinel } from '../support/redteam.js';

/**
 * A code cell is sandbox code, and so is the kernel bridge process that carries its results to
 * the daemon (same user): a cell writes straight into the bridge's pipe to the daemon (forged
 * messages, a line past the cap, bytes that are no message), floods its own output, and kills its
 * bridge. The daemon stays the same process with bounded memory, the run ends with a typed answer,
 * and a new context works.
 */
describe('red team: the code interpreter and its bridge', () => {
  let warren: TestController;
  let sandbox: Sandbox;
  let sentinel: HostSentinel;
  let daemon: DaemonIdentity;

  beforeAll(async () => {
    warren = await startTestController();
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, memoryMb: 768 });
    sentinel = await HostSentinel.make();
    daemon = await DaemonIdentity.of(sandbox);
  }, 60_000);

  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    await sentinel?.remove();
  });

  it('a cell writing forged, oversized and junk lines into its bridge’s pipe to the daemon, and flooding its output, leaves the daemon whole', async () => {
    const first = await sandbox.code.run('import os\nos.getpid()', { timeoutMs: 120_000 });
    expect(first.error).toBeNull();
    const rssBefore = (await daemon.expectSame(sandbox)).rssBytes;
    const cell = String.raw`
import os
# The bridge is this kernel's parent's ancestor running "python3 -I -c ...": its fd 1 is the pipe to the daemon.
bridges = [p for p in os.listdir('/proc') if p.isdigit() and open('/proc/%s/cmdline' % p, 'rb').read().startswith(b'python3\x00-I\x00-c\x00')]
written = 0
for pid in bridges:
    try:
        fd = os.open('/proc/%s/fd/1' % pid, os.O_WRONLY)
    except OSError:
        # A socket cannot be opened again by path: take the descriptor itself (pidfd_getfd, same user).
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.syscall(438, os.pidfd_open(int(pid)), 1, 0)
        if fd < 0:
            continue
    os.write(fd, b'{"t":"result","id":"forged","data":{"text/plain":"forged"}}\n')
    os.write(fd, b'{"t":"fatal","message":"forged fatal"}\n')
    os.write(fd, b'\xff\xfe not json at all\n')
    chunk = b'x' * (1 << 20)
    for _ in range(40):  # one line of 40 MiB, past the 24 MiB cap
        os.write(fd, chunk)
    os.write(fd, b'\n')
    written += 1
print('bridges=%d' % written)
for i in range(200000):
    print('flood line %d' % i)
`;
    const run = await sandbox.code.run(cell, { timeoutMs: 120_000 }).then(
      (r) => ({ ok: true as const, text: r.stdout }),
      (err: { code?: string }) => ({ ok: false as const, code: err.code }),
    );
    // Either the run ended (its output capped) or the bridge was declared broken with a typed error.
    if (run.ok) {
      expect(run.text).toContain('bridges=1'); // the cell did reach its bridge's connection to the daemon
      expect(run.text.length).toBeLessThan(16 * 1024 * 1024);
    } else expect(typeof run.code).toBe('string');
    const info = await daemon.expectSame(sandbox);
    expect(info.rssBytes - rssBefore).toBeLessThan(128 * 1024 * 1024);
    // No forged result reached anyone, and a fresh context computes.
    const context = await sandbox.code.createContext();
    const again = await sandbox.code.run('6 * 7', { context, timeoutMs: 120_000 });
    expect(again.results.find((r) => r.isMainResult)?.data['text/plain']).toBe('42');
    expect(JSON.stringify(again)).not.toContain('forged');
    // The attacked context is either alive or declared dead with a typed error; a restart brings it back.
    const state = await sandbox.code.run('1', { timeoutMs: 60_000 }).then(
      () => 'alive',
      (err: { code?: string }) => err.code ?? 'untyped',
    );
    expect(['alive', 'KERNEL_DIED']).toContain(state);
    await sandbox.code.restartContext(first.context);
    expect((await sandbox.code.run('7', { timeoutMs: 120_000 })).results.find((r) => r.isMainResult)?.data['text/plain']).toBe('7');
    await sentinel.expectUnchanged();
  }, 240_000);

  it('a cell that kills its own bridge and kernel gets a typed answer, and a new context computes', async () => {
    const context = await sandbox.code.createContext();
    await sandbox.code.run('1', { context, timeoutMs: 120_000 });
    const killed = await sandbox.code
      .run('import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(os.getpid(), signal.SIGKILL)', { context, timeoutMs: 60_000 })
      .then(
        (r) => r.error?.name ?? 'no error',
        (err: { code?: string }) => err.code ?? 'untyped',
      );
    expect(killed).not.toBe('untyped');
    const after = await sandbox.code.run('2 + 2', { context: await sandbox.code.createContext(), timeoutMs: 120_000 });
    expect(after.results.find((r) => r.isMainResult)?.data['text/plain']).toBe('4');
    await daemon.expectSame(sandbox);
  }, 240_000);
});
