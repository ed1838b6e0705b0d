import '../support/timeouts.js';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { lineAnchor } from '@warren/protocol/node';
import { builtinTools, dispatchAnthropicToolUse, toAnthropicTools, type AnthropicToolResultBlock, type ToolSet } from '@warren/sdk';
import { startToolsetSandbox, type ToolsetSandbox } from '../support/toolsets.js';

let useCount = 0;

describe('builtin tool set (seed 004): a scripted orchestrator loop over Anthropic tool_use blocks, on a real sandbox', () => {
  let env: ToolsetSandbox;
  let tools: ToolSet;
  const send = (name: string, input: Record<string, unknown>): Promise<AnthropicToolResultBlock> =>
    dispatchAnthropicToolUse(tools, { type: 'tool_use', id: `toolu_${++useCount}`, name, input });

  beforeAll(async () => {
    env = await startToolsetSandbox();
    tools = builtinTools(env.context);
  });
  afterAll(async () => {
    await env?.[Symbol.asyncDispose]();
  });

  it('offers the four tools in the Anthropic format', () => {
    expect(toAnthropicTools(tools).map((t) => t.name)).toEqual(['read_file', 'write_file', 'edit_file', 'bash']);
  });

  it('reads LINE#ID|content, edits by anchors, refuses stale anchors, and runs bash', async () => {
    const source = 'def my_function():\n    return 1\n\nprint(my_function())\n';
    expect(await send('write_file', { path: 'app.py', content: source })).toEqual({
      type: 'tool_result',
      tool_use_id: expect.any(String),
      content: `Wrote ${source.length} bytes to app.py`,
    });

    const first = (await send('read_file', { path: 'app.py' })).content;
    expect(first).toBe(
      source
        .trimEnd()
        .split('\n')
        .map((line, i) => `${lineAnchor(i + 1, line)}|${line}`)
        .join('\n'),
    );

    // The model copies anchors out of the read_file output.
    const anchors = first.split('\n').map((line) => line.slice(0, line.indexOf('|')));
    const edits = [
      { op: 'replace', pos: anchors[1], lines: ['    return 42'] },
      { op: 'prepend', pos: anchors[0], lines: ['"""Demo."""'] },
      { op: 'append', pos: anchors[3], lines: ['print("done")'] },
    ];
    const applied = await send('edit_file', { file_path: 'app.py', edits_json: JSON.stringify(edits) });
    expect(applied.is_error).toBeUndefined();
    expect(applied.content).toBe('Applied 3 edits to app.py. Line numbers and hashes may have changed: read_file again before the next edit.');
    expect(await env.sandbox.files.read('app.py')).toBe('"""Demo."""\ndef my_function():\n    return 42\n\nprint(my_function())\nprint("done")\n');

    // Anchors from the first read are stale now: line 2 is `def my_function():`, not `    return 1`.
    const stale = await send('edit_file', { file_path: 'app.py', edits_json: JSON.stringify([{ op: 'replace', pos: anchors[1], lines: ['    return 0'] }]) });
    expect(stale.is_error).toBe(true);
    expect(stale.content).toMatch(/^Error: .*\nRead the file again for fresh LINE#ID anchors, then retry the edit\.$/s);
    expect(await env.sandbox.files.read('app.py')).toContain('return 42');

    expect((await send('bash', { command: 'python3 app.py; echo warn >&2' })).content).toBe('42\ndone\nwarn\n');
    expect(await send('bash', { command: 'echo partial; exit 4' })).toMatchObject({ content: 'partial\n[exit code: 4]' });
    expect((await send('bash', { command: 'sleep 10', timeout: 1 })).content).toBe('[timed out after 1 seconds]');
    expect((await send('bash', { command: 'pwd' })).content).toBe('/workspace\n');
  });

  it('stops a running bash call when its signal aborts, and answers with an error result', async () => {
    const bash = tools.find((t) => t.name === 'bash')!;
    const controller = new AbortController();
    const running = bash.run({ command: 'sleep 20; echo never' }, { signal: controller.signal });
    setTimeout(() => controller.abort(), 300);
    await expect(running).resolves.toMatchObject({ isError: true, code: 'CANCELLED' });
  });

  it('refuses paths outside the workspace', async () => {
    const outside = await send('read_file', { path: '../etc/passwd' });
    expect(outside).toMatchObject({ is_error: true });
    expect(outside.content).toMatch(/outside the sandbox/);
  });
});
