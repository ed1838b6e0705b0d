import '../support/timeouts.js';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { filesystemTools, runToolCall, toOpenAITools, type ToolSet } from '@warren/sdk';
import { startToolsetSandbox, type ToolsetSandbox } from '../support/toolsets.js';

describe('filesystem tool set (seed 001): a scripted orchestrator loop on a real sandbox', () => {
  let env: ToolsetSandbox;
  let tools: ToolSet;
  const send = (name: string, args: Record<string, unknown>) => runToolCall(tools, name, args);

  beforeAll(async () => {
    env = await startToolsetSandbox();
    tools = filesystemTools(env.context);
  });
  afterAll(async () => {
    await env?.[Symbol.asyncDispose]();
  });

  it("offers the seed's seven tools", () => {
    expect(toOpenAITools(tools, { api: 'responses' }).map((t) => t.name)).toEqual(['read', 'write', 'edit', 'delete', 'move', 'copy', 'list_files']);
  });

  it('writes, reads a ReadResult page by page, edits, copies, moves, deletes and lists', async () => {
    expect((await send('write', { path: 'notes/todo.md', content: 'alpha beta gamma' })).text).toBe('Wrote 16 characters to notes/todo.md');

    const page1 = await send('read', { path: 'notes/todo.md', max_chars: 6 });
    expect(page1.result).toEqual({ content: 'alpha ', truncated: true, total_chars: 16, offset: 0, chars_read: 6 });
    expect(JSON.parse(page1.text)).toEqual(page1.result);
    expect((await send('read', { path: 'notes/todo.md', offset: 6 })).result).toEqual({
      content: 'beta gamma',
      truncated: false,
      total_chars: 16,
      offset: 6,
      chars_read: 10,
    });

    expect((await send('edit', { path: 'notes/todo.md', old_text: 'beta', new_text: 'BETA' })).text).toBe('Edited notes/todo.md: replaced 1 occurrence');
    const notFound = await send('edit', { path: 'notes/todo.md', old_text: 'delta', new_text: 'x' });
    expect(notFound.isError).toBe(true);
    expect(notFound.text).toMatch(/^EditError: /);
    await send('write', { path: 'twice.txt', content: 'x x' });
    expect((await send('edit', { path: 'twice.txt', old_text: 'x', new_text: 'y' })).text).toMatch(/^EditError: [\s\S]*Include more surrounding lines/);

    expect((await send('copy', { source: 'notes/todo.md', destination: 'backup/todo.md' })).text).toBe('Copied notes/todo.md to backup/todo.md');
    expect((await send('move', { source: 'twice.txt', destination: 'archive/old/twice.txt' })).text).toBe('Moved twice.txt to archive/old/twice.txt');
    expect((await send('delete', { path: 'backup/todo.md' })).text).toBe('Deleted backup/todo.md');

    expect((await send('list_files', {})).result).toEqual(['archive/old/twice.txt', 'notes/todo.md']);
    expect((await send('list_files', { path: 'notes', pattern: '*.md' })).result).toEqual(['todo.md']);
    expect(await env.sandbox.files.read('notes/todo.md')).toBe('alpha BETA gamma');
  });

  it("names the seed's error classes and says what is allowed", async () => {
    const outside = await send('read', { path: '../etc/passwd' });
    expect(outside.text).toMatch(/^PathNotInSandboxError: .*outside the sandbox/);
    expect((await send('delete', { path: 'nothing-here.txt' })).text).toMatch(/^SandboxError: /);
  });
});

describe('filesystem tool set under a read-only policy with a suffix allow-list', () => {
  let env: ToolsetSandbox;
  let tools: ToolSet;

  beforeAll(async () => {
    env = await startToolsetSandbox({ policy: { root: '/workspace', readOnly: true, suffixes: ['.md'] } });
    tools = filesystemTools(env.context);
  });
  afterAll(async () => {
    await env?.[Symbol.asyncDispose]();
  });

  it('refuses writes with PathNotWritableError and other suffixes with SuffixNotAllowedError', async () => {
    const write = await runToolCall(tools, 'write', { path: 'a.md', content: 'x' });
    expect(write.text).toMatch(/^PathNotWritableError: /);
    // The file policy binds the file tools, not a shell: a command can still create the file.
    await env.sandbox.commands.run('echo "x = 1" > a.py');
    const read = await runToolCall(tools, 'read', { path: 'a.py' });
    expect(read.text).toMatch(/^SuffixNotAllowedError: .*\.md/s);
  });
});
