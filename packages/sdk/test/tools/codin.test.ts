import { describe, expect, it } from '@jest/globals';
import { codinTools, formatCodinExec, formatCodinList, toOpenAITools, type Tool } from '../../src/index.js';
import { fakeContext, numberedLines } from './fakes.js';

function setup(files: Record<string, string>, answer?: Parameters<typeof fakeContext>[1]) {
  const context = fakeContext(files, answer);
  const tools = codinTools(context);
  const tool = (name: string) => tools.find((t) => t.name === name) as Tool;
  return { context, tools, tool };
}

const body = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => `line ${from + i}\n`).join('');

describe('codin (seed 000) sandbox_read_file', () => {
  const { tool } = setup({
    'example.py': numberedLines(100),
    'large_file.py': numberedLines(300),
    'code.py': numberedLines(60),
    'config.txt': numberedLines(8),
    'log.txt': numberedLines(150),
    'huge.py': numberedLines(1500),
    'small.py': 'print("hi")\nprint("there")',
    'empty.txt': '',
  });
  const read = (args: Record<string, unknown>) => tool('sandbox_read_file').run(args);

  it("has the seed's names, parameters and defaults", () => {
    const [openai] = toOpenAITools([tool('sandbox_read_file')]);
    expect(openai!.function.parameters).toMatchObject({
      properties: { path: { type: 'string' }, start_line: { type: 'integer' }, end_line: { type: 'integer' }, max_lines: { type: 'integer', default: 1000 } },
      required: ['path'],
    });
  });

  it('# Read entire file: {"path": "example.py"} returns a small file as it is', async () => {
    await expect(read({ path: 'example.py' })).resolves.toBe(numberedLines(100));
    await expect(read({ path: 'small.py' })).resolves.toBe('print("hi")\nprint("there")');
  });

  it("# Read specific line range: the seed's example header, to the character", async () => {
    // Seed 000: "# File: example.py\n# Lines 10-20 of 100 total\n\n[actual file content]"
    await expect(read({ path: 'example.py', start_line: 10, end_line: 20 })).resolves.toBe(`# File: example.py\n# Lines 10-20 of 100 total\n\n${body(10, 20)}`);
    await expect(read({ path: 'large_file.py', start_line: 10, end_line: 20 })).resolves.toBe(
      `# File: large_file.py\n# Lines 10-20 of 300 total\n\n${body(10, 20)}`,
    );
  });

  it('# Read from line 50 to end', async () => {
    await expect(read({ path: 'code.py', start_line: 50 })).resolves.toBe(`# File: code.py\n# Lines 50-60 of 60 total\n\n${body(50, 60)}`);
  });

  it('# Read first 5 lines', async () => {
    await expect(read({ path: 'config.txt', end_line: 5 })).resolves.toBe(`# File: config.txt\n# Lines 1-5 of 8 total\n\n${body(1, 5)}`);
  });

  it('# Read with custom max_lines limit: truncates with the note', async () => {
    await expect(read({ path: 'log.txt', max_lines: 100 })).resolves.toBe(
      `# File: log.txt\n# Lines 1-100 of 150 total\n# Output truncated to 100 lines\n\n${body(1, 100)}`,
    );
  });

  it('Files larger than max_lines (default: 1000) are automatically truncated', async () => {
    await expect(read({ path: 'huge.py' })).resolves.toBe(
      `# File: huge.py\n# Lines 1-1000 of 1500 total\n# Output truncated to 1000 lines\n\n${body(1, 1000)}`,
    );
    await expect(read({ path: 'huge.py', start_line: 400, end_line: 1450 })).resolves.toBe(
      `# File: huge.py\n# Lines 400-1399 of 1500 total\n# Output truncated to 1000 lines\n\n${body(400, 1399)}`,
    );
  });

  it('Invalid line ranges (start > end) return empty content with metadata', async () => {
    await expect(read({ path: 'example.py', start_line: 30, end_line: 20 })).resolves.toBe('# File: example.py\n# Lines 30-20 of 100 total\n\n');
  });

  it('Line numbers beyond file length are handled gracefully', async () => {
    await expect(read({ path: 'example.py', start_line: 95, end_line: 500 })).resolves.toBe(
      `# File: example.py\n# Lines 95-100 of 100 total\n\n${body(95, 100)}`,
    );
    await expect(read({ path: 'example.py', start_line: 150 })).resolves.toBe('# File: example.py\n# Lines 150-100 of 100 total\n\n');
  });

  it('Negative line numbers are clamped to 1', async () => {
    await expect(read({ path: 'example.py', start_line: -5, end_line: 3 })).resolves.toBe(`# File: example.py\n# Lines 1-3 of 100 total\n\n${body(1, 3)}`);
    await expect(read({ path: 'example.py', start_line: 0, end_line: -2 })).resolves.toBe(`# File: example.py\n# Lines 1-1 of 100 total\n\n${body(1, 1)}`);
  });

  it('Empty files are handled correctly', async () => {
    await expect(read({ path: 'empty.txt' })).resolves.toBe('');
    await expect(read({ path: 'empty.txt', start_line: 1, end_line: 10 })).resolves.toBe('# File: empty.txt\n# Lines 1-0 of 0 total\n\n');
  });

  it('a missing file is an error result, not a throw', async () => {
    const result = await read({ path: 'nope.py' });
    expect(tool('sandbox_read_file').toText(result)).toBe("Error: No file at 'nope.py'.\nCheck the path; list the parent folder to see what exists.");
  });
});

