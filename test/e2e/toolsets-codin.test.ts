import '../support/timeouts.js';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { codinTools, dispatchOpenAIToolCall, toOpenAITools, type OpenAIChatToolCall, type ToolSet } from '@warren/sdk';
import { printLines, startToolsetSandbox, type ToolsetSandbox } from '../support/toolsets.js';

/** What a Chat Completions model sends: a tool call with JSON-encoded arguments. */
let callCount = 0;
const call = (name: string, args: Record<string, unknown>): OpenAIChatToolCall => ({
  id: `call_${++callCount}`,
  type: 'function',
  function: { name, arguments: JSON.stringify(args) },
});

describe('codin tool set (seed 000): a scripted orchestrator loop over OpenAI tool calls, on a real sandbox', () => {
  let env: ToolsetSandbox;
  let tools: ToolSet;
  const send = async (name: string, args: Record<string, unknown>) => {
    const message = await dispatchOpenAIToolCall(tools, call(name, args));
    expect(message.role).toBe('tool');
    return message.content;
  };

  beforeAll(async () => {
    env = await startToolsetSandbox();
    tools = codinTools(env.context);
  });
  afterAll(async () => {
    await env?.[Symbol.asyncDispose]();
  });

  it('offers the four tools in the OpenAI format', () => {
    expect(toOpenAITools(tools).map((t) => t.function.name)).toEqual(['sandbox_read_file', 'sandbox_write_file', 'sandbox_exec', 'sandbox_list_files']);
  });

  it('runs the loop: write, read ranges with the seed headers, exec, list', async () => {
    expect(await send('sandbox_write_file', { path: 'example.py', content: printLines(100) })).toBe(`Wrote ${printLines(100).length} bytes to example.py`);
    expect(await send('sandbox_write_file', { path: 'sub/notes.txt', content: 'a\nb\n' })).toBe('Wrote 4 bytes to sub/notes.txt');

    // Seed 000's example: lines 10-20 of a 100-line file.
    expect(await send('sandbox_read_file', { path: 'example.py', start_line: 10, end_line: 20 })).toBe(
      `# File: example.py\n# Lines 10-20 of 100 total\n\n${printLines(20).split('\n').slice(9, 20).join('\n')}\n`,
    );
    expect(await send('sandbox_read_file', { path: 'example.py' })).toBe(printLines(100));
    expect(await send('sandbox_read_file', { path: 'example.py', max_lines: 5 })).toBe(
      '# File: example.py\n# Lines 1-5 of 100 total\n# Output truncated to 5 lines\n\nprint(1)\nprint(2)\nprint(3)\nprint(4)\nprint(5)\n',
    );
    expect(await send('sandbox_read_file', { path: 'example.py', start_line: -3, end_line: 2 })).toBe(
      '# File: example.py\n# Lines 1-2 of 100 total\n\nprint(1)\nprint(2)\n',
    );
    expect(await send('sandbox_read_file', { path: 'example.py', start_line: 30, end_line: 20 })).toBe('# File: example.py\n# Lines 30-20 of 100 total\n\n');
    expect(await send('sandbox_read_file', { path: 'example.py', start_line: 99, end_line: 5000 })).toBe(
      '# File: example.py\n# Lines 99-100 of 100 total\n\nprint(99)\nprint(100)\n',
    );

    const run = await send('sandbox_exec', { cmd: 'python3 example.py | tail -2' });
    expect(run).toBe('Exit code: 0\nSTDOUT:\n99\n100\n');
    const env2 = await send('sandbox_exec', { cmd: 'echo "$GREETING from $(pwd)"; echo oops >&2; exit 3', cwd: 'sub', env: { GREETING: 'hi' } });
    expect(env2).toBe('Exit code: 3\nSTDOUT:\nhi from /workspace/sub\nSTDERR:\noops\n');
    expect(await send('sandbox_exec', { cmd: 'sleep 10', timeout: 0.5 })).toBe('Command timed out after 0.5 seconds (killed)\n(no output)\n');

    expect(await send('sandbox_list_files', {})).toBe('example.py\nsub/');
    expect(await send('sandbox_list_files', { path: '.', recursive: true })).toBe('example.py\nsub/\nsub/notes.txt');
    expect(await send('sandbox_list_files', { path: 'sub' })).toBe('sub/notes.txt');
    expect(await send('sandbox_list_files', { recursive: true, max_files: 1 })).toBe('example.py\n# Output truncated to 1 files');
  });

  it('answers failures as text the model can act on', async () => {
    expect(await send('sandbox_read_file', { path: 'missing.py' })).toMatch(/^Error: .*missing\.py/);
    expect(await send('sandbox_read_file', { path: '/etc/passwd' })).toMatch(/^Error: .*outside the sandbox/);
    expect(await send('sandbox_read_file', { path: 'example.py', max_lines: 0 })).toMatch(/^Error: Invalid arguments for sandbox_read_file: max_lines/);
  });
});
