import type { Result } from '@warren/protocol';
import { DEFAULT_CALL_TIMEOUT_MS, type CallOptions, type Connection } from './connection.js';

/** The outcome of a finished command. A non-zero `exitCode` is information, not an exception. */
export type CommandResult = Result<'process.exec'>;

export interface RunOptions extends CallOptions {
  /** Working folder, resolved through the sandbox policy; the sandbox root when absent. */
  cwd?: string;
  /** Variables laid over a clean base environment. */
  env?: Record<string, string>;
  /** Text for the command's stdin; without it the command sees EOF at once. */
  stdin?: string;
}

// The command's own timeout is enforced in the sandbox; the call waits this much longer for the
// answer that reports it, so a timed-out command still returns its output.
const ANSWER_GRACE_MS = 5_000;

/** `sandbox.commands`: run processes in the sandbox. */
export class Commands {
  constructor(private readonly connection: () => Connection) {}

  /**
   * Runs a command to completion: a string through `/bin/sh -c`, an array as argv with no shell.
   * `timeoutMs` kills the command's whole process group; the output so far is still returned.
   *
   * @example
   * const { exitCode, stdout } = await sandbox.commands.run('python3 a.py', { timeoutMs: 10_000 });
   */
  async run(cmd: string | string[], options: RunOptions = {}): Promise<CommandResult> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    const params = { cmd, timeoutMs, ...pick(options, ['cwd', 'env', 'stdin']) };
    return (await this.connection().call('process.exec', params, { signal: options.signal, timeoutMs: timeoutMs + ANSWER_GRACE_MS })).result;
  }
}

function pick<T extends object, K extends keyof T>(value: T, keys: K[]): Partial<Pick<T, K>> {
  const out: Partial<Pick<T, K>> = {};
  for (const key of keys) if (value[key] !== undefined) out[key] = value[key];
  return out;
}
