import { posix } from 'node:path';
import { z } from 'zod';
import { need } from './context.js';
import { asToolContext, type ToolTarget } from './sandbox-context.js';
import { toolsmithHelper } from './toolsmith-helper.js';
import { defineTool, isToolError, toolError, type Tool, type ToolError, type ToolErrorCode, type ToolSet } from './tool.js';

/** Seed 002's `sandbox_dir` default: the prefix paths are written with. */
export const TOOLSMITH_DEFAULT_SANDBOX_DIR = './sandbox';
/** Seed 002's timeouts, in milliseconds. */
export const TOOLSMITH_TIMEOUTS_MS = { pylint: 30_000, pytest: 60_000, singleTest: 30_000, helper: 30_000 } as const;

/** Seed 002's `ActionType` of a logged operation. */
export type ToolsmithAction = 'ANALYSIS' | 'FIX';

/** One logged operation (seed 002's `log_experiment`). */
export interface ToolsmithLogEntry {
  agent: 'Toolsmith';
  action: ToolsmithAction;
  operation: string;
  status: 'success' | 'error';
  details: Record<string, unknown>;
  timestamp: string;
}

/** Options of {@link toolsmithTools}. */
export interface ToolsmithOptions {
  /** Receives every operation's log entry (seed 002 logs every operation); without it entries are dropped. */
  onLog?: ((entry: ToolsmithLogEntry) => void) | undefined;
}

/**
 * Seed 002 names paths from the orchestrator's folder (`./sandbox/test_dataset/a.py`); Warren's
 * sandbox root takes that folder's place. A path under `sandbox_dir` loses that prefix; any other
 * path is taken from the sandbox root as it is (the sandbox's policy still refuses escapes).
 *
 * @example
 * toSandboxPath('./sandbox/test_dataset/a.py'); // 'test_dataset/a.py'
 */
export function toSandboxPath(path: string, sandboxDir: string = TOOLSMITH_DEFAULT_SANDBOX_DIR): string {
  const normalise = (p: string) => posix.normalize(p).replace(/\/+$/, '');
  const dir = normalise(sandboxDir);
  const target = normalise(path);
  if (target === dir) return '.';
  if (target.startsWith(`${dir}/`)) return target.slice(dir.length + 1);
  return target;
}

/**
 * The Python exception seed 002 names for a Warren error code.
 *
 * @example
 * toolsmithExceptionName('PATH_NOT_IN_SANDBOX'); // 'SecurityError'
 */
export function toolsmithExceptionName(code: ToolErrorCode): string {
  switch (code) {
    case 'PATH_NOT_IN_SANDBOX':
    case 'PATH_NOT_WRITABLE':
    case 'FORBIDDEN':
      return 'SecurityError';
    case 'NOT_FOUND':
      return 'FileNotFoundError';
    case 'NOT_A_DIRECTORY':
      return 'NotADirectoryError';
    case 'IS_A_DIRECTORY':
      return 'IsADirectoryError';
    case 'REQUEST_TIMEOUT':
      return 'TimeoutExpired';
    default:
      return 'Exception';
  }
}

/**
 * Seed 002's error dictionary: `error` (the exception name and what went wrong), `file_path`,
 * `operation`, and the operation's other fields at their default values, plus Warren's `code`
 * and `suggestion`.
 *
 * @example
 * toolsmithError(toolError('NOT_FOUND', "No file at 'a.py'."), 'a.py', 'get_code_metrics', { lines_of_code: 0 });
 */
export function toolsmithError(error: ToolError, filePath: string | undefined, operation: string, defaults: Record<string, unknown>): ToolError {
  const { isError: _isError, code, error: text, suggestion, exception, ...extra } = error;
  const name = typeof exception === 'string' ? exception : toolsmithExceptionName(code);
  const message = text.startsWith(`${name}:`) ? text : `${name}: ${text}`;
  return { isError: true, error: message, file_path: filePath ?? null, operation, ...defaults, ...extra, code, suggestion };
}

