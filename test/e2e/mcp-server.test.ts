import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { builtinTools, codinTools, filesystemTools, partialReadTools, Sandbox, toolsmithTools, type ToolSet } from '@warren/sdk';
import { WARREN_BIN } from '../support/cli.js';
import { startTestController, type TestController } from '../support/fixtures.js';

let warren: TestController;

beforeAll(async () => {
  warren = await startTestController();
});

afterAll(async () => {
  await warren?.[Symbol.asyncDispose]();
});

/** Starts `warren mcp` as the official MCP client does: a child process on stdio. */
async function connectMcp(args: string[]): Promise<{ client: Client; stderr: () => string }> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [WARREN_BIN, 'mcp', ...args],
    env: { WARREN_URL: warren.url, WARREN_API_KEY: warren.apiKey, PATH: process.env.PATH ?? '' },
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
  const client = new Client({ name: 'warren-e2e', version: '1.0.0' });
  await client.connect(transport);
  return { client, stderr: () => stderr };
}

type CallResult = { content: { type: string; text: string }[]; isError?: boolean };

async function call(client: Client, name: string, args: Record<string, unknown>): Promise<{ text: string; isError: boolean }> {
  const result = (await client.callTool({ name, arguments: args })) as CallResult;
  expect(result.content).toHaveLength(1);
  expect(result.content[0]!.type).toBe('text');
  return { text: result.content[0]!.text, isError: result.isError === true };
}

/** The tool list a server must show: the tool objects' own names, descriptions and JSON Schemas. */
function expectedTools(tools: ToolSet): { name: string; description: string; inputSchema: unknown }[] {
  return tools.map((t) => ({ name: t.name, description: t.description, inputSchema: t.jsonSchema }));
}

async function waitGone(label: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const left = await Sandbox.list({ baseUrl: warren.url, apiKey: warren.apiKey, labels: { 'warren.mcp': label } });
    if (left.every((s) => s.state === 'gone')) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`the sandbox labelled warren.mcp=${label} was not removed after the client closed`);
}

const fake = { files: {}, commands: {} } as unknown as Sandbox;

