import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { lineAnchor } from '@warren/protocol/node';
import { builtinTools, codinTools, filesystemTools, partialReadTools, runToolCall } from '@warren/sdk';
import { startTestAgent, type TestAgent } from '../support/fixtures.js';

// The tool sets over the real agent in this process (no Docker): the seed formats on real primitives.
describe('tool sets over an in-process agent', () => {
  let agent: TestAgent;
  const text = async (tools: Parameters<typeof runToolCall>[0], name: string, args: unknown) => (await runToolCall(tools, name, args)).text;

  beforeAll(async () => {
    agent = await startTestAgent();
    await agent.files.write('example.py', Array.from({ length: 100 }, (_, i) => `print(${i + 1})\n`).join(''));
  });
  afterAll(async () => {
    await agent?.[Symbol.asyncDispose]();
  });

  it("codin: headers and clamping from the agent's line read", async () => {
    const tools = codinTools(agent);
    expect(await text(tools, 'sandbox_read_file', { path: 'example.py', start_line: 10, end_line: 12 })).toBe(
      '# File: example.py\n# Lines 10-12 of 100 total\n\nprint(10)\nprint(11)\nprint(12)\n',
    );
    expect(await text(tools, 'sandbox_read_file', { path: 'example.py', start_line: 0, end_line: 1, max_lines: 1 })).toBe(
      '# File: example.py\n# Lines 1-1 of 100 total\n\nprint(1)\n',
    );
    expect(await text(tools, 'sandbox_read_file', { path: 'example.py', max_lines: 2 })).toBe(
      '# File: example.py\n# Lines 1-2 of 100 total\n# Output truncated to 2 lines\n\nprint(1)\nprint(2)\n',
    );
  });

  it('partial_read: line and character segments', async () => {
    const tools = partialReadTools(agent);
    expect(
      await text(tools, 'read_partial_files', {
        requests: [
          { path: 'example.py', start_line: 99, line_count: 5 },
          { path: 'example.py', start_character: 0, length: 5 },
        ],
      }),
    ).toBe('--- File: example.py (lines 99-100) ---\nprint(99)\nprint(100)\n\n--- File: example.py (characters 0-5) ---\nprint');
  });

  it('builtin: anchors from the agent match the pinned hash, and a stale anchor is refused', async () => {
    const tools = builtinTools(agent);
    const read = await text(tools, 'read_file', { path: 'example.py' });
    expect(read.split('\n')[1]).toBe(`${lineAnchor(2, 'print(2)')}|print(2)`);
    const edit = { op: 'replace', pos: lineAnchor(2, 'print(2)'), lines: ['print("two")'] };
    expect(await text(tools, 'edit_file', { file_path: 'example.py', edits_json: JSON.stringify([edit]) })).toMatch(/^Applied 1 edit to example\.py/);
    expect((await runToolCall(tools, 'edit_file', { file_path: 'example.py', edits_json: JSON.stringify([edit]) })).result).toMatchObject({
      isError: true,
      code: 'STALE_ANCHOR',
    });
  });

  it('filesystem: ReadResult and exact edits', async () => {
    const tools = filesystemTools(agent);
    await runToolCall(tools, 'write', { path: 'n.md', content: 'héllo wörld' });
    expect((await runToolCall(tools, 'read', { path: 'n.md', offset: 6, max_chars: 3 })).result).toEqual({
      content: 'wör',
      truncated: true,
      total_chars: 11,
      offset: 6,
      chars_read: 3,
    });
    expect(await text(tools, 'edit', { path: 'n.md', old_text: 'wörld', new_text: 'there' })).toBe('Edited n.md: replaced 1 occurrence');
    expect(await agent.files.read('n.md')).toBe('héllo there');
  });
});
