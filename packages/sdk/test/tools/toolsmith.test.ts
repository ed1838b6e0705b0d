import { describe, expect, it } from '@jest/globals';
import { summariseFailures, summarisePytest, toSandboxPath, toolsmithTools, type Tool, type ToolsmithLogEntry } from '../../src/index.js';
import { toolsmithHelper } from '../../src/tools/toolsmith-helper.js';
import { fakeContext } from './fakes.js';

type Answer = Parameters<typeof fakeContext>[1];

function setup(files: Record<string, string>, answer?: Answer) {
  const log: ToolsmithLogEntry[] = [];
  const context = fakeContext(files, answer);
  const tools = toolsmithTools(context, { onLog: (entry) => log.push(entry) });
  return { context, log, tools, tool: (name: string) => tools.find((t) => t.name === name) as Tool };
}

/** Answers like the Python helper: its JSON on the last line of stdout. */
const helperSays =
  (value: unknown): Answer =>
  () => ({ stdout: `noise\n${JSON.stringify(value)}\n` });

describe('toolsmith (seed 002)', () => {
  it("has the seed's eleven tools", () => {
    expect(setup({}).tools.map((t) => t.name)).toEqual([
      'read_file',
      'write_file',
      'list_files',
      'run_pylint_analysis',
      'run_pytest',
      'run_single_test',
      'get_failing_tests',
      'validate_python_syntax',
      'apply_fix',
      'add_docstring',
      'get_code_metrics',
    ]);
  });

  it('maps ./sandbox/... paths onto the sandbox root', () => {
    expect(toSandboxPath('./sandbox/test_dataset/file.py')).toBe('test_dataset/file.py');
    expect(toSandboxPath('sandbox/x.py')).toBe('x.py');
    expect(toSandboxPath('./sandbox')).toBe('.');
    expect(toSandboxPath('./sandbox/')).toBe('.');
    expect(toSandboxPath('other/x.py')).toBe('other/x.py');
    expect(toSandboxPath('../etc/passwd')).toBe('../etc/passwd');
    expect(toSandboxPath('/data/a.py', '/data')).toBe('a.py');
  });

  it('read_file returns the text, write_file true, list_files the .py paths as the directory was written; every operation is logged', async () => {
    const { tool, log, context } = setup({ 'test_dataset/ok_code.py': 'x = 1\n', 'test_dataset/sub/t.py': '', 'test_dataset/notes.md': '' });
    await expect(tool('read_file').run({ file_path: './sandbox/test_dataset/ok_code.py' })).resolves.toBe('x = 1\n');
    await expect(tool('write_file').run({ file_path: './sandbox/fixed_code.py', content: 'y = 2\n' })).resolves.toBe(true);
    expect(context.files.data.get('fixed_code.py')).toBe('y = 2\n');
    await expect(tool('list_files').run({ directory: './sandbox/test_dataset' })).resolves.toEqual([
      './sandbox/test_dataset/ok_code.py',
      './sandbox/test_dataset/sub/t.py',
    ]);
    expect(log.map((e) => [e.agent, e.action, e.operation, e.status])).toEqual([
      ['Toolsmith', 'ANALYSIS', 'read_file', 'success'],
      ['Toolsmith', 'FIX', 'write_file', 'success'],
      ['Toolsmith', 'ANALYSIS', 'list_files', 'success'],
    ]);
    expect(log[0]!.details).toEqual({ file_path: './sandbox/test_dataset/ok_code.py', size: 6 });
    expect(log[1]!.details).toEqual({ file_path: './sandbox/fixed_code.py', bytes_written: 6 });
    expect(log[2]!.details).toEqual({ directory: './sandbox/test_dataset', file_count: 2 });
  });

  it("errors are the seed's error dictionary: error, file_path, operation and the defaults", async () => {
    const { tool, log } = setup({});
    const result = await tool('get_code_metrics').run({ file_path: './sandbox/missing.py' });
    expect(result).toEqual({
      isError: true,
      code: 'NOT_FOUND',
      error: "FileNotFoundError: No file at 'missing.py'.",
      suggestion: 'Check the path; list the parent folder to see what exists.',
      file_path: './sandbox/missing.py',
      operation: 'get_code_metrics',
      lines_of_code: 0,
      functions: 0,
      classes: 0,
      has_main: false,
    });
    const text = JSON.parse(tool('get_code_metrics').toText(result));
    expect(text.isError).toBeUndefined();
    expect(text.error).toBe("FileNotFoundError: No file at 'missing.py'.");
    expect(log[0]).toMatchObject({ operation: 'get_code_metrics', status: 'error', details: { error: "FileNotFoundError: No file at 'missing.py'." } });
  });

  it('run_pylint_analysis returns every field the seed lists, from the helper run in the sandbox', async () => {
    const analysis = {
      score: 5.5,
      total_issues: 2,
      errors: 1,
      warnings: 1,
      issues: [{ line: 1 }, { line: 2 }],
      issues_detail: [{ line: 1, column: 0, type: 'error', symbol: 's', message: 'm' }],
    };
    const { tool, context } = setup({ 'bad.py': 'x\n' }, helperSays(analysis));
    await expect(tool('run_pylint_analysis').run({ file_path: './sandbox/bad.py' })).resolves.toEqual({ file: './sandbox/bad.py', ...analysis });
    expect(context.commands.calls[0]).toMatchObject({ cmd: ['python3', '-c', await toolsmithHelper(), 'pylint', 'bad.py'], options: { timeoutMs: 30_000 } });
  });

  it('a pylint timeout is a TimeoutExpired error dictionary with the analysis defaults', async () => {
    const { tool } = setup({ 'slow.py': '' }, () => ({ timedOut: true, exitCode: null }));
    await expect(tool('run_pylint_analysis').run({ file_path: 'slow.py' })).resolves.toMatchObject({
      isError: true,
      error: 'TimeoutExpired: pylint exceeded 30 seconds and was stopped.',
      file_path: 'slow.py',
      operation: 'run_pylint_analysis',
      file: 'slow.py',
      score: 0,
      total_issues: 0,
      issues: [],
      issues_detail: [],
    });
  });

  it('summarises pytest runs into run_pytest and get_failing_tests dictionaries', () => {
    const run = {
      exit_code: 1,
      output: 'F.s',
      tests: [
        { name: 't.py::test_a', status: 'failed' as const, message: 'assert 1 == 2' },
        { name: 't.py::test_b', status: 'passed' as const, message: '' },
        { name: 't.py::test_c', status: 'skipped' as const, message: 'later' },
      ],
    };
    expect(summarisePytest('./sandbox/ds', run)).toEqual({
      directory: './sandbox/ds',
      passed: 1,
      failed: 1,
      skipped: 1,
      total: 3,
      success_rate: 33.33,
      exit_code: 1,
      tests: [
        { name: 't.py::test_a', status: 'failed' },
        { name: 't.py::test_b', status: 'passed' },
        { name: 't.py::test_c', status: 'skipped' },
      ],
      error_log: 'F.s',
    });
    expect(summariseFailures(run)).toEqual({ failed_count: 1, failing_tests: [run.tests[0]], error_log: 'F.s' });
    expect(summarisePytest('d', { exit_code: 0, output: '.', tests: [{ name: 'a', status: 'passed', message: '' }] })).toMatchObject({
      success_rate: 100,
      error_log: '',
    });
  });

  it('run_pytest runs in the directory (resolved by the sandbox policy) with a 60 s timeout', async () => {
    const { tool, context } = setup({}, helperSays({ exit_code: 5, output: 'no tests ran', tests: [] }));
    await expect(tool('run_pytest').run({ directory: './sandbox/empty' })).resolves.toMatchObject({
      directory: './sandbox/empty',
      total: 0,
      success_rate: 0,
      exit_code: 5,
      error_log: '',
    });
    expect(context.commands.calls[0]!.options).toMatchObject({ cwd: 'empty', timeoutMs: 60_000 });
  });

  it('validate_python_syntax answers {valid: true} or a SyntaxError dictionary', async () => {
    const ok = setup({}, helperSays({ valid: true }));
    await expect(ok.tool('validate_python_syntax').run({ code: 'x = 1' })).resolves.toEqual({ valid: true });
    expect(ok.context.commands.calls[0]!.options['stdin']).toBe('x = 1');
    const bad = setup({}, helperSays({ valid: false, message: 'invalid syntax', line: 2, offset: 5, text: 'def (' }));
    await expect(bad.tool('validate_python_syntax').run({ code: 'x\ndef (' })).resolves.toMatchObject({
      isError: true,
      error: 'SyntaxError: invalid syntax (line 2, column 5)',
      operation: 'validate_python_syntax',
      valid: false,
      line: 2,
      offset: 5,
    });
  });

  it('apply_fix checks syntax first, writes, and reports sizes in characters', async () => {
    const { tool, context } = setup({ 'bad.py': 'héllo' }, helperSays({ valid: true }));
    await expect(tool('apply_fix').run({ file_path: './sandbox/bad.py', fixed_code: 'x = 1\n' })).resolves.toEqual({
      file_path: './sandbox/bad.py',
      original_size: 5,
      new_size: 6,
      size_change: 1,
    });
    expect(context.files.data.get('bad.py')).toBe('x = 1\n');
    const refused = setup({ 'bad.py': 'old' }, helperSays({ valid: false, message: 'invalid syntax', line: 1, offset: 3 }));
    await expect(refused.tool('apply_fix').run({ file_path: 'bad.py', fixed_code: 'def (' })).resolves.toMatchObject({
      isError: true,
      error: expect.stringMatching(/^SyntaxError: /),
      size_change: 0,
    });
    expect(refused.context.files.data.get('bad.py')).toBe('old');
  });

  it("add_docstring and get_code_metrics send the file's text to the helper and return the seed's fields", async () => {
    const docs = setup({ 'a.py': 'def f(): pass\n' }, helperSays({ missing_docstrings: 1 }));
    await expect(docs.tool('add_docstring').run({ file_path: 'a.py' })).resolves.toEqual({ file_path: 'a.py', missing_docstrings: 1 });
    expect(docs.context.commands.calls[0]!.options['stdin']).toBe('def f(): pass\n');
    const metrics = setup({ 'a.py': '' }, helperSays({ lines_of_code: 3, functions: 1, classes: 0, has_main: true }));
    await expect(metrics.tool('get_code_metrics').run({ file_path: 'a.py' })).resolves.toEqual({
      file_path: 'a.py',
      lines_of_code: 3,
      functions: 1,
      classes: 0,
      has_main: true,
    });
  });

  it('code that does not parse is a SyntaxError dictionary', async () => {
    const { tool } = setup({ 'a.py': 'def (' }, helperSays({ syntax_error: { message: 'invalid syntax', line: 1, offset: 5 } }));
    await expect(tool('add_docstring').run({ file_path: 'a.py' })).resolves.toMatchObject({
      error: 'SyntaxError: invalid syntax (line 1, column 5)',
      missing_docstrings: 0,
      line: 1,
    });
  });
});