describe('warren mcp with the official MCP client', () => {
  it('serves the codin tool set on a sandbox it creates, and removes that sandbox when the client closes', async () => {
    const { client, stderr } = await connectMcp(['--toolset', 'codin']);
    const { tools } = await client.listTools();
    expect(tools.map(({ name, description, inputSchema }) => ({ name, description, inputSchema }))).toEqual(expectedTools(codinTools(fake)));

    const [created] = await Sandbox.list({ baseUrl: warren.url, apiKey: warren.apiKey, labels: { 'warren.mcp': 'codin' } });
    expect(created?.state).toBe('running');
    expect(stderr()).toContain(created!.id);

    const write = await call(client, 'sandbox_write_file', { path: 'calc.py', content: 'print(6 * 7)\nprint("two")\n' });
    expect(write.isError).toBe(false);
    const read = await call(client, 'sandbox_read_file', { path: 'calc.py', start_line: 2 });
    expect(read).toMatchObject({ isError: false });
    expect(read.text).toContain('print("two")');
    expect(read.text).not.toContain('6 * 7');
    const list = await call(client, 'sandbox_list_files', { path: '.' });
    expect(list.text).toContain('calc.py');
    const exec = await call(client, 'sandbox_exec', { cmd: 'python3 calc.py' });
    expect(exec.isError).toBe(false);
    expect(exec.text).toContain('42');

    const missing = await call(client, 'sandbox_read_file', { path: 'missing.py' });
    expect(missing.isError).toBe(true);
    expect(missing.text).toMatch(/missing\.py/);
    const badArgs = await call(client, 'sandbox_read_file', {});
    expect(badArgs.isError).toBe(true);
    const unknown = await call(client, 'no_such_tool', {});
    expect(unknown.isError).toBe(true);
    expect(unknown.text).toContain('sandbox_exec');

    await client.close();
    await waitGone('codin');
  });

  it('serves every filesystem tool', async () => {
    const { client } = await connectMcp(['--toolset', 'filesystem', '--ttl', '10m']);
    try {
      const { tools } = await client.listTools();
      expect(tools.map((t) => t.name)).toEqual(filesystemTools(fake).map((t) => t.name));

      expect((await call(client, 'write', { path: 'notes/a.txt', content: 'alpha beta\n' })).isError).toBe(false);
      expect((await call(client, 'read', { path: 'notes/a.txt' })).text).toContain('alpha beta');
      expect((await call(client, 'edit', { path: 'notes/a.txt', old_text: 'beta', new_text: 'gamma' })).isError).toBe(false);
      expect((await call(client, 'read', { path: 'notes/a.txt' })).text).toContain('alpha gamma');
      expect((await call(client, 'copy', { source: 'notes/a.txt', destination: 'notes/b.txt' })).isError).toBe(false);
      expect((await call(client, 'move', { source: 'notes/b.txt', destination: 'notes/c.txt' })).isError).toBe(false);
      const listed = await call(client, 'list_files', { path: 'notes' });
      expect(listed.text).toContain('c.txt');
      expect(listed.text).not.toContain('b.txt');
      expect((await call(client, 'delete', { path: 'notes/c.txt' })).isError).toBe(false);
      expect((await call(client, 'list_files', { path: 'notes' })).text).not.toContain('c.txt');

      const outside = await call(client, 'read', { path: '/etc/passwd' });
      expect(outside.isError).toBe(true);
    } finally {
      await client.close();
    }
    await waitGone('filesystem');
  });

  it('serves an existing sandbox with --sandbox and leaves it running', async () => {
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    const { client } = await connectMcp(['--toolset', 'builtin', '--sandbox', sandbox.id]);
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(builtinTools(fake).map((t) => t.name));

    expect((await call(client, 'write_file', { path: 'b.py', content: 'x = 1\nprint(x)\n' })).isError).toBe(false);
    const read = await call(client, 'read_file', { path: 'b.py' });
    expect(read.text).toContain('print(x)');
    const anchor = /(\d+#\w+)[^\n]*x = 1/.exec(read.text)?.[1];
    expect(anchor).toBeDefined();
    const edit = await call(client, 'edit_file', { file_path: 'b.py', edits_json: JSON.stringify([{ op: 'replace', pos: anchor, lines: ['x = 41 + 1'] }]) });
    expect(edit.isError).toBe(false);
    const bash = await call(client, 'bash', { command: 'python3 b.py' });
    expect(bash.text).toContain('42');
    await client.close();

    expect((await sandbox.info()).state).toBe('running');
    expect(await sandbox.files.read('b.py')).toBe('x = 41 + 1\nprint(x)\n');
  });

  it('serves partial_read and every toolsmith tool on one existing sandbox', async () => {
    await using sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    await sandbox.files.write(
      'test_dataset/calc.py',
      'import os\n\n\ndef add(a, b):\n    return a + b\n\n\nif __name__ == "__main__":\n    print(add(1, 2))\n',
    );
    await sandbox.files.write(
      'test_dataset/test_calc.py',
      'from calc import add\n\n\ndef test_ok():\n    assert add(1, 2) == 3\n\n\ndef test_wrong():\n    assert add(1, 1) == 3\n',
    );

    const partial = await connectMcp(['--toolset', 'partial_read', '--sandbox', sandbox.id]);
    try {
      expect((await partial.client.listTools()).tools.map((t) => t.name)).toEqual(partialReadTools(fake).map((t) => t.name));
      const read = await call(partial.client, 'read_partial_files', { requests: [{ path: 'test_dataset/calc.py', start_line: 4, line_count: 2 }] });
      expect(read.isError).toBe(false);
      expect(read.text).toContain('def add(a, b):');
      expect(read.text).not.toContain('import os');
    } finally {
      await partial.client.close();
    }

    const smith = await connectMcp(['--toolset', 'toolsmith', '--sandbox', sandbox.id]);
    try {
      expect((await smith.client.listTools()).tools.map((t) => t.name)).toEqual(toolsmithTools(fake).map((t) => t.name));
      const json = async (name: string, args: Record<string, unknown>) => {
        const { text } = await call(smith.client, name, args);
        return JSON.parse(text) as Record<string, unknown>;
      };
      const file = './sandbox/test_dataset/calc.py';
      expect((await call(smith.client, 'read_file', { file_path: file })).text).toContain('def add'); // text on success
      expect(await json('list_files', { directory: './sandbox/test_dataset' })).not.toHaveProperty('error');
      expect(await json('run_pylint_analysis', { file_path: file })).not.toHaveProperty('error');
      expect(await json('run_pytest', { directory: './sandbox/test_dataset' })).toMatchObject({ passed: 1, failed: 1 });
      expect(await json('get_failing_tests', { directory: './sandbox/test_dataset' })).toMatchObject({ failed_count: 1 });
      expect(await json('run_single_test', { test_file: './sandbox/test_dataset/test_calc.py', test_name: 'test_ok' })).toMatchObject({ passed: 1, failed: 0 });
      expect(await json('validate_python_syntax', { code: 'def f(:\n' })).toMatchObject({ valid: false });
      expect(await json('get_code_metrics', { file_path: file })).toMatchObject({ functions: 1, has_main: true });
      expect(await json('add_docstring', { file_path: file })).not.toHaveProperty('error');
      expect(await json('apply_fix', { file_path: file, fixed_code: 'def add(a, b):\n    return a + b\n' })).not.toHaveProperty('error');
      expect(await json('write_file', { file_path: './sandbox/test_dataset/new.py', content: 'x = 1\n' })).not.toHaveProperty('error');
      expect(await sandbox.files.read('test_dataset/new.py')).toBe('x = 1\n');
      const refused = await json('read_file', { file_path: '../etc/passwd' });
      expect(refused['error']).toMatch(/^SecurityError: /);
    } finally {
      await smith.client.close();
    }
  });

  it('fails in one line on stderr when the sandbox does not exist', async () => {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [WARREN_BIN, 'mcp', '--toolset', 'codin', '--sandbox', 'NoSuchSandbox0000000000x'],
      env: { WARREN_URL: warren.url, WARREN_API_KEY: warren.apiKey, PATH: process.env.PATH ?? '' },
      stderr: 'pipe',
    });
    let stderr = '';
    transport.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
    const client = new Client({ name: 'warren-e2e', version: '1.0.0' });
    await expect(client.connect(transport)).rejects.toThrow();
    await client.close().catch(() => undefined);
    expect(stderr).toMatch(/^warren: SANDBOX_NOT_FOUND: /m);
  });
});
