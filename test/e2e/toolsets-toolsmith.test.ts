import '../support/timeouts.js';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { dispatchOpenAIToolCall, toolsmithTools, type ToolSet, type ToolsmithLogEntry } from '@warren/sdk';
import { startToolsetSandbox, type ToolsetSandbox } from '../support/toolsets.js';

const BAD_CODE = 'import os\ndef calculate_sum(a,b):\n    return a+b\nclass Calc:\n    def twice(self, x):\n        return x*2\n';
const FIXED_CODE =
  '"""Sums."""\n\n\ndef calculate_sum(first: int, second: int) -> int:\n    """Calculate the sum of two numbers."""\n    return first + second\n\n\nif __name__ == "__main__":\n    print(calculate_sum(1, 2))\n';
const TESTS =
  'from bad_code import calculate_sum\nimport pytest\n\ndef test_addition():\n    assert calculate_sum(1, 2) == 3\n\ndef test_wrong():\n    assert calculate_sum(1, 1) == 3\n\n@pytest.mark.skip(reason="later")\ndef test_later():\n    pass\n';

let callCount = 0;

describe('toolsmith tool set (seed 002): a scripted orchestrator loop over OpenAI tool calls, Python tools inside the sandbox', () => {
  let env: ToolsetSandbox;
  let tools: ToolSet;
  const log: ToolsmithLogEntry[] = [];
  const send = async (name: string, args: Record<string, unknown>) => {
    const message = await dispatchOpenAIToolCall(tools, { id: `call_${++callCount}`, type: 'function', function: { name, arguments: JSON.stringify(args) } });
    return JSON.parse(message.content) as Record<string, unknown>;
  };
  /** read_file answers the file's text, not JSON. */
  const readText = async (args: Record<string, unknown>) => {
    const message = await dispatchOpenAIToolCall(tools, {
      id: `call_${++callCount}`,
      type: 'function',
      function: { name: 'read_file', arguments: JSON.stringify(args) },
    });
    return message.content;
  };

  beforeAll(async () => {
    env = await startToolsetSandbox();
    tools = toolsmithTools(env.context, { onLog: (entry) => log.push(entry) });
  });
  afterAll(async () => {
    await env?.[Symbol.asyncDispose]();
  });

  it("runs the seed's complete workflow", async () => {
    expect(await send('write_file', { file_path: './sandbox/test_dataset/bad_code.py', content: BAD_CODE })).toBe(true);
    expect(await send('write_file', { file_path: './sandbox/test_dataset/test_bad_code.py', content: TESTS })).toBe(true);
    expect(await readText({ file_path: './sandbox/test_dataset/bad_code.py' })).toBe(BAD_CODE);

    const analysis = await send('run_pylint_analysis', { file_path: './sandbox/test_dataset/bad_code.py' });
    expect(Object.keys(analysis).sort()).toEqual(['errors', 'file', 'issues', 'issues_detail', 'score', 'total_issues', 'warnings']);
    expect(analysis).toMatchObject({ file: './sandbox/test_dataset/bad_code.py', errors: 0 });
    expect(analysis['warnings']).toBeGreaterThanOrEqual(1); // unused import
    expect(analysis['total_issues']).toBeGreaterThanOrEqual(4);
    expect(typeof analysis['score']).toBe('number');
    const detail = (analysis['issues_detail'] as Record<string, unknown>[])[0]!;
    expect(Object.keys(detail).sort()).toEqual(['column', 'line', 'message', 'symbol', 'type']);
    expect((analysis['issues_detail'] as { symbol: string }[]).map((i) => i.symbol)).toContain('unused-import');

    expect(await send('add_docstring', { file_path: './sandbox/test_dataset/bad_code.py' })).toEqual({
      file_path: './sandbox/test_dataset/bad_code.py',
      missing_docstrings: 3,
    });
    expect(await send('get_code_metrics', { file_path: './sandbox/test_dataset/bad_code.py' })).toEqual({
      file_path: './sandbox/test_dataset/bad_code.py',
      lines_of_code: 6,
      functions: 2,
      classes: 1,
      has_main: false,
    });

    const tests = await send('run_pytest', { directory: './sandbox/test_dataset' });
    expect(tests).toMatchObject({ directory: './sandbox/test_dataset', passed: 1, failed: 1, skipped: 1, total: 3, success_rate: 33.33, exit_code: 1 });
    expect(tests['tests']).toEqual([
      { name: 'test_bad_code.py::test_addition', status: 'passed' },
      { name: 'test_bad_code.py::test_wrong', status: 'failed' },
      { name: 'test_bad_code.py::test_later', status: 'skipped' },
    ]);
    expect(tests['error_log']).toContain('assert 2 == 3');

    const failing = await send('get_failing_tests', { directory: './sandbox/test_dataset' });
    expect(failing).toMatchObject({
      failed_count: 1,
      failing_tests: [{ name: 'test_bad_code.py::test_wrong', status: 'failed', message: expect.stringContaining('assert 2 == 3') }],
    });

    const single = await send('run_single_test', { test_file: './sandbox/test_dataset/test_bad_code.py', test_name: 'test_addition' });
    expect(single).toMatchObject({ test_file: './sandbox/test_dataset/test_bad_code.py', test_name: 'test_addition', passed: 1, failed: 0, success: true });
    expect(single['output']).toContain('1 passed');

    expect(await send('validate_python_syntax', { code: FIXED_CODE })).toEqual({ valid: true });
    const invalid = await send('validate_python_syntax', { code: 'def broken(:\n' });
    expect(invalid).toMatchObject({ error: expect.stringMatching(/^SyntaxError: /), operation: 'validate_python_syntax', valid: false, line: 1 });

    const refused = await send('apply_fix', { file_path: './sandbox/test_dataset/bad_code.py', fixed_code: 'def broken(:\n' });
    expect(refused).toMatchObject({
      error: expect.stringMatching(/^SyntaxError: /),
      file_path: './sandbox/test_dataset/bad_code.py',
      operation: 'apply_fix',
      size_change: 0,
    });
    const fix = await send('apply_fix', { file_path: './sandbox/test_dataset/bad_code.py', fixed_code: FIXED_CODE });
    expect(fix).toEqual({
      file_path: './sandbox/test_dataset/bad_code.py',
      original_size: BAD_CODE.length,
      new_size: FIXED_CODE.length,
      size_change: FIXED_CODE.length - BAD_CODE.length,
    });

    const after = await send('run_pylint_analysis', { file_path: './sandbox/test_dataset/bad_code.py' });
    expect(after['score']).toBe(10);
    expect(await send('get_code_metrics', { file_path: './sandbox/test_dataset/bad_code.py' })).toMatchObject({ functions: 1, classes: 0, has_main: true });

    expect(log.length).toBe(callCount);
    expect(log[0]).toMatchObject({
      agent: 'Toolsmith',
      action: 'FIX',
      operation: 'write_file',
      status: 'success',
      details: { file_path: './sandbox/test_dataset/bad_code.py' },
    });
    expect(log.every((e) => e.agent === 'Toolsmith')).toBe(true);
    expect(log.filter((e) => e.action === 'FIX').map((e) => e.operation)).toEqual(['write_file', 'write_file', 'apply_fix', 'apply_fix']);
  });

  it('lists the Python files of a folder, recursively, written the way the folder was', async () => {
    await send('write_file', { file_path: './sandbox/listing/pkg/mod.py', content: '' });
    await send('write_file', { file_path: './sandbox/listing/readme.md', content: '' });
    await send('write_file', { file_path: './sandbox/listing/top.py', content: '' });
    expect(await send('list_files', { directory: './sandbox/listing' })).toEqual(['./sandbox/listing/pkg/mod.py', './sandbox/listing/top.py']);
  });

  it("returns the seed's error dictionaries", async () => {
    expect(JSON.parse(await readText({ file_path: '../etc/passwd' }))).toMatchObject({
      error: expect.stringMatching(/^SecurityError: /),
      file_path: '../etc/passwd',
      operation: 'read_file',
    });
    expect(await send('get_code_metrics', { file_path: './sandbox/nope.py' })).toMatchObject({
      error: expect.stringMatching(/^FileNotFoundError: /),
      file_path: './sandbox/nope.py',
      operation: 'get_code_metrics',
      lines_of_code: 0,
      functions: 0,
      classes: 0,
      has_main: false,
    });
    expect(await send('run_pytest', { directory: './sandbox/missing_dir' })).toMatchObject({
      error: expect.any(String),
      operation: 'run_pytest',
      passed: 0,
      total: 0,
    });
  });
});
