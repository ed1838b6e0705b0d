import { StringDecoder } from 'node:string_decoder';
import type { CodeContextInfo, CodeDisplay, CodeError, CodeLanguage, ParamsIn, ParsedEvent, Result } from '@warren/protocol';
import type { Channel } from './channel.js';
import { DEFAULT_CALL_TIMEOUT_MS, type CallOptions } from './connection.js';
import { withOutput } from './event-queue.js';

export type { CodeContextInfo, CodeDisplay, CodeError, CodeLanguage } from '@warren/protocol';

/**
 * The outcome of one cell: stdout and stderr (capped head and tail), the rich `results` (the last
 * expression's value has `isMainResult`), the `error` the code raised with its traceback, and the
 * execution count. An error in the code is information, not an exception.
 */
export type CodeRunResult = Result<'code.run'>;

export interface CodeRunOptions extends CallOptions {
  /** Which default context runs the cell when `context` is absent (`python` by default). */
  language?: CodeLanguage;
  /** A context from {@link Code.createContext} (or its id); absent, the language's default context. */
  context?: string | CodeContextInfo;
  /**
   * The cell is interrupted after this long (the kernel and its variables stay); 60 s by default.
   * The call itself waits longer, for the kernel to start and the interrupt to land.
   */
  timeoutMs?: number;
  /** Bytes of each stream kept in the result (head and tail); 1 MiB by default. */
  outputCapBytes?: number;
  /** Environment variables for this cell only (Python's `os.environ`, Node's `process.env`); the previous values come back after it. */
  env?: Record<string, string>;
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  /** Each rich output as it is produced: a chart, a table, the last expression's value. */
  onResult?: (result: CodeDisplay) => void;
  onError?: (error: CodeError) => void;
}

export interface CodeContextOptions extends CallOptions {
  language?: CodeLanguage;
  /** The working folder of the kernel, resolved through the sandbox's policy. */
  cwd?: string;
  /** Variables laid over the sandbox's environment for this kernel. */
  env?: Record<string, string>;
}

// A first run starts the kernel (seconds), and a cell that ignores its interrupt gets a grace
// period before its kernel is killed: the call waits this much past the cell's own timeout.
const ANSWER_GRACE_MS = 100_000;

/**
 * `sandbox.code`: a code interpreter. Cells run in a context's kernel (a Jupyter kernel for
 * Python, a Node process for JavaScript and TypeScript), which keeps variables and imports from
 * one run to the next; contexts never share state. See docs/code.md.
 */
export class Code {
  constructor(private readonly connection: () => Channel) {}