describe('codin sandbox_write_file, sandbox_exec, sandbox_list_files', () => {
  it('writes and says how much', async () => {
    const { tool, context } = setup({});
    await expect(tool('sandbox_write_file').run({ path: 'a/b.py', content: 'héllo' })).resolves.toBe('Wrote 6 bytes to a/b.py');
    expect(context.files.data.get('a/b.py')).toBe('héllo');
  });

  it('runs cmd with cwd, env and timeout (seconds) and formats exit code and streams', async () => {
    const { tool, context } = setup({}, () => ({ exitCode: 2, stdout: 'out\n', stderr: 'err\n' }));
    await expect(tool('sandbox_exec').run({ cmd: 'make', cwd: 'src', timeout: 5, env: { A: '1' } })).resolves.toBe(
      'Exit code: 2\nSTDOUT:\nout\nSTDERR:\nerr\n',
    );
    expect(context.commands.calls[0]).toEqual({ cmd: 'make', options: { cwd: 'src', env: { A: '1' }, timeoutMs: 5000, signal: undefined } });
    await tool('sandbox_exec').run({ cmd: 'true' });
    expect(context.commands.calls[1]!.options['timeoutMs']).toBe(60_000);
  });

  it('formats timeouts, silence and truncation', () => {
    expect(formatCodinExec({ exitCode: null, stdout: 'partial', stderr: '', timedOut: true, truncated: false }, 5)).toBe(
      'Command timed out after 5 seconds (killed)\nSTDOUT:\npartial\n',
    );
    expect(formatCodinExec({ exitCode: 0, stdout: '', stderr: '', timedOut: false, truncated: false }, 5)).toBe('Exit code: 0\n(no output)\n');
    expect(formatCodinExec({ exitCode: 0, stdout: 'x\n', stderr: '', timedOut: false, truncated: true }, 5)).toBe(
      'Exit code: 0\nSTDOUT:\nx\n(output truncated: the command printed more than the sandbox keeps)\n',
    );
  });

  it('lists non-recursively by default, folders with a slash, under the path asked for', async () => {
    const { tool } = setup({ 'src/a.py': '', 'src/pkg/b.py': '', 'README.md': '' });
    await expect(tool('sandbox_list_files').run({})).resolves.toBe('README.md\nsrc/');
    await expect(tool('sandbox_list_files').run({ path: 'src' })).resolves.toBe('src/a.py\nsrc/pkg/');
    await expect(tool('sandbox_list_files').run({ path: 'src', recursive: true })).resolves.toBe('src/a.py\nsrc/pkg/\nsrc/pkg/b.py');
  });

  it('caps the listing at max_files (default 100) and says so', async () => {
    const many = Object.fromEntries(Array.from({ length: 120 }, (_, i) => [`f${String(i).padStart(3, '0')}.txt`, '']));
    const { tool } = setup(many);
    const text = (await tool('sandbox_list_files').run({})) as string;
    expect(text.split('\n')).toHaveLength(101);
    expect(text.endsWith('f099.txt\n# Output truncated to 100 files')).toBe(true);
    await expect(tool('sandbox_list_files').run({ max_files: 2 })).resolves.toBe('f000.txt\nf001.txt\n# Output truncated to 2 files');
    expect(formatCodinList('.', [], false, 100)).toBe('# No files in .');
  });
});
