import type { Command } from 'commander';
import type { PtyCreateOptions } from '@warren/sdk';
import { exitCodeOf } from './exec.js';
import { connectSandbox } from './sandbox-commands.js';

export interface ShellOptions {
  cwd?: string;
  env?: Record<string, string>;
}

/**
 * `warren shell ID [-- CMD ...]`: a real terminal inside the sandbox. This terminal goes raw (every
 * key, Ctrl-C included, goes to the sandbox), its size follows this window, and warren exits
 * with the program's exit status when it ends.
 */
export async function shellCommand(id: string, argv: string[], options: ShellOptions, command: Command): Promise<number> {
  const sandbox = await connectSandbox(command, id);
  const stdin = process.stdin;
  const stdout = process.stdout;
  const create: PtyCreateOptions = {
    cols: stdout.columns || 80,
    rows: stdout.rows || 24,
    onData: (data) => void stdout.write(data),
  };
  if (argv.length) create.cmd = argv.length === 1 ? argv[0]! : argv;
  if (options.cwd !== undefined) create.cwd = options.cwd;
  if (options.env && Object.keys(options.env).length) create.env = options.env;
  const term = await sandbox.pty.create(create).catch((err: unknown) => {
    sandbox.close();
    throw err;
  });

  // Keystrokes and resizes go out one call at a time, in the order they happened: keys typed
  // after a resize reach a program that already has the new size.
  let sending: Promise<unknown> = Promise.resolve();
  const send = (call: () => Promise<unknown>) => {
    sending = sending.then(call).catch(() => undefined);
  };
  const onInput = (chunk: Buffer) => send(() => term.write(chunk));
  const onResize = () => send(() => term.resize(stdout.columns || 80, stdout.rows || 24));
  const wasRaw = stdin.isTTY ? stdin.isRaw : false;
  if (stdin.isTTY) stdin.setRawMode(true);
  stdin.on('data', onInput);
  stdin.resume();
  stdout.on('resize', onResize);
  const hangUp = () => term.close();
  process.once('SIGHUP', hangUp);
  process.once('SIGTERM', hangUp);
  try {
    const exit = await term.wait();
    return exitCodeOf({ ...exit, timedOut: false });
  } finally {
    stdin.off('data', onInput);
    stdout.off('resize', onResize);
    process.off('SIGHUP', hangUp);
    process.off('SIGTERM', hangUp);
    if (stdin.isTTY) stdin.setRawMode(wasRaw);
    stdin.pause();
    sandbox.close();
  }
}