  /**
   * Runs one cell and answers with its output, rich results and error.
   *
   * @example
   * await sandbox.code.run('import pandas as pd\ndf = pd.DataFrame({"x": [1, 2, 3]})');
   * const { results } = await sandbox.code.run('df.x.sum()');
   * console.log(results[0]?.data['text/plain']); // '6'
   * const chart = await sandbox.code.run('import matplotlib.pyplot as plt\nplt.plot(df.x)');
   * const png = chart.results.find((r) => r.data['image/png'])?.data['image/png']; // base64
   */
  async run(code: string, options: CodeRunOptions = {}): Promise<CodeRunResult> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    const params: ParamsIn<'code.run'> = { code, timeoutMs };
    if (options.language !== undefined) params.language = options.language;
    if (options.context !== undefined) params.context = typeof options.context === 'string' ? options.context : options.context.id;
    if (options.outputCapBytes !== undefined) params.outputCapBytes = options.outputCapBytes;
    if (options.env !== undefined) params.env = options.env;
    const streaming = options.onStdout !== undefined || options.onStderr !== undefined || options.onResult !== undefined || options.onError !== undefined;
    if (streaming) params.stream = true;
    const decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
    const onEvent = (event: ParsedEvent, bytes: Buffer | undefined) => {
      if (event.method !== 'code.run') return;
      if ((event.event === 'stdout' || event.event === 'stderr') && bytes) {
        const text = decoders[event.event].write(bytes);
        if (text) (event.event === 'stdout' ? options.onStdout : options.onStderr)?.(text);
      } else if (event.event === 'result') options.onResult?.(event.data);
      else if (event.event === 'error') options.onError?.(event.data);
    };
    const answer = await this.connection().call('code.run', params, {
      signal: options.signal,
      timeoutMs: timeoutMs + ANSWER_GRACE_MS,
      onEvent: streaming ? onEvent : undefined,
    });
    for (const name of ['stdout', 'stderr'] as const) {
      const rest = decoders[name].end();
      if (rest && streaming) (name === 'stdout' ? options.onStdout : options.onStderr)?.(rest);
    }
    return withOutput(answer.result, answer.payload);
  }

  /**
   * Makes a context with its own kernel and state, and answers once the kernel is ready.
   *
   * @example
   * const js = await sandbox.code.createContext({ language: 'javascript', cwd: 'web' });
   * await sandbox.code.run('const n = 2', { context: js });
   */
  async createContext(options: CodeContextOptions = {}): Promise<CodeContextInfo> {
    const params: ParamsIn<'code.createContext'> = {};
    if (options.language !== undefined) params.language = options.language;
    if (options.cwd !== undefined) params.cwd = options.cwd;
    if (options.env !== undefined) params.env = options.env;
    return (await this.connection().call('code.createContext', params, { signal: options.signal, timeoutMs: options.timeoutMs ?? ANSWER_GRACE_MS })).result;
  }

  /** The sandbox's contexts, the default ones among them once used. */
  async listContexts(options: CallOptions = {}): Promise<CodeContextInfo[]> {
    return (await this.connection().call('code.listContexts', {}, options)).result.contexts;
  }

  /**
   * Stops a context's kernel and starts a fresh one: every variable is gone. The way back after
   * `KernelDiedError`.
   *
   * @example
   * await sandbox.code.restartContext('default-python');
   */
  async restartContext(context: string | CodeContextInfo, options: CallOptions = {}): Promise<CodeContextInfo> {
    const id = typeof context === 'string' ? context : context.id;
    return (await this.connection().call('code.restartContext', { context: id }, { signal: options.signal, timeoutMs: options.timeoutMs ?? ANSWER_GRACE_MS }))
      .result;
  }

  /** Stops a context's kernel and forgets the context; false when there was none. */
  async removeContext(context: string | CodeContextInfo, options: CallOptions = {}): Promise<boolean> {
    const id = typeof context === 'string' ? context : context.id;
    return (await this.connection().call('code.removeContext', { context: id }, options)).result.removed;
  }
}

/** The raster image types a display output may carry, with the bytes each format starts with. */
const IMAGE_SIGNATURES: Readonly<Record<string, Buffer>> = {
  'image/png': Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
  'image/jpeg': Buffer.from([0xff, 0xd8, 0xff]),
};
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** A PNG or JPEG a display output holds, checked: its base64 text (whitespace removed) and its bytes. */
export interface DisplayImage {
  mimeType: 'image/png' | 'image/jpeg';
  base64: string;
  bytes: Buffer;
}

/**
 * The first PNG or JPEG of a display output, only when it is what it says: valid base64 (Jupyter's
 * line breaks are removed) whose bytes start with the format's signature. A value the cell made
 * up (text that is not base64, or base64 of something else) gives `undefined`, so it is never
 * passed on to a model API or written as an image file.
 *
 * @example
 * const image = displayImage(result.results[0]!);
 * if (image) await writeFile('chart.png', image.bytes);
 */
export function displayImage(display: CodeDisplay): DisplayImage | undefined {
  for (const mimeType of ['image/png', 'image/jpeg'] as const) {
    const value = display.data[mimeType];
    if (typeof value !== 'string') continue;
    const base64 = value.replace(/\s+/g, '');
    if (base64.length % 4 !== 0 || !BASE64.test(base64)) continue;
    const bytes = Buffer.from(base64, 'base64');
    const signature = IMAGE_SIGNATURES[mimeType]!;
    if (bytes.length > signature.length && bytes.subarray(0, signature.length).equals(signature)) return { mimeType, base64, bytes };
  }
  return undefined;
}