function jsonText(result: unknown): string {
  if (typeof result === 'object' && result !== null && (result as ToolError).isError === true) {
    const { isError: _isError, ...rest } = result as ToolError;
    return JSON.stringify(rest, null, 2);
  }
  return JSON.stringify(result, null, 2);
}

/** The pytest report the in-sandbox helper returns. */
export interface PytestReport {
  exit_code: number;
  output: string;
  tests: { name: string; status: 'passed' | 'failed' | 'error' | 'skipped'; message: string }[];
}

/**
 * `run_pytest`'s dictionary from a pytest report. Errors (setup/collection) count as failed.
 *
 * @example
 * summarisePytest('./sandbox/ds', { exit_code: 0, output: '', tests: [{ name: 't.py::test_a', status: 'passed', message: '' }] });
 */
export function summarisePytest(directory: string, run: PytestReport): Record<string, unknown> {
  const passed = run.tests.filter((t) => t.status === 'passed').length;
  const failed = run.tests.filter((t) => t.status === 'failed' || t.status === 'error').length;
  const skipped = run.tests.filter((t) => t.status === 'skipped').length;
  const total = passed + failed + skipped;
  const success_rate = total === 0 ? 0 : Math.round((passed / total) * 10_000) / 100;
  const problem = failed > 0 || (run.exit_code !== 0 && run.exit_code !== 5);
  return {
    directory,
    passed,
    failed,
    skipped,
    total,
    success_rate,
    exit_code: run.exit_code,
    tests: run.tests.map(({ name, status }) => ({ name, status })),
    error_log: problem ? run.output : '',
  };
}

/**
 * `get_failing_tests`'s dictionary from a pytest report.
 *
 * @example
 * summariseFailures(report).failed_count;
 */
export function summariseFailures(run: PytestReport): Record<string, unknown> {
  const failing = run.tests.filter((t) => t.status === 'failed' || t.status === 'error');
  const problem = failing.length > 0 || (run.exit_code !== 0 && run.exit_code !== 5);
  return { failed_count: failing.length, failing_tests: failing, error_log: problem ? run.output : '' };
}

const SandboxDir = z
  .string()
  .min(1)
  .default(TOOLSMITH_DEFAULT_SANDBOX_DIR)
  .describe('The folder paths are written under (default "./sandbox"); it maps onto the sandbox root.');
const FilePathArg = z.string().min(1);

const DEFAULTS = {
  run_pylint_analysis: { file: null, score: 0.0, total_issues: 0, errors: 0, warnings: 0, issues: [], issues_detail: [] },
  run_pytest: { directory: null, passed: 0, failed: 0, skipped: 0, total: 0, success_rate: 0, exit_code: -1, tests: [], error_log: '' },
  run_single_test: { test_file: null, test_name: null, passed: 0, failed: 0, success: false, output: '' },
  get_failing_tests: { failed_count: 0, failing_tests: [], error_log: '' },
  apply_fix: { original_size: 0, new_size: 0, size_change: 0 },
  add_docstring: { missing_docstrings: 0 },
  get_code_metrics: { lines_of_code: 0, functions: 0, classes: 0, has_main: false },
  validate_python_syntax: { valid: false },
} as const;

/**
 * Seed 002 ("Toolsmith"): file tools, pylint, pytest (all, single, failing), syntax validation,
 * `apply_fix`, the missing-docstring count (`add_docstring`) and code metrics. The Python tools run
 * inside the sandbox (`python3`, pylint, pytest of its image); results are the seed's dictionaries
 * and failures its error dictionary. Every operation is reported to `onLog`.
 *
 * @example
 * const log: ToolsmithLogEntry[] = [];
 * const tools = toolsmithTools(sandbox, { onLog: (entry) => log.push(entry) });
 */
