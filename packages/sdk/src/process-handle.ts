import type { ProcessInfo, Signal } from '@warren/protocol';
import type { Channel } from './channel.js';
import type { CallOptions } from './connection.js';
import { WarrenError } from './errors.js';
import { EventQueue, toOutputEvent, type OutputEvent } from './event-queue.js';

/** One event of {@link ProcessHandle.attach}: output, then the process's final state. */
export type AttachEvent = OutputEvent | { type: 'exit'; info: ProcessInfo };

export interface AttachOptions extends CallOptions {
  /** Replay from these offsets; by default from where this handle's last attach stopped. */
  stdoutOffset?: number;
  stderrOffset?: number;
  /** Keep streaming until the process exits (default); false replays what is buffered and ends. */
  follow?: boolean;
}

const LONG_WAIT_MS = 24 * 60 * 60 * 1000;
/** Re-attaches in a row that bring no output before a following attach gives up. */
const MAX_REATTACH_ATTEMPTS = 5;

/**
 * A background process in the sandbox. The handle is a plain string, so a client that lost its
 * connection gets it back with `sandbox.commands.connect(handle)` and attaches from the offsets
 * it last saw: nothing still in the sandbox's buffer is missed.
 *
 * @example
 * const proc = await sandbox.commands.start('npm run dev');
 * for await (const event of proc.attach()) if (event.type === 'stdout') process.stdout.write(event.data);
 */
export class ProcessHandle {
  /** The offsets one past the last byte this handle has yielded, per stream. */
  readonly offsets = { stdout: 0, stderr: 0 };

  constructor(
    private readonly connection: () => Channel,
    /** The last known state. */
    public info: ProcessInfo,
  ) {}

  get handle(): string {
    return this.info.handle;
  }

  get pid(): number {
    return this.info.pid;
  }

  /** Waits for the exit (or `timeoutMs`, after which `running` is still true). */
  async wait(options: CallOptions = {}): Promise<ProcessInfo> {
    const params = options.timeoutMs === undefined ? { handle: this.handle } : { handle: this.handle, timeoutMs: options.timeoutMs };
    const callTimeout = options.timeoutMs === undefined ? LONG_WAIT_MS : options.timeoutMs + 5_000;
    this.info = (await this.connection().call('process.wait', params, { signal: options.signal, timeoutMs: callTimeout })).result;
    return this.info;
  }

  /** Signals every process of the tree; SIGKILL (the default) returns once all are gone. */
  async kill(signal: Signal = 'SIGKILL', options: CallOptions = {}): Promise<ProcessInfo> {
    this.info = (await this.connection().call('process.kill', { handle: this.handle, signal }, options)).result;
    return this.info;
  }

  /** Writes to the process's stdin (started with `keepStdinOpen: true`). */
  async write(data: string | Uint8Array, options: CallOptions = {}): Promise<number> {
    const answer =
      typeof data === 'string'
        ? await this.connection().call('process.write', { handle: this.handle, data }, options)
        : await this.connection().call('process.write', { handle: this.handle }, { ...options, payload: data });
    return answer.result.bytesWritten;
  }

  /** Closes the process's stdin: it reads EOF. */
  async closeStdin(options: CallOptions = {}): Promise<ProcessInfo> {
    this.info = (await this.connection().call('process.closeStdin', { handle: this.handle }, options)).result;
    return this.info;
  }

  /**
   * Replays the output still buffered from the given offsets, then (with `follow`) streams it
   * live until the process exits. An event whose offset is past the one asked for means the
   * bytes between were dropped from the sandbox's buffer.
   */
  attach(options: AttachOptions = {}): AsyncIterableIterator<AttachEvent> {
    const connection = this.connection();
    const abort = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, abort.signal]) : abort.signal;
    const queue = new EventQueue<AttachEvent>(connection, () => abort.abort());
    const params = {
      handle: this.handle,
      stdoutOffset: options.stdoutOffset ?? this.offsets.stdout,
      stderrOffset: options.stderrOffset ?? this.offsets.stderr,
      follow: options.follow ?? true,
    };
    // What has arrived (queued or consumed): after a dropped connection the attach resumes from
    // here on the new one, so nothing is shown twice and nothing still buffered is missed.
    const received = { stdout: params.stdoutOffset, stderr: params.stderrOffset };
    let attemptsWithoutProgress = 0;
    const start = (): void => {
      connection
        .call(
          'process.attach',
          { ...params, stdoutOffset: received.stdout, stderrOffset: received.stderr },
          {
            signal,
            timeoutMs: options.timeoutMs ?? LONG_WAIT_MS,
            onEvent: (event, bytes) => {
              const output = toOutputEvent(event, bytes);
              if (!output) return;
              attemptsWithoutProgress = 0;
              received[output.type] = output.offset + output.data.length;
              queue.push(output, output.data.length);
            },
          },
        )
        .then(
          (answer) => {
            this.info = answer.result;
            queue.push({ type: 'exit', info: answer.result });
            queue.end();
          },
          (err: unknown) => {
            const dropped = err instanceof WarrenError && err.code === 'CONNECTION_CLOSED' && !signal.aborted;
            if (dropped && params.follow && ++attemptsWithoutProgress <= MAX_REATTACH_ATTEMPTS) start();
            else queue.fail(err);
          },
        );
    };
    start();
    // Offsets advance as the consumer takes events, not as frames arrive: a reattach resumes
    // after the last byte the caller actually saw.
    const next = queue.next.bind(queue);
    queue.next = async () => {
      const result = await next();
      if (!result.done && result.value.type !== 'exit') this.offsets[result.value.type] = result.value.offset + result.value.data.length;
      return result;
    };
    return queue;
  }

  /** The buffered output as text (no live streaming): a quick look at what the process printed. */
  async output(options: CallOptions = {}): Promise<{ stdout: string; stderr: string; info: ProcessInfo }> {
    const chunks = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
    let info = this.info;
    for await (const event of this.attach({ ...options, follow: false, stdoutOffset: 0, stderrOffset: 0 })) {
      if (event.type === 'exit') info = event.info;
      else chunks[event.type].push(event.data);
    }
    return { stdout: Buffer.concat(chunks.stdout).toString('utf8'), stderr: Buffer.concat(chunks.stderr).toString('utf8'), info };
  }
}
