import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { KernelDiedError, Sandbox, type CodeDisplay } from '@warren/sdk';
import { startTestController, type TestController } from '../support/fixtures.js';

// The default image carries the kernel; WARREN_CODE_IMAGE tests a variant built under another tag.
const IMAGE = process.env.WARREN_CODE_IMAGE ?? 'warren/sandbox:latest';
const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

function mainText(results: CodeDisplay[]): unknown {
  return results.find((r) => r.isMainResult)?.data['text/plain'];
}

describe('the code interpreter in real sandboxes', () => {
  let warren: TestController;
  let sandbox: Sandbox;
  let limited: Sandbox;
  beforeAll(async () => {
    warren = await startTestController();
    [sandbox, limited] = await Promise.all([
      Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, image: IMAGE }),
      Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, image: IMAGE, pidsLimit: 256, memoryMb: 512 }),
    ]);
  }, 120_000);
  afterAll(async () => {
    await sandbox?.kill().catch(() => undefined);
    await limited?.kill().catch(() => undefined);
    await warren?.[Symbol.asyncDispose]();
  });

  it('runs Python as the sandbox user in a kernel that keeps state, and returns a chart as a PNG', async () => {
    const started = Date.now();
    const first = await sandbox.code.run('import os\nn = 21\n(os.getuid(), os.getcwd())', { timeoutMs: 60_000 });
    process.stderr.write(`code: first run (kernel start) ${Date.now() - started} ms\n`);
    expect(first.error).toBeNull();
    expect(mainText(first.results)).toBe("(1000, '/workspace')");
    expect(mainText((await sandbox.code.run('n * 2')).results)).toBe('42');
    const chart = await sandbox.code.run('import matplotlib.pyplot as plt\nimport numpy as np\nplt.plot(np.arange(10) ** 2)\nNone');
    const png = Buffer.from((chart.results.find((r) => r.data['image/png'])?.data['image/png'] as string | undefined) ?? '', 'base64');
    expect(png.subarray(0, 8).equals(PNG_SIGNATURE)).toBe(true);
    expect(png.subarray(12, 16).toString('latin1')).toBe('IHDR');
  });

  it('runs JavaScript with the sandbox Node runtime, as the sandbox user', async () => {
    const js = await sandbox.code.createContext({ language: 'javascript' });
    try {
      await sandbox.code.run('const base = 40', { context: js });
      const result = await sandbox.code.run('[base + 2, process.getuid()]', { context: js });
      expect(result.error).toBeNull();
      expect(mainText(result.results)).toBe('[ 42, 1000 ]');
    } finally {
      await sandbox.code.removeContext(js);
    }
  });

  it('bounds a fork bomb by the pids limit and the timeout; removing its context ends every process it made', async () => {
    const before = await limited.daemonInfo();
    const ctx = await limited.code.createContext();
    const bomb = await limited.code
      .run('import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)', { context: ctx, timeoutMs: 5_000 })
      .catch((err: unknown) => err);
    // Interrupted at the timeout, or killed when the forked copies kept it from stopping: either way bounded.
    expect(bomb instanceof KernelDiedError || (bomb as { timedOut?: boolean }).timedOut === true).toBe(true);
    await limited.code.removeContext(ctx);
    expect((await limited.daemonInfo()).pid).toBe(before.pid);
    expect((await limited.commands.run('echo still here')).stdout).toBe('still here\n');
  });

  it('reports a kernel killed by the memory limit as KERNEL_DIED, and a restart brings a fresh one', async () => {
    const ctx = await limited.code.createContext();
    try {
      await limited.code.run('marker = 1', { context: ctx });
      const bomb = limited.code.run('a = []\nwhile True:\n    a.append(bytearray(16 << 20))', { context: ctx, timeoutMs: 60_000 });
      await expect(bomb).rejects.toBeInstanceOf(KernelDiedError);
      await limited.code.restartContext(ctx);
      expect((await limited.code.run('marker', { context: ctx })).error?.name).toBe('NameError');
      expect((await limited.commands.run('echo alive')).stdout).toBe('alive\n');
    } finally {
      await limited.code.removeContext(ctx);
    }
  });

  it('caps a gigabyte of print and a gigabyte-sized display output without the daemon growing', async () => {
    const before = await sandbox.daemonInfo();
    const flood = await sandbox.code.run('import sys\nline = "x" * 1_000_000\nfor _ in range(1000):\n    sys.stdout.write(line)\n"done"', {
      timeoutMs: 300_000,
    });
    expect(flood.stdoutBytes).toBe(1_000_000_000);
    expect(flood.truncated).toBe(true);
    expect(flood.stdout.length).toBeLessThan(1_100_000);
    expect(mainText(flood.results)).toBe("'done'");
    const giant = await sandbox.code.run('display({"text/plain": "y" * 100_000_000}, raw=True)\n"after"', { timeoutMs: 120_000 });
    expect(giant.truncated).toBe(true);
    expect(mainText(giant.results)).toBe("'after'");
    const after = await sandbox.daemonInfo();
    process.stderr.write(`code: daemon RSS ${(before.rssBytes / 2 ** 20).toFixed(1)} -> ${(after.rssBytes / 2 ** 20).toFixed(1)} MiB after a 1 GB print\n`);
    expect(after.rssBytes - before.rssBytes).toBeLessThan(256 * 2 ** 20);
    expect(mainText((await sandbox.code.run('n')).results)).toBe('21');
  });
});