export function toolsmithTools(target: ToolTarget, options: ToolsmithOptions = {}): ToolSet {
  const { files, commands } = asToolContext(target);

  /** Runs the Python helper in the sandbox and returns its JSON answer. */
  async function helper(
    args: string[],
    run: { stdin?: string; timeoutMs: number; cwd?: string; signal?: AbortSignal | undefined; what: string },
  ): Promise<Record<string, unknown>> {
    const result = await commands.run(['python3', '-c', await toolsmithHelper(), ...args], {
      stdin: run.stdin ?? '',
      timeoutMs: run.timeoutMs,
      cwd: run.cwd,
      signal: run.signal,
    });
    if (result.timedOut) {
      throw toolError(
        'REQUEST_TIMEOUT',
        `${run.what} exceeded ${run.timeoutMs / 1000} seconds and was stopped.`,
        'Simplify the test cases or analyse a smaller file.',
        { exception: 'TimeoutExpired' },
      );
    }
    const line = result.stdout.trimEnd().split('\n').pop() ?? '';
    let answer: Record<string, unknown>;
    try {
      answer = JSON.parse(line) as Record<string, unknown>;
    } catch {
      throw toolError(
        'INTERNAL',
        `${run.what} failed in the sandbox (exit code ${result.exitCode}): ${(result.stderr || result.stdout).slice(-2000).trim()}`,
        'Check that python3 is installed in the sandbox image.',
      );
    }
    const syntaxError = answer['syntax_error'] as { message: string; line: number | null; offset: number | null } | undefined;
    if (syntaxError) {
      throw toolError('INVALID_ARGUMENTS', `${syntaxError.message} (line ${syntaxError.line}, column ${syntaxError.offset})`, 'Fix the syntax error first.', {
        exception: 'SyntaxError',
        line: syntaxError.line,
        offset: syntaxError.offset,
      });
    }
    if (typeof answer['failure'] === 'string') throw toolError('INTERNAL', `${run.what} failed in the sandbox: ${answer['failure']}`);
    return answer;
  }

  function logged<I, O>(
    tool: Tool<I, O>,
    action: ToolsmithAction,
    details: (args: Record<string, unknown>, result: O | ToolError) => Record<string, unknown>,
  ): Tool<I, O> {
    return {
      ...tool,
      run: async (args, runOptions) => {
        const result = await tool.run(args, runOptions);
        const record = (typeof args === 'object' && args !== null ? args : {}) as Record<string, unknown>;
        const failed = isToolError(result);
        options.onLog?.({
          agent: 'Toolsmith',
          action,
          operation: tool.name,
          status: failed ? 'error' : 'success',
          details: failed ? { ...details(record, result), error: result.error } : details(record, result),
          timestamp: new Date().toISOString(),
        });
        return result;
      },
    };
  }

  const readSource = (path: string, sandboxDir: string, signal: AbortSignal | undefined) => files.readText(toSandboxPath(path, sandboxDir), { signal });
  const codePoints = (text: string) => [...text].length;

  return [
    logged(
      defineTool({
        name: 'read_file',
        description:
          'Read the contents of a file inside the sandbox and return it as text. Paths are written under sandbox_dir ("./sandbox/..."); paths outside it fail with a SecurityError.',
        input: z.strictObject({ file_path: FilePathArg.describe('Path to the file to read'), sandbox_dir: SandboxDir }),
        onError: (error, args) => toolsmithError(error, (args as { file_path?: string })?.file_path, 'read_file', {}),
        toText: (result) => (typeof result === 'string' ? result : jsonText(result)),
        execute: async ({ file_path, sandbox_dir }, { signal }) => readSource(file_path, sandbox_dir, signal),
      }),
      'ANALYSIS',
      (args, result) => ({ file_path: args['file_path'], size: typeof result === 'string' ? codePoints(result) : 0 }),
    ),
    logged(
      defineTool({
        name: 'write_file',
        description: 'Write content to a file inside the sandbox, creating parent directories. Returns true on success.',
        input: z.strictObject({
          file_path: FilePathArg.describe('Destination file path'),
          content: z.string().describe('Content to write to the file'),
          sandbox_dir: SandboxDir,
        }),
        output: 'json',
        onError: (error, args) => toolsmithError(error, (args as { file_path?: string })?.file_path, 'write_file', {}),
        toText: jsonText,
        execute: async ({ file_path, content, sandbox_dir }, { signal }) => {
          await files.write(toSandboxPath(file_path, sandbox_dir), content, { signal });
          return true as const;
        },
      }),
      'FIX',
      (args) => ({ file_path: args['file_path'], bytes_written: typeof args['content'] === 'string' ? Buffer.byteLength(args['content']) : 0 }),
    ),
    logged(
      defineTool({
        name: 'list_files',
        description:
          'List all Python files (.py) within a directory, including subdirectories. Returns a JSON array of paths written the way the directory was given.',
        input: z.strictObject({ directory: FilePathArg.describe('Directory to scan for Python files'), sandbox_dir: SandboxDir }),
        output: 'json',
        onError: (error, args) => toolsmithError(error, (args as { directory?: string })?.directory, 'list_files', { files: [] }),
        toText: jsonText,
        execute: async ({ directory, sandbox_dir }, { signal }) => {
          const glob = need(files.glob?.bind(files), 'glob', 'list_files');
          const found = await glob(toSandboxPath(directory, sandbox_dir), '**/*.py', { signal });
          return found.map((rel) => `${directory.replace(/\/+$/, '')}/${rel}`).sort();
        },
      }),
      'ANALYSIS',
      (args, result) => ({ directory: args['directory'], file_count: Array.isArray(result) ? result.length : 0 }),
    ),
    logged(
      defineTool({
        name: 'run_pylint_analysis',
        description:
          'Run pylint on a Python file in the sandbox. Returns {file, score (out of 10), total_issues, errors, warnings, issues (first 20), ' +
          'issues_detail (first 10: line, column, type, symbol, message)}. Times out after 30 seconds.',
        input: z.strictObject({ file_path: FilePathArg.describe('Path to the Python file to analyze'), sandbox_dir: SandboxDir }),
        output: 'json',
        onError: (error, args) =>
          toolsmithError(error, (args as { file_path?: string })?.file_path, 'run_pylint_analysis', {
            ...DEFAULTS.run_pylint_analysis,
            file: (args as { file_path?: string })?.file_path ?? null,
          }),
        toText: jsonText,
        execute: async ({ file_path, sandbox_dir }, { signal }) => {
          await readSource(file_path, sandbox_dir, signal);
          const analysis = await helper(['pylint', toSandboxPath(file_path, sandbox_dir)], { timeoutMs: TOOLSMITH_TIMEOUTS_MS.pylint, signal, what: 'pylint' });
          return { file: file_path, ...analysis };
        },
      }),
      'ANALYSIS',
      (args, result) => ({
        file_path: args['file_path'],
        score: (result as { score?: number }).score,
        total_issues: (result as { total_issues?: number }).total_issues,
      }),
    ),
    logged(
      defineTool({
        name: 'run_pytest',
        description:
          'Run every pytest test in a directory of the sandbox. Returns {directory, passed, failed, skipped, total, success_rate (0-100), exit_code, ' +
          'tests: [{name, status}], error_log (pytest output when something failed)}. Times out after 60 seconds.',
        input: z.strictObject({ directory: FilePathArg.describe('Directory containing test files'), sandbox_dir: SandboxDir }),
        output: 'json',
        onError: (error, args) =>
          toolsmithError(error, (args as { directory?: string })?.directory, 'run_pytest', {
            ...DEFAULTS.run_pytest,
            directory: (args as { directory?: string })?.directory ?? null,
          }),
        toText: jsonText,
        execute: async ({ directory, sandbox_dir }, { signal }) => {
          const run = await helper(['pytest', '.', '.'], {
            timeoutMs: TOOLSMITH_TIMEOUTS_MS.pytest,
            cwd: toSandboxPath(directory, sandbox_dir),
            signal,
            what: 'pytest',
          });
          return summarisePytest(directory, run as unknown as PytestReport);
        },
      }),
      'ANALYSIS',
      (args, result) => ({
        directory: args['directory'],
        passed: (result as { passed?: number }).passed,
        failed: (result as { failed?: number }).failed,
        total: (result as { total?: number }).total,
        success_rate: (result as { success_rate?: number }).success_rate,
      }),
    ),
    logged(
      defineTool({
        name: 'run_single_test',
        description:
          'Run one test file, or one test function in it (test_name), with pytest in the sandbox. Returns {test_file, test_name, passed, failed, success, output}. Times out after 30 seconds.',
        input: z.strictObject({
          test_file: FilePathArg.describe('Path to the test file'),
          test_name: z.string().min(1).nullable().optional().describe('Name of a specific test function to run'),
          sandbox_dir: SandboxDir,
        }),
        output: 'json',
        onError: (error, args) => {
          const { test_file, test_name } = (args ?? {}) as { test_file?: string; test_name?: string };
          return toolsmithError(error, test_file, 'run_single_test', {
            ...DEFAULTS.run_single_test,
            test_file: test_file ?? null,
            test_name: test_name ?? null,
          });
        },
        toText: jsonText,
        execute: async ({ test_file, test_name, sandbox_dir }, { signal }) => {
          await readSource(test_file, sandbox_dir, signal);
          const target = toSandboxPath(test_file, sandbox_dir) + (test_name ? `::${test_name}` : '');
          const run = (await helper(['pytest', target, '.'], {
            timeoutMs: TOOLSMITH_TIMEOUTS_MS.singleTest,
            signal,
            what: 'pytest',
          })) as unknown as PytestReport;
          const passed = run.tests.filter((t) => t.status === 'passed').length;
          const failed = run.tests.filter((t) => t.status === 'failed' || t.status === 'error').length;
          return { test_file, test_name: test_name ?? null, passed, failed, success: run.exit_code === 0 && failed === 0 && passed > 0, output: run.output };
        },
      }),
      'ANALYSIS',
      (args, result) => ({ test_file: args['test_file'], test_name: args['test_name'] ?? null, success: (result as { success?: boolean }).success }),
    ),
    logged(
      defineTool({
        name: 'get_failing_tests',
        description:
          'Run the pytest tests of a directory and return only the failures: {failed_count, failing_tests: [{name, status, message}], error_log}. Times out after 60 seconds.',
        input: z.strictObject({ directory: FilePathArg.describe('Directory containing tests'), sandbox_dir: SandboxDir }),
        output: 'json',
        onError: (error, args) => toolsmithError(error, (args as { directory?: string })?.directory, 'get_failing_tests', DEFAULTS.get_failing_tests),
        toText: jsonText,
        execute: async ({ directory, sandbox_dir }, { signal }) => {
          const run = await helper(['pytest', '.', '.'], {
            timeoutMs: TOOLSMITH_TIMEOUTS_MS.pytest,
            cwd: toSandboxPath(directory, sandbox_dir),
            signal,
            what: 'pytest',
          });
          return summariseFailures(run as unknown as PytestReport);
        },
      }),
      'ANALYSIS',
      (args, result) => ({ directory: args['directory'], failed_count: (result as { failed_count?: number }).failed_count }),
    ),
    logged(
      defineTool({
        name: 'validate_python_syntax',
        description:
          'Check Python code for syntax errors without running it (compiled by the sandbox\'s python3). Returns {"valid": true}, or an error with "SyntaxError: ..." and its line and offset.',
        input: z.strictObject({ code: z.string().describe('Python code to validate') }),
        output: 'json',
        onError: (error) => toolsmithError(error, undefined, 'validate_python_syntax', DEFAULTS.validate_python_syntax),
        toText: jsonText,
        execute: async ({ code }, { signal }) => {
          const answer = await helper(['syntax'], { stdin: code, timeoutMs: TOOLSMITH_TIMEOUTS_MS.helper, signal, what: 'syntax validation' });
          if (answer['valid'] === true) return { valid: true as const };
          return toolError(
            'INVALID_ARGUMENTS',
            `${String(answer['message'])} (line ${String(answer['line'])}, column ${String(answer['offset'])})`,
            'Fix the syntax error and validate again.',
            {
              exception: 'SyntaxError',
              line: answer['line'],
              offset: answer['offset'],
              text: answer['text'],
            },
          );
        },
      }),
      'ANALYSIS',
      (_args, result) => ({ valid: !isToolError(result) }),
    ),
    logged(
      defineTool({
        name: 'apply_fix',
        description:
          "Replace the content of an existing Python file with fixed code, after checking the fixed code's syntax (nothing is written if it does not compile). " +
          'Returns {file_path, original_size, new_size, size_change} in characters.',
        input: z.strictObject({
          file_path: FilePathArg.describe('Path to file to be fixed'),
          fixed_code: z.string().describe('Corrected code content'),
          sandbox_dir: SandboxDir,
        }),
        output: 'json',
        onError: (error, args) => toolsmithError(error, (args as { file_path?: string })?.file_path, 'apply_fix', DEFAULTS.apply_fix),
        toText: jsonText,
        execute: async ({ file_path, fixed_code, sandbox_dir }, { signal }) => {
          const original = await readSource(file_path, sandbox_dir, signal);
          const check = await helper(['syntax'], { stdin: fixed_code, timeoutMs: TOOLSMITH_TIMEOUTS_MS.helper, signal, what: 'syntax validation' });
          if (check['valid'] !== true) {
            return toolError(
              'INVALID_ARGUMENTS',
              `${String(check['message'])} (line ${String(check['line'])}, column ${String(check['offset'])}); the file was not changed.`,
              'Fix the syntax error in fixed_code and apply again.',
              {
                exception: 'SyntaxError',
                line: check['line'],
                offset: check['offset'],
              },
            );
          }
          await files.write(toSandboxPath(file_path, sandbox_dir), fixed_code, { signal });
          const original_size = codePoints(original);
          const new_size = codePoints(fixed_code);
          return { file_path, original_size, new_size, size_change: new_size - original_size };
        },
      }),
      'FIX',
      (args, result) => ({ file_path: args['file_path'], size_change: (result as { size_change?: number }).size_change }),
    ),
    logged(
      defineTool({
        name: 'add_docstring',
        description:
          'Count the functions and classes of a Python file that have no docstring. Returns {file_path, missing_docstrings}; the file is not changed.',
        input: z.strictObject({ file_path: FilePathArg.describe('Path to file to analyze'), sandbox_dir: SandboxDir }),
        output: 'json',
        onError: (error, args) => toolsmithError(error, (args as { file_path?: string })?.file_path, 'add_docstring', DEFAULTS.add_docstring),
        toText: jsonText,
        execute: async ({ file_path, sandbox_dir }, { signal }) => {
          const source = await readSource(file_path, sandbox_dir, signal);
          const answer = await helper(['docstrings'], { stdin: source, timeoutMs: TOOLSMITH_TIMEOUTS_MS.helper, signal, what: 'docstring analysis' });
          return { file_path, missing_docstrings: answer['missing_docstrings'] as number };
        },
      }),
      'ANALYSIS',
      (args, result) => ({ file_path: args['file_path'], missing_docstrings: (result as { missing_docstrings?: number }).missing_docstrings }),
    ),
    logged(
      defineTool({
        name: 'get_code_metrics',
        description:
          'Basic metrics of a Python file: {file_path, lines_of_code (total lines), functions (function and method definitions), classes, has_main (an if __name__ == "__main__" block)}.',
        input: z.strictObject({ file_path: FilePathArg.describe('Path to file to analyze'), sandbox_dir: SandboxDir }),
        output: 'json',
        onError: (error, args) => toolsmithError(error, (args as { file_path?: string })?.file_path, 'get_code_metrics', DEFAULTS.get_code_metrics),
        toText: jsonText,
        execute: async ({ file_path, sandbox_dir }, { signal }) => {
          const source = await readSource(file_path, sandbox_dir, signal);
          const answer = await helper(['metrics'], { stdin: source, timeoutMs: TOOLSMITH_TIMEOUTS_MS.helper, signal, what: 'code metrics' });
          return {
            file_path,
            lines_of_code: answer['lines_of_code'],
            functions: answer['functions'],
            classes: answer['classes'],
            has_main: answer['has_main'],
          };
        },
      }),
      'ANALYSIS',
      (args, result) => ({ file_path: args['file_path'], lines_of_code: (result as { lines_of_code?: number }).lines_of_code }),
    ),
  ];
}
