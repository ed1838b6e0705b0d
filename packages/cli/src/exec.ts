import { constants } from 'node:os';
import type { Command } from 'commander';
import type { ProcessInfo } from '@warren/protocol';
import type { CommandResult, Sandbox } from '@warren/sdk';
import { UsageError } from './output.js';
import { connectSandbox } from './sandbox-commands.js';

export interface ExecOptions {
  cwd?: string;
  env?: Record<string, string>;
  /** Seconds; the command's tree is killed after this long. */
  timeout?: number;
  /** Send this process's stdin to the command. */
  stdin?: boolean;
}

/** The longest a command may run (the protocol's limit): 24 hours. */
const MAX_TIMEOUT_MS = 24 * 60 * 60 * 1000;

/**
 * `warren exec ID -- CMD ...`: runs a command in the sandbox, writes its stdout and stderr here as
 * they arrive, and returns its exit code. One argument runs through `/bin/sh -c` (pipes, `&&`);
 * several run as an argv with no shell.
 */
export async function execCommand(id: string, argv: string[], options: ExecOptions, command: Command): Promise<number> {
  if (argv.length === 0) throw new UsageError('No command to run.', 'Name it after the id: warren exec ID -- ls -la.');
  const sandbox = await connectSandbox(command, id);
  try {
    const cmd = argv.length === 1 ? argv[0]! : argv;
    const runOptions: Parameters<typeof sandbox.commands.stream>[1] = {
      timeoutMs: options.timeout !== undefined ? Math.min(options.timeout * 1000, MAX_TIMEOUT_MS) : MAX_TIMEOUT_MS,
    };
    if (options.cwd !== undefined) runOptions.cwd = options.cwd;
    if (options.env && Object.keys(options.env).length) runOptions.env = options.env;
    if (options.stdin) return await execWithStdin(sandbox, cmd, runOptions);
    const abort = new AbortController();
    runOptions.signal = abort.signal;
    const onSignal = () => abort.abort();
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    try {
      let result: CommandResult | undefined;
      for await (const event of sandbox.commands.stream(cmd, runOptions)) {
        if (event.type === 'exit') result = event.result;
        else await write(event.type === 'stdout' ? process.stdout : process.stderr, event.data);
      }
      if (!result) return 1;
      if (result.timedOut)
        process.stderr.write(
          `warren: the command was killed after its ${Math.round(runOptions.timeoutMs! / 1000)} s timeout (pass --timeout SECONDS for longer)\n`,
        );
      return exitCodeOf(result);
    } finally {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    }
  } finally {
    sandbox.close();
  }
}

/**
 * `exec -i`: the command runs as a background process with its stdin open, this process's stdin
 * is sent to it piece by piece as it arrives (each write waits for the sandbox, so a fast producer
 * is slowed to the command's pace), and its output streams back meanwhile. EOF here closes the
 * command's stdin; Ctrl-C kills its tree.
 */
async function execWithStdin(sandbox: Sandbox, cmd: string | string[], options: Parameters<Sandbox['commands']['stream']>[1] & {}): Promise<number> {
  const proc = await sandbox.commands.start(cmd, {
    keepStdinOpen: true,
    processTimeoutMs: options.timeoutMs,
    ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
    ...(options.env === undefined ? {} : { env: options.env }),
  });
  const onSignal = () => void proc.kill().catch(() => undefined);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const pump = (async () => {
    try {
      for await (const chunk of process.stdin) await proc.write(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string));
      await proc.closeStdin();
    } catch {
      // The command ended (or closed its stdin) before reading everything: the rest is not wanted.
    }
  })();
  try {
    let info: ProcessInfo | undefined;
    for await (const event of proc.attach()) {
      if (event.type === 'exit') info = event.info;
      else await write(event.type === 'stdout' ? process.stdout : process.stderr, event.data);
    }
    info ??= await proc.wait();
    if (info.timedOut)
      process.stderr.write(`warren: the command was killed after its ${Math.round(options.timeoutMs! / 1000)} s timeout (pass --timeout SECONDS for longer)\n`);
    return exitCodeOf(info);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    // A terminal's stdin never ends by itself: stop reading it once the command is done.
    process.stdin.destroy();
    await pump;
  }
}

/**
 * The exit code a shell would report: the command's own, 128 + the signal number when a signal
 * ended it, 124 on a timeout (as `timeout(1)` does).
 *
 * @example
 * exitCodeOf({ exitCode: null, signal: 'SIGKILL', timedOut: false }); // 137
 */
export function exitCodeOf(result: Pick<CommandResult, 'exitCode' | 'signal' | 'timedOut'>): number {
  if (result.timedOut) return 124;
  if (result.exitCode !== null) return result.exitCode;
  const number = result.signal ? (constants.signals as Record<string, number>)[result.signal] : undefined;
  return number !== undefined ? 128 + number : 1;
}

function write(stream: NodeJS.WriteStream, data: Buffer): Promise<void> {
  return new Promise((resolve) => {
    if (stream.write(data)) resolve();
    else stream.once('drain', resolve);
  });
}
