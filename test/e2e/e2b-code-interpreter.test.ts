import http from 'node:http';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { NotFoundError, Sandbox, TimeoutError, type ExecutionError, type OutputMessage, type Result } from '@e2b/code-interpreter';
import { startTestController, type TestController } from '../support/fixtures.js';

/**
 * The real `@e2b/code-interpreter` package (2.8.0) against a real controller and real containers:
 * its default template `code-interpreter-v1`, and its port-49999 server answered by the gateway
 * on Warren's own code interpreter (docs/e2b.md, "Code interpreter").
 */
describe('@e2b/code-interpreter on real sandboxes', () => {
  let warren: TestController;
  let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
  beforeAll(async () => {
    warren = await startTestController();
    opts = { apiKey: warren.apiKey, apiUrl: `${warren.url}/e2b`, sandboxUrl: `${warren.url}/e2b` };
  });
  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
  });

  it('runs Python, JavaScript, TypeScript and bash in the default template, with callbacks, errors and execution counts', async () => {
    const sandbox = await Sandbox.create(opts);
    try {
      const info = await sandbox.getInfo();
      expect(info.templateId).toBe('code-interpreter-v1');

      const stdout: OutputMessage[] = [];
      const stderr: OutputMessage[] = [];
      const results: Result[] = [];
      const first = await sandbox.runCode('import sys\nx = 20\nprint("hello")\nprint("warn", file=sys.stderr)\nx + 22', {
        onStdout: (m) => void stdout.push(m),
        onStderr: (m) => void stderr.push(m),
        onResult: (r) => void results.push(r),
      });
      expect(first.text).toBe('42');
      expect(first.logs.stdout.join('')).toBe('hello\n');
      expect(first.logs.stderr.join('')).toBe('warn\n');
      expect(stdout.map((m) => m.line).join('')).toBe('hello\n');
      expect(stderr.every((m) => m.error)).toBe(true);
      expect(results.map((r) => r.text)).toEqual(['42']);
      expect(first.error).toBeUndefined();
      const second = await sandbox.runCode('x');
      expect(second.text).toBe('20');
      expect(second.executionCount).toBe((first.executionCount ?? 0) + 1);

      const errors: ExecutionError[] = [];
      const failed = await sandbox.runCode('1 / 0', { onError: (e) => void errors.push(e) });
      expect(failed.error?.name).toBe('ZeroDivisionError');
      expect(failed.error?.value).toContain('division by zero');
      expect(failed.error?.traceback).toContain('ZeroDivisionError');
      expect(errors).toHaveLength(1);

      const js = await sandbox.runCode('const y = 40; console.log("from node"); y + 2', { language: 'js' });
      expect(js.logs.stdout.join('')).toBe('from node\n');
      expect(js.text).toBe('42');
      expect((await sandbox.runCode('y * 2', { language: 'javascript' })).text).toBe('80');
      expect((await sandbox.runCode('const z: number = 5; z * 2', { language: 'typescript' })).text).toBe('10');

      const bash = await sandbox.runCode('echo "$((6 * 7))" && pwd && echo oops >&2 && GREETING=hi', { language: 'bash' });
      expect(bash.logs.stdout.join('')).toBe('42\n/home/user\n');
      expect(bash.logs.stderr.join('')).toBe('oops\n');
      // The default bash context keeps its shell, as E2B's bash kernel does.
      expect((await sandbox.runCode('echo "$GREETING"', { language: 'bash' })).logs.stdout.join('')).toBe('hi\n');
      expect((await sandbox.runCode('(exit 3)', { language: 'bash' })).error?.value).toContain('exited with code 3');

      await expect(sandbox.runCode('1', { language: 'r' })).rejects.toThrow(/400.*not served.*python, javascript/);
    } finally {
      await sandbox.kill();
    }
  }, 180_000);

  it('creates, lists, runs in, restarts and removes contexts, each with its own state and working folder', async () => {
    const sandbox = await Sandbox.create(opts);
    try {
      await sandbox.files.makeDir('/home/user/project');
      const context = await sandbox.createCodeContext({ language: 'python', cwd: '/home/user/project' });
      expect(context).toMatchObject({ language: 'python', cwd: '/home/user/project' });
      expect((await sandbox.runCode('import os; os.getcwd()', { context })).text).toBe('/home/user/project');
      await sandbox.runCode('secret = 7', { context });
      expect((await sandbox.runCode('secret', { context })).text).toBe('7');
      // The default context is another kernel.
      expect((await sandbox.runCode('"secret" in globals()')).text).toBe('False');
      expect((await sandbox.runCode('import os; os.getcwd()')).text).toBe('/home/user');

      const js = await sandbox.createCodeContext({ language: 'js' });
      expect(js.language).toBe('javascript');
      expect((await sandbox.runCode('process.cwd()', { context: js })).text).toBe('/home/user');

      const listed = await sandbox.listCodeContexts();
      expect(listed.map((c) => c.id)).toEqual(expect.arrayContaining([context.id, js.id]));

      await sandbox.restartCodeContext(context);
      const after = await sandbox.runCode('secret', { context });
      expect(after.error?.name).toBe('NameError');

      await sandbox.removeCodeContext(context.id);
      expect((await sandbox.listCodeContexts()).map((c) => c.id)).not.toContain(context.id);
      await expect(sandbox.runCode('1', { context })).rejects.toBeInstanceOf(NotFoundError);
      await expect(sandbox.removeCodeContext(context.id)).rejects.toBeInstanceOf(NotFoundError);

      // Bash contexts are shell sessions: each keeps its folder and variables, apart from the others.
      const shell = await sandbox.createCodeContext({ language: 'bash', cwd: '/home/user/project' });
      expect(shell).toMatchObject({ language: 'bash', cwd: '/home/user/project' });
      await sandbox.runCode('mkdir -p inner && cd inner && COUNT=1', { context: shell });
      expect((await sandbox.runCode('pwd; echo "$COUNT"', { context: shell })).logs.stdout.join('')).toBe('/home/user/project/inner\n1\n');
      expect((await sandbox.runCode('echo "[$COUNT]"', { language: 'bash' })).logs.stdout.join('')).toBe('[]\n');
      expect((await sandbox.listCodeContexts()).find((c) => c.id === shell.id)).toMatchObject({ language: 'bash', cwd: '/home/user/project' });
      await sandbox.restartCodeContext(shell);
      expect((await sandbox.runCode('pwd; echo "[$COUNT]"', { context: shell })).logs.stdout.join('')).toBe('/home/user/project\n[]\n');
      await sandbox.removeCodeContext(shell);
      await expect(sandbox.runCode('true', { context: shell })).rejects.toBeInstanceOf(NotFoundError);
    } finally {
      await sandbox.kill();
    }
  }, 180_000);

  it('sets envs for one run only, and interrupts a run past its timeoutMs while the context keeps its state', async () => {
    const sandbox = await Sandbox.create(opts);
    try {
      expect((await sandbox.runCode('import os; os.environ.get("ONLY_NOW")', { envs: { ONLY_NOW: 'yes' } })).text).toBe('yes');
      expect((await sandbox.runCode('os.environ.get("ONLY_NOW") is None')).text).toBe('True');
      expect((await sandbox.runCode('process.env.ONLY_NOW', { language: 'js', envs: { ONLY_NOW: 'js' } })).text).toBe('js');
      expect((await sandbox.runCode('String(process.env.ONLY_NOW)', { language: 'js' })).text).toBe('undefined');
      expect(
        (await sandbox.runCode('echo "$ONLY_NOW"; sh -c \'echo "child $ONLY_NOW"\'', { language: 'bash', envs: { ONLY_NOW: "it's" } })).logs.stdout.join(''),
      ).toBe("it's\nchild it's\n");
      expect((await sandbox.runCode('echo "[$ONLY_NOW]"', { language: 'bash' })).logs.stdout.join('')).toBe('[]\n');
      await expect(sandbox.runCode('1', { envs: { 'A=B': 'x' } })).rejects.toThrow(/400 Invalid execution request: env/);

      await sandbox.runCode('kept = "still here"');
      const started = Date.now();
      // The SDK turns its abort into TimeoutError by the error's class; under jest the abort's DOMException is of another realm, so its name is checked.
      await expect(sandbox.runCode('import time\ntime.sleep(60)', { timeoutMs: 2000 })).rejects.toMatchObject({
        name: expect.stringMatching(/^(TimeoutError|AbortError)$/),
      });
      // The cell was interrupted, not the kernel: the next run answers at once, with the state.
      expect((await sandbox.runCode('kept')).text).toBe('still here');
      expect(Date.now() - started).toBeLessThan(20_000);
      // A bash run likewise: the command is interrupted and its shell goes on.
      await sandbox.runCode('KEPT=yes', { language: 'bash' });
      await expect(sandbox.runCode('sleep 60', { language: 'bash', timeoutMs: 2000 })).rejects.toMatchObject({
        name: expect.stringMatching(/^(TimeoutError|AbortError)$/),
      });
      expect((await sandbox.runCode('echo "$KEPT"', { language: 'bash' })).logs.stdout.join('')).toBe('yes\n');
      expect(Date.now() - started).toBeLessThan(40_000);
    } finally {
      await sandbox.kill();
    }
  }, 180_000);

  it('returns rich results: text, html, markdown, png, svg, json, latex and a DataFrame as data', async () => {
    const sandbox = await Sandbox.create(opts);
    try {
      const execution = await sandbox.runCode(
        [
          'from IPython.display import display, HTML, Markdown, SVG, JSON, Latex, Image',
          'import base64',
          'display(HTML("<b>bold</b>"))',
          'display(Markdown("# Title"))',
          'display(SVG(\'<svg xmlns="http://www.w3.org/2000/svg" width="2" height="2"></svg>\'))',
          'display(JSON({"a": 1}))',
          'display(Latex(r"$x^2$"))',
          'png = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")',
          'display(Image(data=png, format="png"))',
          'import pandas as pd',
          'pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})',
        ].join('\n'),
      );
      expect(execution.error).toBeUndefined();
      const [html, markdown, svg, json, latex, png, frame] = execution.results;
      expect(html?.html).toBe('<b>bold</b>');
      expect(markdown?.markdown).toBe('# Title');
      expect(svg?.svg).toContain('<svg');
      expect(json?.json).toEqual({ a: 1 });
      expect(latex?.latex).toBe('$x^2$');
      expect(png?.png).toMatch(/^iVBORw0KGgo/);
      expect(frame?.isMainResult).toBe(true);
      expect(frame?.html).toContain('<table');
      expect(frame?.data).toEqual({ a: [1, 2], b: ['x', 'y'] });
      expect(frame?.formats()).toEqual(expect.arrayContaining(['html', 'data']));
    } finally {
      await sandbox.kill();
    }
  }, 180_000);

  it('extracts chart data from matplotlib figures: line, bar, scatter, pie, box and whisker, and several axes', async () => {
    const sandbox = await Sandbox.create(opts);
    try {
      const chartOf = async (code: string) => {
        const execution = await sandbox.runCode(`import matplotlib.pyplot as plt\n${code}\nplt.show()`);
        expect(execution.error).toBeUndefined();
        const result = execution.results.find((r) => r.chart !== undefined);
        expect(result?.png).toBeDefined();
        return result?.chart as unknown as Record<string, unknown> & { elements: Record<string, unknown>[] };
      };
      const line = await chartOf('plt.plot([1, 2, 3], [2, 4, 8], label="growth")\nplt.title("Line")\nplt.xlabel("Time (s)")\nplt.ylabel("Size [m]")');
      expect(line).toMatchObject({ type: 'line', title: 'Line', x_label: 'Time (s)', x_unit: 's', y_unit: 'm', x_scale: 'linear' });
      expect(line.elements[0]).toEqual({
        label: 'growth',
        points: [
          [1, 2],
          [2, 4],
          [3, 8],
        ],
      });

      const bar = await chartOf('plt.bar(["a", "b", "c"], [3, 5, 1])\nplt.title("Bars")');
      expect(bar.type).toBe('bar');
      expect(bar.elements.map((e) => [e['label'], e['value']])).toEqual([
        ['a', 3],
        ['b', 5],
        ['c', 1],
      ]);

      const scatter = await chartOf('plt.scatter([1, 2], [3, 4], label="dots")');
      expect(scatter.type).toBe('scatter');
      expect(scatter.elements[0]).toEqual({
        label: 'dots',
        points: [
          [1, 3],
          [2, 4],
        ],
      });

      const pie = await chartOf('plt.pie([1, 3], labels=["one", "three"])');
      expect(pie.type).toBe('pie');
      expect(pie.elements.map((e) => [e['label'], e['angle']])).toEqual([
        ['one', 90],
        ['three', 270],
      ]);

      const box = await chartOf('plt.boxplot([[1, 2, 3, 4, 5], [2, 4, 6, 8, 10]], labels=["A", "B"], patch_artist=True)');
      expect(box.type).toBe('box_and_whisker');
      expect(box.elements.map((e) => [e['label'], e['min'], e['first_quartile'], e['median'], e['third_quartile'], e['max']])).toEqual([
        ['A', 1, 2, 3, 4, 5],
        ['B', 2, 4, 6, 8, 10],
      ]);

      const composite = await chartOf('fig, (a, b) = plt.subplots(1, 2)\nfig.suptitle("Both")\na.plot([0, 1], [1, 0])\nb.bar(["x", "y"], [2, 3])');
      expect(composite.type).toBe('superchart');
      expect(composite.title).toBe('Both');
      expect(composite.elements.map((e) => e['type'])).toEqual(['line', 'bar']);
    } finally {
      await sandbox.kill();
    }
  }, 180_000);

  it('reaches the server by the host name the SDK builds without E2B_SANDBOX_URL (https://49999-<id>.<domain>)', async () => {
    // The SDK's port-49999 calls use the global fetch; this one sends https://<host>/<path> to the
    // controller over plain HTTP with that Host header (fetch itself does not let a caller set
    // Host), as a TLS terminator with a wildcard certificate in front of the controller would.
    const domain = 'e2b.test';
    const realFetch = globalThis.fetch;
    const hosts: string[] = [];
    const controller = new URL(warren.url);
    globalThis.fetch = async (input: string | URL | Request, init?: RequestInit) => {
      const url = new URL(input instanceof Request ? input.url : input);
      if (url.protocol !== 'https:' || !url.hostname.endsWith(`.${domain}`)) return realFetch(input, init);
      hosts.push(url.hostname);
      const headers: Record<string, string> = { ...Object.fromEntries(new Headers(init?.headers).entries()), host: url.hostname };
      return new Promise<Response>((resolve, reject) => {
        const req = http.request(
          {
            host: controller.hostname,
            port: controller.port,
            path: `${url.pathname}${url.search}`,
            method: init?.method ?? 'GET',
            headers,
            signal: init?.signal ?? undefined,
          },
          (res) => {
            const answer = new Headers();
            for (const [name, value] of Object.entries(res.headers)) if (typeof value === 'string') answer.set(name, value);
            resolve(
              new Response(Readable.toWeb(res) as ReadableStream, { status: res.statusCode ?? 500, statusText: res.statusMessage ?? '', headers: answer }),
            );
          },
        );
        req.on('error', reject);
        req.end(typeof init?.body === 'string' ? init.body : undefined);
      });
    };
    const sandbox = await Sandbox.create({ apiKey: opts.apiKey, apiUrl: opts.apiUrl, domain });
    try {
      const execution = await sandbox.runCode('6 * 7');
      expect(execution.text).toBe('42');
      const context = await sandbox.createCodeContext({ language: 'js' });
      expect((await sandbox.runCode('21 * 2', { context })).text).toBe('42');
      expect(new Set(hosts)).toEqual(new Set([`49999-${sandbox.sandboxId.toLowerCase()}.${domain}`]));
    } finally {
      globalThis.fetch = realFetch;
      await sandbox.kill();
    }
  }, 180_000);

  it('reconnects to a running sandbox with Sandbox.connect, and a killed sandbox answers with a typed error', async () => {
    const sandbox = await Sandbox.create(opts);
    try {
      await sandbox.runCode('remembered = 99');
      const again = await Sandbox.connect(sandbox.sandboxId, opts);
      expect((await again.runCode('remembered')).text).toBe('99');
      // The host name E2B's SDK uses without E2B_SANDBOX_URL (49999-<id>.<domain>) reaches the same server.
      const token = (sandbox as unknown as { envdAccessToken: string }).envdAccessToken;
      const listed = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const url = new URL(warren.url);
        const req = http.request(
          {
            host: url.hostname,
            port: url.port,
            path: '/contexts',
            headers: { host: `49999-${sandbox.sandboxId.toLowerCase()}.e2b.test`, 'x-access-token': token },
          },
          (res) => {
            let body = '';
            res.on('data', (c: Buffer) => (body += c.toString()));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
          },
        );
        req.on('error', reject);
        req.end();
      });
      expect(listed.status).toBe(200);
      expect((JSON.parse(listed.body) as { language: string }[]).map((c) => c.language)).toContain('python');
    } finally {
      await sandbox.kill();
    }
    await expect(sandbox.runCode('1')).rejects.toBeInstanceOf(TimeoutError);
    await expect(sandbox.listCodeContexts()).rejects.toBeInstanceOf(TimeoutError);
  }, 180_000);
});
