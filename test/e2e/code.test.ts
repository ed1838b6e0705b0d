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

  it('runs TypeScript (the daemon loads its type stripper on the first TypeScript cell)', async () => {
    const result = await sandbox.code.run('interface P { n: number }\nconst p: P = { n: 21 };\np.n * 2', { language: 'typescript' });
    expect(result.error).toBeNull();
    expect(mainText(result.results)).toBe('42');
    await expect(sandbox.code.run('const = ;', { language: 'typescript' })).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
  });

  it('bounds a fork bomb by the pids limit and the timeout; removing its context ends every process it made within seconds', async () => {
    // A sandbox of its own: a bomb that outlives a failed attempt must not starve the cases after it.
    await using bombed = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, image: IMAGE, pidsLimit: 256, memoryMb: 2048 });
    const before = await bombed.daemonInfo();
    const bombCode = 'import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)';
    const timed = await bombed.code.createContext();
    const live = await bombed.code.createContext();
    try {
      const bomb = await bombed.code.run(bombCode, { context: timed, timeoutMs: 5_000 }).catch((err: unknown) => err);
      // Interrupted at the timeout, or killed when the forked copies kept it from stopping: either way bounded.
      if (!(bomb instanceof KernelDiedError) && (bomb as { timedOut?: boolean }).timedOut !== true) {
        throw new Error(`the fork bomb was not bounded: ${bomb instanceof Error ? `${bomb.name}: ${bomb.message}` : JSON.stringify(bomb).slice(0, 500)}`);
      }
      // Removed while the bomb runs: the kernel's group is killed whole, the run ends as KERNEL_DIED.
      const running = bombed.code.run(bombCode, { context: live, timeoutMs: 120_000 }).catch((err: unknown) => err);
      await new Promise((resolve) => setTimeout(resolve, 5_000));
      const removing = Date.now();
      expect(await bombed.code.removeContext(live, { timeoutMs: 150_000 })).toBe(true);
      const removalMs = Date.now() - removing;
      expect(await running).toBeInstanceOf(KernelDiedError);
      const fresh = Date.now();
      expect((await bombed.commands.run('echo still here', { timeoutMs: 60_000 })).stdout).toBe('still here\n');
      const after = await bombed.code.run('6 * 7', { timeoutMs: 60_000 });
      process.stderr.write(
        `code: removeContext during a fork bomb took ${removalMs} ms; the next command and a first cell in a new kernel took ${Date.now() - fresh} ms\n`,
      );
      expect(mainText(after.results)).toBe('42');
    } finally {
      await bombed.code.removeContext(timed, { timeoutMs: 150_000 }).catch(() => undefined);
      await bombed.code.removeContext(live, { timeoutMs: 150_000 }).catch(() => undefined);
    }
    expect((await bombed.daemonInfo()).pid).toBe(before.pid);
  }, 300_000);

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

  it('caps a gigabyte of print to its head and tail inside the kernel, counts every byte, and the kernel keeps its state', async () => {
    const before = await limited.daemonInfo();
    const js = await limited.code.createContext({ language: 'javascript' });
    const ctx = await limited.code.createContext();
    try {
      await limited.code.run('const other = "unaffected"', { context: js });
      await limited.code.run('kept = "still here"', { context: ctx });
      // 512 MiB of memory: ipykernel alone would hold the whole gigabyte between two flushes and die.
      const started = Date.now();
      const flood = await limited.code.run('import sys\nline = "x" * 1_000_000\nfor _ in range(1000):\n    sys.stdout.write(line)\nprint("END")\n"done"', {
        context: ctx,
        timeoutMs: 300_000,
      });
      process.stderr.write(`code: a gigabyte of print took ${Date.now() - started} ms\n`);
      expect(flood).toMatchObject({ error: null, stdoutBytes: 1_000_000_004, truncated: true });
      expect(flood.stdout.length).toBeLessThan(1_100_000);
      expect(flood.stdout.startsWith('xxxx')).toBe(true);
      expect(flood.stdout.endsWith('xxxxEND\n')).toBe(true);
      expect(flood.stdout).toMatch(/\[\.\.\. \d+ bytes omitted \.\.\.\]/);
      expect(mainText(flood.results)).toBe("'done'");
      // Print loops and a subprocess writing to the file descriptor are capped the same way.
      const lines = await limited.code.run('for i in range(2_000_000):\n    print(i)', { context: ctx, timeoutMs: 300_000 });
      const digits = [...Array(7).keys()].reduce((sum, d) => sum + (Math.min(2_000_000, 10 ** (d + 1)) - (d === 0 ? 0 : 10 ** d)) * (d + 1), 0);
      expect(lines).toMatchObject({ stdoutBytes: digits + 2_000_000, truncated: true });
      expect(lines.stdout.endsWith('1999999\n')).toBe(true);
      const sub = await limited.code.run('import subprocess\nsubprocess.run(["head", "-c", "300000000", "/dev/zero"]).returncode', {
        context: ctx,
        timeoutMs: 300_000,
      });
      expect(sub).toMatchObject({ stdoutBytes: 300_000_000, truncated: true });
      expect(mainText(sub.results)).toBe('0');
      expect(mainText((await limited.code.run('kept', { context: ctx })).results)).toBe("'still here'");

      const giant = await limited.code.run('display({"text/plain": "y" * 100_000_000}, raw=True)\n"after"', { context: ctx, timeoutMs: 120_000 });
      expect(giant.truncated).toBe(true);
      expect(giant.results[0]?.data['text/plain']).toMatch(/text\/plain output of 100000000 bytes omitted/);
      expect(mainText(giant.results)).toBe("'after'");
      const after = await limited.daemonInfo();
      process.stderr.write(`code: daemon RSS ${(before.rssBytes / 2 ** 20).toFixed(1)} -> ${(after.rssBytes / 2 ** 20).toFixed(1)} MiB\n`);
      expect(after.pid).toBe(before.pid);
      expect(after.rssBytes - before.rssBytes).toBeLessThan(256 * 2 ** 20);
      expect(mainText((await limited.code.run('other', { context: js })).results)).toBe("'unaffected'");
    } finally {
      await limited.code.removeContext(ctx);
      await limited.code.removeContext(js);
    }
  });

  it("caps print('x' * 10**9), one gigabyte in one write", async () => {
    await using roomy = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, image: IMAGE, memoryMb: 3072 });
    await roomy.code.run('kept = 1');
    const big = await roomy.code.run("print('x' * 10**9)", { timeoutMs: 300_000 });
    expect(big).toMatchObject({ error: null, stdoutBytes: 1_000_000_001, truncated: true });
    expect(big.stdout.length).toBeLessThan(1_100_000);
    expect(mainText((await roomy.code.run('kept + 1')).results)).toBe('2');
  }, 300_000);
});
