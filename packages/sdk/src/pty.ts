import { PtyStartedEvent, type ParamsIn, type PtyExit, type Signal } from '@warren/protocol';
import type { Channel } from './channel.js';
import type { CallOptions } from './connection.js';
import { makeError } from './errors.js';
import { EventQueue } from './event-queue.js';

export type { PtyExit } from '@warren/protocol';

/** Options of {@link Pty.create}. */
export interface PtyCreateOptions {
  /** The terminal's size in character cells. */
  cols: number;
  rows: number;
  /** The program: a string through `/bin/sh -c`, an array as argv; the image's bash (else /bin/sh) when absent. */
  cmd?: string | string[];
  /** Working folder, resolved through the sandbox policy; the sandbox root when absent. */
  cwd?: string;
  /** Variables laid over a clean base environment (TERM is xterm-256color). */
  env?: Record<string, string>;
  /**
   * Called with each chunk of output instead of queueing it for iteration: use it when nothing
   * iterates the terminal (an unread queue pauses the connection once it holds 4 MiB).
   */
  onData?: (data: Buffer) => void;
  /** Aborting hangs up the terminal (as {@link Terminal.close} does). */
  signal?: AbortSignal;
}

/** How long a terminal may stay open: a day, like the longest command. */
const TERMINAL_MAX_MS = 24 * 60 * 60 * 1000;

/**
 * An interactive program on a pseudo-terminal in the sandbox. Iterate it for its output (raw
 * bytes, escape sequences included); send keystrokes with {@link write}. The program sees a real
 * terminal: line editing, colours, full-screen programs, job control, Ctrl-C as `\x03`.
 *
 * @example
 * const term = await sandbox.pty.create({ cols: 80, rows: 24 });
 * await term.write('echo $((6*7)); exit\r');
 * for await (const chunk of term) process.stdout.write(chunk);
 * console.log((await term.wait()).exitCode);
 */
export class Terminal implements AsyncIterable<Buffer> {
  constructor(
    private readonly connection: Channel,
    /** Names this terminal in `pty.write`, `pty.resize` and `pty.kill`. */
    readonly handle: string,
    /** The program's pid in the sandbox. */
    readonly pid: number,
    private readonly output: EventQueue<Buffer>,
    private readonly exit: Promise<PtyExit>,
    private readonly hangUp: () => void,
  ) {}

  /** Sends raw input: keystrokes as text (`'ls\r'`, `'\x03'` for Ctrl-C) or bytes. */
  async write(data: string | Uint8Array, options: CallOptions = {}): Promise<number> {
    const answer =
      typeof data === 'string'
        ? await this.connection.call('pty.write', { handle: this.handle, data }, options)
        : await this.connection.call('pty.write', { handle: this.handle }, { ...options, payload: data });
    return answer.result.bytesWritten;
  }

  /** Changes the terminal's size; the program gets SIGWINCH. */
  async resize(cols: number, rows: number, options: CallOptions = {}): Promise<void> {
    await this.connection.call('pty.resize', { handle: this.handle, cols, rows }, options);
  }

  /** Signals the program (SIGHUP by default); SIGKILL ends everything started in the terminal. */
  async kill(signal: Signal = 'SIGHUP', options: CallOptions = {}): Promise<void> {
    await this.connection.call('pty.kill', { handle: this.handle, signal }, options);
  }

  /** Resolves with the exit status once the program has ended and its output is all delivered. */
  wait(): Promise<PtyExit> {
    return this.exit;
  }

  /** Hangs up: the program and everything started in the terminal are killed. */
  close(): void {
    this.hangUp();
  }

  [Symbol.asyncIterator](): AsyncIterator<Buffer> {
    return this.output;
  }
}

/** `sandbox.pty`: interactive programs on pseudo-terminals. */
export class Pty {
  constructor(private readonly connection: () => Channel) {}

  /**
   * Opens a terminal and starts its program. Resolves once the program runs; fails with
   * `PtyUnavailableError` in a sandbox that cannot open terminals.
   *
   * @example
   * const term = await sandbox.pty.create({ cols: 120, rows: 40, cmd: ['python3'] });
   */
  async create(options: PtyCreateOptions): Promise<Terminal> {
    const connection = this.connection();
    const params: ParamsIn<'pty.open'> = { cols: options.cols, rows: options.rows };
    if (options.cmd !== undefined) params.cmd = options.cmd;
    if (options.cwd !== undefined) params.cwd = options.cwd;
    if (options.env !== undefined) params.env = options.env;
    const abort = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, abort.signal]) : abort.signal;
    const queue = new EventQueue<Buffer>(connection, () => undefined);
    let started: (value: PtyStartedEvent) => void = () => undefined;
    const startedPromise = new Promise<PtyStartedEvent>((resolve) => (started = resolve));
    const exit = connection.call('pty.open', params, {
      signal,
      timeoutMs: TERMINAL_MAX_MS,
      onEvent: (event, bytes) => {
        if (event.event === 'started') started(event.data);
        else if (event.event === 'output' && bytes) {
          if (options.onData) options.onData(bytes);
          else queue.push(bytes, bytes.length);
        }
      },
    });
    exit.then(
      () => queue.end(),
      (err: unknown) => queue.fail(err),
    );
    const info = await Promise.race([
      startedPromise,
      exit.then(() => Promise.reject(makeError('INTERNAL', 'The terminal ended before it reported its start.'))),
    ]);
    const result = exit.then((answer) => answer.result);
    result.catch(() => undefined); // reported through wait() and the iterator; never unhandled
    return new Terminal(connection, info.handle, info.pid, queue, result, () => abort.abort());
  }
}
