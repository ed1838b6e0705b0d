import { describe, expect, it } from '@jest/globals';
import { lineHash } from '@warren/protocol/node';
import { builtinTools, formatAnchoredLines, formatBashOutput, parseEditsJson, type Tool } from '../../src/index.js';
import { fakeContext } from './fakes.js';

function setup(files: Record<string, string>, answer?: Parameters<typeof fakeContext>[1]) {
  const context = fakeContext(files, answer);
  const tools = builtinTools(context);
  return { context, tool: (name: string) => tools.find((t) => t.name === name) as Tool };
}

describe('builtin (seed 004) read_file', () => {
  it('prints LINE#ID|content with the pinned 4-hex hash, as in the seed\'s "10#A1B2|def my_function():"', async () => {
    const lines = Array.from({ length: 9 }, (_, i) => `# line ${i + 1}`).concat(['def my_function():', '    return 1']);
    const { tool } = setup({ 'a.py': lines.join('\n') + '\n' });
    const text = (await tool('read_file').run({ path: 'a.py' })) as string;
    const tenth = text.split('\n')[9]!;
    expect(tenth).toBe(`10#${lineHash('def my_function():')}|def my_function():`);
    expect(tenth).toMatch(/^10#[0-9A-F]{4}\|def my_function\(\):$/);
    expect(text.split('\n')).toHaveLength(11);
  });

  it('hashes the line without its terminator (CRLF too), and prints an empty file as nothing', () => {
    expect(formatAnchoredLines('x\r\n\ny')).toBe(`1#${lineHash('x')}|x\n2#${lineHash('')}|\n3#${lineHash('y')}|y`);
    expect(formatAnchoredLines('')).toBe('');
  });
});

describe('builtin edit_file', () => {
  const source = 'a\nb\nc\nd\n';
  const anchor = (n: number, text: string) => `${n}#${lineHash(text)}`;

  it("applies the seed's edit schema (replace pos..end, append, prepend) in one batch", async () => {
    const { tool, context } = setup({ 'f.txt': source });
    const edits = [
      { op: 'replace', pos: anchor(2, 'b'), end: anchor(3, 'c'), lines: ['new line 1', 'new line 2'] },
      { op: 'append', pos: anchor(4, 'd'), lines: ['e'] },
      { op: 'prepend', pos: anchor(1, 'a'), lines: ['top'] },
    ];
    await expect(tool('edit_file').run({ file_path: 'f.txt', edits_json: JSON.stringify(edits) })).resolves.toBe(
      'Applied 3 edits to f.txt. Line numbers and hashes may have changed: read_file again before the next edit.',
    );
    expect(context.files.data.get('f.txt')).toBe('top\na\nnew line 1\nnew line 2\nd\ne\n');
  });

  it('rejects a stale anchor (the hash no longer matches the line) and changes nothing', async () => {
    const { tool, context } = setup({ 'f.txt': source });
    const stale = [{ op: 'replace', pos: anchor(2, 'b (as it was before someone changed it)'), lines: ['x'] }];
    const result = await tool('edit_file').run({ file_path: 'f.txt', edits_json: JSON.stringify(stale) });
    expect(result).toMatchObject({ isError: true, code: 'STALE_ANCHOR' });
    expect(tool('edit_file').toText(result)).toBe(
      `Error: Anchor ${stale[0]!.pos} is stale: line 2 is now 'b'.\nRead the file again for fresh LINE#ID anchors, then retry the edit.`,
    );
    expect(context.files.data.get('f.txt')).toBe(source);
  });

  it('answers malformed edits_json with what is wrong, before touching the file', async () => {
    const { tool, context } = setup({ 'f.txt': source });
    const notJson = await tool('edit_file').run({ file_path: 'f.txt', edits_json: '[{op:' });
    expect((notJson as { error: string }).error).toMatch(/^edits_json is not valid JSON/);
    const badAnchor = await tool('edit_file').run({ file_path: 'f.txt', edits_json: '[{"op":"replace","pos":"10","lines":[]}]' });
    expect((badAnchor as { error: string }).error).toContain('0.pos: must be a LINE#ID anchor such as "10#A1B2", copied from read_file');
    expect(parseEditsJson('[{"op":"append","pos":"1#AAAA","end":"2#AAAA","lines":[]}]')).toEqual({
      problem: '"end" is only allowed with op "replace" (got op "append").',
    });
    expect(parseEditsJson('[{"op":"replace","pos":"3#AAAA","end":"2#AAAA","lines":[]}]')).toEqual({ problem: '"end" (2#AAAA) comes before "pos" (3#AAAA).' });
    expect(context.files.calls.filter((c) => c.startsWith('editLines'))).toEqual([]);
  });
});

describe('builtin write_file and bash', () => {
  it('writes full content', async () => {
    const { tool, context } = setup({});
    await expect(tool('write_file').run({ path: 'n.txt', content: 'hi\n' })).resolves.toBe('Wrote 3 bytes to n.txt');
    expect(context.files.data.get('n.txt')).toBe('hi\n');
  });

  it('runs with a 30 s default timeout, stderr merged into stdout by the shell', async () => {
    const { tool, context } = setup({}, () => ({ stdout: 'out\nerr\n' }));
    await expect(tool('bash').run({ command: 'echo out; echo err >&2' })).resolves.toBe('out\nerr\n');
    expect(context.commands.calls[0]).toEqual({ cmd: 'exec 2>&1\necho out; echo err >&2', options: { timeoutMs: 30_000, signal: undefined } });
    await tool('bash').run({ command: 'sleep 1', timeout: 2 });
    expect(context.commands.calls[1]!.options['timeoutMs']).toBe(2000);
  });

  it('adds the exit code of a failing command, and says when it timed out', () => {
    expect(formatBashOutput({ exitCode: 1, stdout: 'oops', stderr: '', timedOut: false, truncated: false }, 30)).toBe('oops\n[exit code: 1]');
    expect(formatBashOutput({ exitCode: null, stdout: '', stderr: '', timedOut: true, truncated: false }, 30)).toBe('[timed out after 30 seconds]');
    expect(formatBashOutput({ exitCode: 0, stdout: 'ok\n', stderr: '', timedOut: false, truncated: false }, 30)).toBe('ok\n');
  });
});
