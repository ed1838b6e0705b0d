import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { encodeGrant } from '@warren/protocol';
import { callMCPTool, Code, codeInterpreterTools, dispatchAnthropicToolUse, ForbiddenError, KernelDiedError, runToolCall, type CodeDisplay } from '@warren/sdk';
import { startTestAgent, type TestAgent } from '../support/fixtures.js';

// Needs Debian's python3-ipykernel, python3-matplotlib and python3-pandas on this machine (scripts/test installs them).

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

function mainText(results: CodeDisplay[]): unknown {
  return results.find((r) => r.isMainResult)?.data['text/plain'];
}

describe('code.run on an in-process agent', () => {
  let agent: TestAgent;
  let code: Code;
  beforeAll(async () => {
    agent = await startTestAgent();
    code = new Code(() => agent.connection);
  });
  afterAll(async () => {
    await agent[Symbol.asyncDispose]();
  });

  it('keeps state across cells of the default Python context and answers the last value with the execution count', async () => {
    const first = await code.run('import math\nx = 40\nprint("set", x)', { timeoutMs: 30_000 });
    expect(first).toMatchObject({ context: 'default-python', language: 'python', stdout: 'set 40\n', error: null, results: [], timedOut: false });
    const second = await code.run('x + round(math.sqrt(4))');
    expect(mainText(second.results)).toBe('42');
    expect(second.executionCount).toBe((first.executionCount ?? 0) + 1);
  });

  it('returns a matplotlib chart as a PNG without savefig, and HTML from pandas', async () => {
    const chart = await code.run('import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.title("squares")\nNone');
    const png = chart.results.find((r) => typeof r.data['image/png'] === 'string');
    expect(png).toBeDefined();
    const bytes = Buffer.from(png!.data['image/png'] as string, 'base64');
    expect(bytes.subarray(0, 8).equals(PNG_SIGNATURE)).toBe(true);
    expect(bytes.subarray(12, 16).toString('latin1')).toBe('IHDR');
    expect(bytes.readUInt32BE(16)).toBeGreaterThan(100); // width
    expect(bytes.readUInt32BE(20)).toBeGreaterThan(100); // height
    const table = await code.run('import pandas as pd\npd.DataFrame({"a": [1, 2]})');
    expect(String(table.results[0]?.data['text/html'])).toContain('<table');
  });

  it('returns SVG, JSON and Markdown display outputs as their MIME types', async () => {
    const rich = await code.run(
      'from IPython.display import SVG, JSON, Markdown, display\ndisplay(SVG(\'<svg xmlns="http://www.w3.org/2000/svg" width="2" height="2"/>\'))\ndisplay(JSON({"a": [1, 2]}))\ndisplay(Markdown("**bold**"))',
    );
    expect(rich.error).toBeNull();
    expect(String(rich.results[0]?.data['image/svg+xml'])).toContain('<svg');
    expect(rich.results[1]?.data['application/json']).toEqual({ a: [1, 2] });
    expect(rich.results[2]?.data['text/markdown']).toBe('**bold**');
    expect(rich.results.every((r) => !r.isMainResult)).toBe(true);
  });

  it('reports an exception as an error with name, value and traceback, and the context lives on', async () => {
    const failed = await code.run('def f():\n    return 1 / 0\nf()');
    expect(failed.error).toMatchObject({ name: 'ZeroDivisionError', value: 'division by zero' });
    expect(failed.error!.traceback).toContain('return 1 / 0');
    expect(failed.error!.traceback).not.toContain('\u001b[');
    expect(mainText((await code.run('x')).results)).toBe('40');
  });

  it('streams stdout, stderr, results and errors in the order the cell produced them', async () => {
    const seen: string[] = [];
    const result = await code.run(
      'import sys, time\nprint("a", flush=True)\ntime.sleep(0.2)\nprint("b", file=sys.stderr, flush=True)\ntime.sleep(0.2)\ndisplay(7)\nraise ValueError("c")',
      {
        onStdout: (text) => seen.push(`out:${text.trim()}`),
        onStderr: (text) => seen.push(`err:${text.trim()}`),
        onResult: (r) => seen.push(`result:${String(r.data['text/plain'])}`),
        onError: (e) => seen.push(`error:${e.name}`),
      },
    );
    expect(seen).toEqual(['out:a', 'err:b', 'result:7', 'error:ValueError']);
    expect(result.stderr).toBe('b\n');
  });

  it('interrupts a cell at its timeout and keeps the kernel and its variables', async () => {
    await code.run('kept = "still here"');
    const started = Date.now();
    const looped = await code.run('while True:\n    pass', { timeoutMs: 1500 });
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(looped).toMatchObject({ timedOut: true, error: { name: 'KeyboardInterrupt' } });
    expect(mainText((await code.run('kept')).results)).toBe("'still here'");
  });

  it('interrupts a cell when the call is aborted, and the context keeps its state', async () => {
    const abort = new AbortController();
    const running = code.run('import time\ntime.sleep(60)', { signal: abort.signal });
    setTimeout(() => abort.abort(), 1000);
    await expect(running).rejects.toMatchObject({ code: 'CANCELLED' });
    expect(mainText((await code.run('kept')).results)).toBe("'still here'");
  });

  it('keeps contexts apart and runs two of them at once', async () => {
    const a = await code.createContext({ language: 'python' });
    const b = await code.createContext({ language: 'python' });
    try {
      await code.run('secret = "a"', { context: a });
      const missing = await code.run('secret', { context: b });
      expect(missing.error?.name).toBe('NameError');
      const started = Date.now();
      const [ra, rb] = await Promise.all([
        code.run('import time\ntime.sleep(1.5)\n"A"', { context: a }),
        code.run('import time\ntime.sleep(1.5)\n"B"', { context: b }),
      ]);
      expect([mainText(ra.results), mainText(rb.results)]).toEqual(["'A'", "'B'"]);
      expect(Date.now() - started).toBeLessThan(2900);
      expect((await code.listContexts()).map((c) => c.id)).toEqual(expect.arrayContaining([a.id, b.id, 'default-python']));
    } finally {
      expect(await code.removeContext(a)).toBe(true);
      expect(await code.removeContext(b)).toBe(true);
    }
    expect(await code.removeContext(a)).toBe(false);
  });

  it('reports a kernel that dies as KERNEL_DIED until the context is restarted, with fresh state', async () => {
    const ctx = await code.createContext();
    try {
      await code.run('doomed = 1', { context: ctx });
      await expect(code.run('import os\nos.kill(os.getpid(), 9)', { context: ctx })).rejects.toBeInstanceOf(KernelDiedError);
      await expect(code.run('doomed', { context: ctx })).rejects.toMatchObject({ code: 'KERNEL_DIED' });
      expect((await code.listContexts()).find((c) => c.id === ctx.id)?.alive).toBe(false);
      await code.restartContext(ctx);
      expect((await code.run('doomed', { context: ctx })).error?.name).toBe('NameError');
      expect(mainText((await code.run('kept')).results)).toBe("'still here'"); // the default context never noticed
    } finally {
      await code.removeContext(ctx);
    }
  });

  it('kills the kernel of a cell that ignores the interrupt, and says so', async () => {
    const ctx = await code.createContext();
    try {
      const started = Date.now();
      const stubborn = code.run('import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.1)', {
        context: ctx,
        timeoutMs: 1000,
      });
      await expect(stubborn).rejects.toMatchObject({ code: 'KERNEL_DIED', message: expect.stringContaining('did not stop when interrupted') });
      expect(Date.now() - started).toBeLessThan(15_000);
    } finally {
      await code.removeContext(ctx);
    }
  });

  it('caps a flood of output with the head-and-tail rule and counts every byte', async () => {
    const flood = await code.run('import sys\nfor i in range(200):\n    sys.stdout.write(str(i % 10) * 100_000)\nprint("END")', {
      outputCapBytes: 64 * 1024,
      timeoutMs: 60_000,
    });
    expect(flood.truncated).toBe(true);
    expect(flood.stdoutBytes).toBe(200 * 100_000 + 4);
    expect(flood.stdout.length).toBeLessThan(70 * 1024);
    expect(flood.stdout.startsWith('0000')).toBe(true);
    expect(flood.stdout.endsWith('END\n')).toBe(true);
    expect(flood.stdout).toMatch(/\[\.\.\. \d+ bytes omitted \.\.\.\]/);
  });

  it('caps output inside the kernel and counts the bytes it left out exactly, multi-byte characters included', async () => {
    const wide = await code.run('print("\u00e9" * 5_000_000)', { timeoutMs: 60_000 });
    expect(wide).toMatchObject({ error: null, stdoutBytes: 10_000_001, truncated: true });
    expect(wide.stdout.startsWith('\u00e9\u00e9')).toBe(true);
    expect(wide.stdout.endsWith('\u00e9\u00e9\n')).toBe(true);
    expect(mainText((await code.run('kept')).results)).toBe("'still here'");
  });

  it('reads hostile bytes as data: escape sequences arrive as written, invalid UTF-8 on a file descriptor as U+FFFD, and the stream flows on', async () => {
    const result = await code.run(
      'import os, sys, time\nsys.stdout.write("\\x1b[31mred\\x1b[0m \\x1b]0;title\\x07\\n")\nsys.stdout.flush()\nos.write(1, b"bad\\xff\\xfe\\n")\nos.write(1, b"after\\n" * 20000)\ntime.sleep(0.5)',
      { timeoutMs: 30_000 },
    );
    expect(result.error).toBeNull();
    expect(result.stdout.startsWith('\u001b[31mred\u001b[0m \u001b]0;title\u0007\nbad\ufffd\ufffd\nafter\n')).toBe(true);
    expect(result.stdoutBytes).toBe(24 + 10 + 6 * 20000);
    // The reader survived the bad bytes: a later cell's descriptor output still arrives.
    const later = await code.run('import os, time\nos.write(1, b"later\\n")\ntime.sleep(0.3)');
    expect(later.stdout).toBe('later\n');
  });

  it('keeps only MIME-type names in a display bundle, at most 64, and says what it left out', async () => {
    const result = await code.run(
      'extra = {"application/x-n%d" % i: str(i) for i in range(100)}\ndisplay({"text/plain": "ok", "x" * 300: "a", "not a mime": "b", "text/html\\n": "c", "../../etc": "d", **extra}, raw=True)\n"next"',
      { timeoutMs: 30_000 },
    );
    const bundle = result.results[0]!;
    expect(bundle.truncated).toBe(true);
    expect(Object.keys(bundle.data).length).toBeLessThanOrEqual(65);
    for (const name of Object.keys(bundle.data)) expect(name).toMatch(/^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*\/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*$/);
    expect(String(bundle.data['text/plain'])).toMatch(/^ok\n\[\d+ outputs omitted: their names are not MIME types/);
    expect(mainText(result.results)).toBe("'next'");
  });

  it('clips an exception name of 100 000 characters and keeps one with escape codes as data', async () => {
    const long = await code.run('raise type("E" * 100_000, (Exception,), {})("v")');
    expect(long.error!.name.length).toBeLessThan(1100);
    expect(long.error!.name).toMatch(/^E+\[\.\.\. 99000 characters omitted\]$/);
    const escaped = await code.run('raise type("Bad\\x1b[2J", (Exception,), {})("v\\x1b]0;t\\x07")');
    expect(escaped.error).toMatchObject({ name: 'Bad\u001b[2J', value: 'v\u001b]0;t\u0007' });
  });

  it('never passes an image output that is not what it claims to a tool as an image', async () => {
    const tools = codeInterpreterTools({ code });
    const fake = [
      'import base64',
      'display({"image/png": "not base64 at all!", "text/plain": "fake one"}, raw=True)',
      'display({"image/png": base64.b64encode(b"GIF89a" + bytes(64)).decode()}, raw=True)',
      'display({"image/jpeg": 12345}, raw=True)',
    ].join('\n');
    const mcp = await callMCPTool(tools, 'run_code', { code: fake });
    expect(mcp.content.map((c) => c.type)).toEqual(['text']);
    const text = (mcp.content[0] as { text: string }).text;
    expect(text.match(/not a valid (PNG|JPEG) image \(left out\)/g)).toHaveLength(3);
    expect(text).toContain('[display] fake one');
    const anthropic = await dispatchAnthropicToolUse(tools, { type: 'tool_use', id: 't2', name: 'run_code', input: { code: fake } }, { images: true });
    expect(JSON.stringify(anthropic.content)).not.toContain('"type":"image"');
  });

  it('leaves out a giant display output, says so, and the daemon and the kernel carry on', async () => {
    const giant = await code.run('display({"text/plain": "x" * (40 * 1024 * 1024)}, raw=True)\n"after"', { timeoutMs: 60_000 });
    expect(giant.truncated).toBe(true);
    expect(JSON.stringify(giant.results).length).toBeLessThan(64 * 1024);
    expect(String(giant.results[0]?.data['text/plain'])).toContain('omitted');
    expect(mainText(giant.results)).toBe("'after'");
    expect(mainText((await code.run('kept')).results)).toBe("'still here'");
  });

  it('does not let a cell forge or flood the bridge protocol by taking its output socket', async () => {
    const ctx = await code.createContext();
    try {
      // The kernel runs as the same user as its bridge: copy the bridge's stdout (pidfd_getfd) and write
      // a forged "done", an off-contract message, plain text and a 30 MiB line on it.
      const forged = await code.run(
        [
          'import ctypes, os',
          'libc = ctypes.CDLL(None, use_errno=True)',
          'fd = libc.syscall(438, os.pidfd_open(os.getppid()), 1, 0)',
          'assert fd >= 0, "pidfd_getfd failed: %d" % ctypes.get_errno()',
          'os.write(fd, b\'{"t":"done","id":"r999","count":1,"status":"ok"}\\n{"t":"display","id":1}\\nplain text\\n\')',
          'chunk = b"y" * (1024 * 1024)',
          'for _ in range(30):\n    os.write(fd, chunk)',
          'os.write(fd, b"\\n")',
          '"survived"',
        ].join('\n'),
        { context: ctx, timeoutMs: 60_000 },
      );
      expect(forged.error).toBeNull();
      expect(mainText(forged.results)).toBe("'survived'");
      expect(forged.stdout).toContain('plain text');
      expect(forged.stdout.length).toBeLessThan(1024 * 1024);
    } finally {
      await code.removeContext(ctx);
    }
  });

  it('runs JavaScript in a Node context that keeps state and awaits a promise value', async () => {
    const js = await code.createContext({ language: 'javascript' });
    try {
      const first = await code.run('let total = 40; console.log("js says hi"); total + 2', { context: js });
      expect(first).toMatchObject({ stdout: 'js says hi\n', error: null, language: 'javascript' });
      expect(mainText(first.results)).toBe('42');
      expect(mainText((await code.run('Promise.resolve(total * 2)', { context: js })).results)).toBe('80');
      const failed = await code.run('null.property', { context: js });
      expect(failed.error).toMatchObject({ name: 'TypeError' });
      expect(failed.error!.traceback).toContain('cell-');
      const looped = await code.run('for (;;) {}', { context: js, timeoutMs: 1000 });
      expect(looped).toMatchObject({ timedOut: true, error: { name: 'Interrupted' } });
      expect(mainText((await code.run('total', { context: js })).results)).toBe('40');
      const flood = await code.run('const line = "\u00e9".repeat(500_000); for (let i = 0; i < 300; i++) process.stdout.write(line); "done"', {
        context: js,
        timeoutMs: 60_000,
      });
      expect(flood).toMatchObject({ stdoutBytes: 300_000_000, truncated: true, error: null });
      expect(flood.stdout.length).toBeLessThan(1_100_000);
      expect(mainText(flood.results)).toBe("'done'");
      await expect(code.run('1', { context: js, language: 'python' })).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
    } finally {
      await code.removeContext(js);
    }
  });

  it('runs TypeScript by removing its types', async () => {
    const result = await code.run('interface P { n: number }\nconst p: P = { n: 5 };\np.n * 2', { language: 'typescript' });
    expect(result.error).toBeNull();
    expect(mainText(result.results)).toBe('10');
    await expect(code.run('const = ;', { language: 'typescript' })).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
  });

  it('refuses every code method to a handle granted without exec', async () => {
    const connection = await agent.connect({ 'x-warren-policy': encodeGrant({ policy: { root: agent.root, readOnly: false }, allowExec: false }) });
    try {
      const limited = new Code(() => connection);
      await expect(limited.run('print(1)')).rejects.toBeInstanceOf(ForbiddenError);
      await expect(limited.createContext()).rejects.toBeInstanceOf(ForbiddenError);
      await expect(limited.listContexts()).rejects.toBeInstanceOf(ForbiddenError);
    } finally {
      connection.close();
    }
  });

  it('offers run_code as a tool: text a model reads, the chart as an image block, and a dead kernel restarted and said so', async () => {
    const tools = codeInterpreterTools({ code });
    const text = await runToolCall(tools, 'run_code', { code: 'print("hi")\nkept' });
    expect(text).toMatchObject({ isError: false, text: "hi\n[result] 'still here'" });
    const chart = 'import matplotlib.pyplot as plt\nplt.bar(["a", "b"], [3, 5])\nNone';
    const anthropic = await dispatchAnthropicToolUse(tools, { type: 'tool_use', id: 't1', name: 'run_code', input: { code: chart } }, { images: true });
    expect(Array.isArray(anthropic.content)).toBe(true);
    const image = (anthropic.content as { type: string; source?: { media_type: string; data: string } }[]).find((c) => c.type === 'image');
    expect(image?.source?.media_type).toBe('image/png');
    expect(Buffer.from(image!.source!.data, 'base64').subarray(0, 8).equals(PNG_SIGNATURE)).toBe(true);
    const mcp = await callMCPTool(tools, 'run_code', { code: chart });
    expect(mcp.content.map((c) => c.type)).toEqual(['text', 'image']);
    const failed = await runToolCall(tools, 'run_code', { code: '1/0' });
    expect(failed.text).toContain('[error] ZeroDivisionError: division by zero');
    const died = await runToolCall(tools, 'run_code', { code: 'import os\nos.kill(os.getpid(), 9)' });
    expect(died).toMatchObject({ isError: true, result: { code: 'KERNEL_DIED' } });
    expect(died.text).toContain('restarted');
    expect((await runToolCall(tools, 'run_code', { code: 'kept' })).text).toContain('NameError');
  });
});
