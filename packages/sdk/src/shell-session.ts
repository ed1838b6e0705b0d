import type { Result } from '@warren/protocol';
import type { Channel } from './channel.js';
import type { CallOptions } from './connection.js';
import { withOutput } from './event-queue.js';

/** The outcome of one shell-session command. */
export type ShellRunResult = Result<'shell.run'>;

export interface ShellOpenOptions extends CallOptions {
  cwd?: string;
  env?: Record<string, string>;
}

export interface ShellRunOptions extends CallOptions {
  /** Bytes kept per stream (head and tail). */
  outputCapBytes?: number;
}

const DEFAULT_SHELL_TIMEOUT_MS = 60_000;
// Interrupting a command takes up to a few seconds (SIGINT, then SIGKILL, then a fresh marker).
const ANSWER_GRACE_MS = 10_000;

/**
 * A named bash session in the sandbox: state (`cd`, `export`, functions) carries over between
 * commands, each command reports its own exit code and output, and a timeout interrupts the
 * command while keeping the session.
 *
 * @example
 * const shell = await sandbox.commands.shell('main');
 * await shell.run('cd /workspace/app');
 * const { exitCode, stdout } = await shell.run('ls', { timeoutMs: 5_000 });
 */
export class ShellSession {
  private constructor(
    private readonly connection: () => Channel,
    readonly name: string,
    readonly pid: number,
  ) {}

  static async open(connection: () => Channel, name: string, options: ShellOpenOptions = {}): Promise<ShellSession> {
    const params: { session: string; cwd?: string; env?: Record<string, string> } = { session: name };
    if (options.cwd !== undefined) params.cwd = options.cwd;
    if (options.env !== undefined) params.env = options.env;
    const { result } = await connection().call('shell.open', params, options);
    return new ShellSession(connection, name, result.pid);
  }

  /** Runs bash source in the session; `timeoutMs` (60 s by default) interrupts it. */
  async run(cmd: string, options: ShellRunOptions = {}): Promise<ShellRunResult> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_SHELL_TIMEOUT_MS;
    const params: { session: string; cmd: string; timeoutMs: number; outputCapBytes?: number } = { session: this.name, cmd, timeoutMs };
    if (options.outputCapBytes !== undefined) params.outputCapBytes = options.outputCapBytes;
    const answer = await this.connection().call('shell.run', params, { signal: options.signal, timeoutMs: timeoutMs + ANSWER_GRACE_MS });
    return withOutput(answer.result, answer.payload);
  }

  /** Ends the session and everything it started. */
  async close(options: CallOptions = {}): Promise<boolean> {
    return (await this.connection().call('shell.close', { session: this.name }, options)).result.closed;
  }
}
