import { describe, expect, it } from '@jest/globals';
import { PathNotWritableError, SuffixNotAllowedError } from '../../src/errors.js';
import { filesystemErrorClass, filesystemTools, toOpenAITools, type Tool, type ToolContext } from '../../src/index.js';
import { fakeContext } from './fakes.js';

function setup(files: Record<string, string> = {}) {
  const context = fakeContext(files);
  const tools = filesystemTools(context);
  return { context, tools, tool: (name: string) => tools.find((t) => t.name === name) as Tool };
}

describe('filesystem (seed 001) FileSystemToolset', () => {
  it("has the seed's seven tools, parameters and defaults", () => {
    const { tools } = setup();
    expect(tools.map((t) => t.name)).toEqual(['read', 'write', 'edit', 'delete', 'move', 'copy', 'list_files']);
    const byName = Object.fromEntries(toOpenAITools(tools).map((t) => [t.function.name, t.function.parameters]));
    expect(byName['read']).toMatchObject({ properties: { path: {}, max_chars: { default: 20000 }, offset: { default: 0 } }, required: ['path'] });
    expect(byName['edit']).toMatchObject({ required: ['path', 'old_text', 'new_text'] });
    expect(byName['move']).toMatchObject({ required: ['source', 'destination'] });
    expect(byName['list_files']).toMatchObject({ properties: { path: { default: '.' }, pattern: { default: '**/*' } } });
  });

  it('read returns a ReadResult with every field, paging by offset/max_chars', async () => {
    const { tool } = setup({ 'notes.md': 'abcdefghij' });
    await expect(tool('read').run({ path: 'notes.md' })).resolves.toEqual({
      content: 'abcdefghij',
      truncated: false,
      total_chars: 10,
      offset: 0,
      chars_read: 10,
    });
    const page = await tool('read').run({ path: 'notes.md', max_chars: 4, offset: 3 });
    expect(page).toEqual({ content: 'defg', truncated: true, total_chars: 10, offset: 3, chars_read: 4 });
    expect(JSON.parse(tool('read').toText(page))).toEqual(page);
  });

  it('write, edit, delete, move and copy answer in one line', async () => {
    const { tool, context } = setup({ 'a.txt': 'hello world' });
    await expect(tool('write').run({ path: 'deep/b.txt', content: 'x' })).resolves.toBe('Wrote 1 characters to deep/b.txt');
    await expect(tool('edit').run({ path: 'a.txt', old_text: 'world', new_text: 'there' })).resolves.toBe('Edited a.txt: replaced 1 occurrence');
    expect(context.files.data.get('a.txt')).toBe('hello there');
    await expect(tool('copy').run({ source: 'a.txt', destination: 'c.txt' })).resolves.toBe('Copied a.txt to c.txt');
    await expect(tool('move').run({ source: 'c.txt', destination: 'd/e.txt' })).resolves.toBe('Moved c.txt to d/e.txt');
    await expect(tool('delete').run({ path: 'a.txt' })).resolves.toBe('Deleted a.txt');
    expect([...context.files.data.keys()].sort()).toEqual(['d/e.txt', 'deep/b.txt']);
  });

  it('edit failures are EditError with what to do next', async () => {
    const { tool } = setup({ 'a.txt': 'x x' });
    const notFound = await tool('edit').run({ path: 'a.txt', old_text: 'y', new_text: 'z' });
    expect(tool('edit').toText(notFound)).toBe(
      "EditError: The text to replace does not occur in 'a.txt'.\nRead the file again and copy the exact text to replace, whitespace included.",
    );
    const notUnique = await tool('edit').run({ path: 'a.txt', old_text: 'x', new_text: 'z' });
    expect(tool('edit').toText(notUnique)).toBe(
      "EditError: The text to replace occurs 2 times in 'a.txt'.\nInclude more surrounding lines in the text to replace so it occurs once.",
    );
  });

  it("policy errors carry the seed's class names and say what IS allowed", async () => {
    const denying: ToolContext = {
      ...fakeContext(),
      files: {
        readText: async () => '',
        write: async () => {
          throw new PathNotWritableError("'src/a.py' is read-only. Writable: /workspace/out.");
        },
        readChars: async () => {
          throw new SuffixNotAllowedError("'.env' files may not be read. Allowed suffixes: .py, .md.");
        },
      },
    };
    const tools = filesystemTools(denying);
    const write = tools.find((t) => t.name === 'write')!;
    expect(write.toText(await write.run({ path: 'src/a.py', content: '' }))).toBe(
      "PathNotWritableError: 'src/a.py' is read-only. Writable: /workspace/out.\nWrite only below the writable roots named in the message.",
    );
    const read = tools.find((t) => t.name === 'read')!;
    expect(await read.run({ path: '.env' })).toMatchObject({ isError: true, code: 'SUFFIX_NOT_ALLOWED', error_class: 'SuffixNotAllowedError' });
    expect(filesystemErrorClass('PATH_NOT_IN_SANDBOX')).toBe('PathNotInSandboxError');
    expect(filesystemErrorClass('PERMISSION_ESCALATION')).toBe('SandboxPermissionEscalationError');
    expect(filesystemErrorClass('FILE_TOO_LARGE')).toBe('FileTooLargeError');
    expect(filesystemErrorClass('NOT_FOUND')).toBe('SandboxError');
  });

  it('list_files globs (default **/*) and returns a JSON list', async () => {
    const { tool } = setup({ 'src/a.py': '', 'src/b.md': '', 'src/sub/c.py': '' });
    await expect(tool('list_files').run({ path: 'src', pattern: '**/*.py' })).resolves.toEqual(['a.py', 'sub/c.py']);
    const all = await tool('list_files').run({});
    expect(tool('list_files').toText(all)).toBe(JSON.stringify(['src/a.py', 'src/b.md', 'src/sub/c.py'], null, 2));
  });

  it('a tool whose primitive the sandbox lacks says so instead of emulating it', async () => {
    const bare: ToolContext = { ...fakeContext(), files: { readText: async () => '', write: async () => ({ bytesWritten: 0 }) } };
    const move = filesystemTools(bare).find((t) => t.name === 'move')!;
    await expect(move.run({ source: 'a', destination: 'b' })).resolves.toMatchObject({
      isError: true,
      code: 'NOT_AVAILABLE',
      error: 'move cannot run: this sandbox does not offer the move operation yet.',
    });
  });
});
