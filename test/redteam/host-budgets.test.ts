import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';

/**
 * Sandbox code against the host's shared budgets (docs/security.md, "The doors"): the kernel's
 * keyrings are one budget per uid across the host, so the key calls are refused outright (the
 * seccomp profile); processes are capped by the sandbox's own pids cgroup, never by a per-uid
 * count shared with other sandboxes; open files by a per-process limit below the host's, so one
 * sandbox holds at most pids × files descriptors, each charged to its memory limit. (Inotify: see
 * `watches.test.ts` and Known limits.)
 */
describe("red team: the host's shared budgets", () => {
  let warren: TestController;
  let sandbox: Sandbox;

  beforeAll(async () => {
    warren = await startTestController({});
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, pidsLimit: 100 });
  }, 60_000);

  afterAll(async () => {
    await sandbox?.kill().catch(() => undefined);
    await warren?.[Symbol.asyncDispose]();
  });

  it('refuses the kernel key calls, and holds processes and open files to the sandbox', async () => {
    // x86_64 and arm64 numbers of add_key, request_key and keyctl.
    const keys = await sandbox.commands.run([
      'python3',
      '-c',
      [
        'import ctypes, os, platform',
        'libc = ctypes.CDLL(None, use_errno=True)',
        'numbers = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[platform.machine()]',
        'calls = [(b"user", b"k", b"v", 1, -3), (b"user", b"k", None, 0), (0, -3, 0, 0, 0)]',
        'for name, nr, args in zip(("add_key", "request_key", "keyctl"), numbers, calls):',
        '    r = libc.syscall(nr, *args)',
        '    print(name, r, os.strerror(ctypes.get_errno()) if r < 0 else "ok")',
      ].join('\n'),
    ]);
    expect(keys.stdout.trim().split('\n')).toEqual([
      'add_key -1 Operation not permitted',
      'request_key -1 Operation not permitted',
      'keyctl -1 Operation not permitted',
    ]);

    const limits = await sandbox.commands.run(
      'cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max; ulimit -Hn; cat /proc/sys/fs/file-max',
    );
    const [pidsMax, filesHard, hostFiles] = limits.stdout.trim().split('\n');
    expect(pidsMax).toBe('100');
    expect(Number(filesHard)).toBeLessThanOrEqual(65_536);
    expect(Number(filesHard) * Number(pidsMax)).toBeLessThan(Number(hostFiles));

    // A fork loop stops at the sandbox's own cap, and the sandbox keeps answering.
    const bomb = await sandbox.commands.run('for i in $(seq 1 300); do sleep 30 & done 2>/dev/null; ps -e --no-headers | wc -l', { timeoutMs: 60_000 });
    expect(Number(bomb.stdout.trim())).toBeLessThanOrEqual(100);
    expect((await sandbox.commands.run('echo alive')).stdout).toBe('alive\n');
  });
});
