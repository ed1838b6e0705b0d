import type { IncomingMessage, ServerResponse } from 'node:http';
import { StringDecoder } from 'node:string_decoder';
import { CodedError, CodeRunParams, type CodeContextInfo, type CodeDisplay, type CodeLanguage } from '@warren/protocol';
import { z } from 'zod';
import type { HttpServerDeps } from '../../server-context.js';
import type { DaemonSessionPool } from '../../daemon-pool.js';
import { envdScope, resolvePath, withSession, type EnvdScope, type HeaderReader } from '../envd/scope.js';
import { E2bHttpError, toE2bHttpError } from '../errors.js';
import { parse, readJson } from '../http-util.js';
import { BashContexts, isBashContext, type ContextObject } from './bash.js';

/** The port `@e2b/code-interpreter` reaches its template's server on (`JUPYTER_PORT` in the SDK). */
export const CODE_INTERPRETER_PORT = 49999;
/** The largest `/execute` body: Warren's cell limit (4 MiB of code) plus room for the JSON around it. */
const MAX_EXECUTE_BODY_BYTES = 5 * 1024 * 1024;
/** The MIME type Warren's Python kernel gives a matplotlib figure's chart data (python-charts.py). */
export const CHART_MIME = 'application/vnd.warren.chart+json';
/** The MIME type Warren's Python kernel gives a pandas DataFrame's columns (python-charts.py). */
export const DATA_MIME = 'application/vnd.warren.data+json';

/** Display MIME types to the field names of E2B's `Result` (the SDK reads these keys of a `result` line). */
const RESULT_FIELDS: Readonly<Record<string, string>> = {
  'text/plain': 'text',
  'text/html': 'html',
  'text/markdown': 'markdown',
  'image/svg+xml': 'svg',
  'image/png': 'png',
  'image/jpeg': 'jpeg',
  'application/pdf': 'pdf',
  'text/latex': 'latex',
  'application/json': 'json',
  'application/javascript': 'javascript',
  [DATA_MIME]: 'data',
  [CHART_MIME]: 'chart',
};

/** The languages the door runs: Warren's code contexts, and bash as one shell per run. */
type DoorLanguage = CodeLanguage | 'bash';

const Language = z.string().max(64).optional().nullable();
const ExecuteBody = z.object({
  code: z.string(),
  context_id: z.string().max(64).optional().nullable(),
  language: Language,
  env_vars: z.record(z.string(), z.string()).optional().nullable(),
});
const CreateContextBody = z.object({ language: Language, cwd: z.string().max(4096).optional().nullable() });

/**
 * The language a request names, as the door serves it: E2B's names (`js` is JavaScript, `ts`
 * TypeScript, `sh` bash; python when none). Any other language is refused with 400 naming these.
 */
export function doorLanguage(given: string | null | undefined): DoorLanguage {
  const name = (given ?? '').trim().toLowerCase() || 'python';
  const known: Record<string, DoorLanguage> = {
    python: 'python',
    js: 'javascript',
    javascript: 'javascript',
    ts: 'typescript',
    typescript: 'typescript',
    bash: 'bash',
    sh: 'bash',
  };
  const language = Object.hasOwn(known, name) ? known[name] : undefined;
  if (language === undefined)
    throw new E2bHttpError(400, `Language '${given ?? ''}' is not served by Warren's code interpreter; use python, javascript (js), typescript (ts) or bash.`);
  return language;
}

/**
 * A display output of Warren's kernel as the `result` line of E2B's `/execute` stream: known MIME
 * types under E2B's field names (a quoted `text/plain` string loses its quotes, as E2B's server
 * does), any other MIME type under `extra`.
 *
 * @example
 * resultLine({ isMainResult: true, data: { 'text/plain': '2' }, truncated: false }); // { type: 'result', text: '2', is_main_result: true }
 */
export function resultLine(display: CodeDisplay): Record<string, unknown> {
  const line: Record<string, unknown> = { type: 'result' };
  const extra: Record<string, unknown> = {};
  for (const [mime, value] of Object.entries(display.data)) {
    const field = Object.hasOwn(RESULT_FIELDS, mime) ? RESULT_FIELDS[mime] : undefined;
    if (field === undefined) extra[mime] = value;
    else if (field === 'text' && typeof value === 'string' && value.length >= 2 && value.startsWith("'") && value.endsWith("'"))
      line[field] = value.slice(1, -1);
    else line[field] = value;
  }
  if (Object.keys(extra).length > 0) line['extra'] = extra;
  line['is_main_result'] = display.isMainResult;
  return line;
}

/** Warren's context as E2B's `Context` (`id`, `language`, `cwd`). */
function contextObject(info: CodeContextInfo): ContextObject {
  return { id: info.id, language: info.language, cwd: info.cwd };
}

/**
 * The door `@e2b/code-interpreter` calls on port {@link CODE_INTERPRETER_PORT} of its sandbox
 * (docs/e2b.md, "Code interpreter"): E2B's template server API (`POST /execute` streaming
 * newline-delimited JSON, `/contexts` create, list, restart and remove) served by Warren's own code
 * interpreter in the sandbox's daemon (`code.*`), through a daemon session with the caller's grant.
 * It authenticates as envd's doors do: the sandbox's access token (`X-Access-Token`, or the
 * `E2B-Traffic-Access-Token` the SDK sends on `/contexts`), a derived token, or an API key whose
 * tenant reaches the sandbox.
 *
 * Bash contexts are Warren's shell sessions (`bash`, interpreter/bash.ts).
 *
 * @example
 * if (req.headers['e2b-sandbox-port'] === '49999') await serveCodeInterpreter(deps, pool, bash, req, res, path);
 */
export async function serveCodeInterpreter(
  deps: HttpServerDeps,
  pool: DaemonSessionPool,
  bash: BashContexts,
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
): Promise<void> {
  const method = req.method ?? 'GET';
  const scope = interpreterScope(deps, req);
  if (path === '/health' && method === 'GET') return void res.writeHead(200, { 'content-type': 'application/json' }).end('"OK"');
  if (path === '/execute' && method === 'POST') return execute(pool, bash, scope, req, res);
  if (path === '/contexts' && method === 'POST') {
    const body = parse(CreateContextBody, await readJson(req), 'context request');
    const language = doorLanguage(body.language);
    const cwd = resolvePath(scope, body.cwd ?? scope.home);
    const context = await withSession(pool, scope, async (session) =>
      language === 'bash' ? bash.create(session, scope.sandboxId, cwd) : contextObject((await session.call('code.createContext', { language, cwd })).result),
    );
    return void sendJson(res, 200, context);
  }
  if (path === '/contexts' && method === 'GET') {
    const contexts = await withSession(pool, scope, async (session) => [
      ...(await session.call('code.listContexts', {})).result.contexts.map(contextObject),
      ...(await bash.list(session, scope.sandboxId, scope.home)),
    ]);
    return void sendJson(res, 200, contexts);
  }
  const restart = /^\/contexts\/([A-Za-z0-9_-]{1,64})\/restart$/.exec(path);
  if (restart && method === 'POST') {
    const id = restart[1] as string;
    await withSession(pool, scope, async (session) => {
      if (isBashContext(id)) await bash.restart(session, scope.sandboxId, id, scope.home);
      else await session.call('code.restartContext', { context: id });
    });
    return void sendJson(res, 200, null);
  }
  const remove = /^\/contexts\/([A-Za-z0-9_-]{1,64})$/.exec(path);
  if (remove && method === 'DELETE') {
    const id = remove[1] as string;
    const removed = await withSession(pool, scope, async (session) =>
      isBashContext(id) ? bash.remove(session, scope.sandboxId, id) : (await session.call('code.removeContext', { context: id })).result.removed,
    );
    if (!removed) throw new E2bHttpError(404, `Context ${id} not found.`);
    return void sendJson(res, 200, null);
  }
  throw new E2bHttpError(
    404,
    `No code interpreter route ${method} ${path}; Warren serves POST /execute, GET and POST /contexts, POST /contexts/<id>/restart and DELETE /contexts/<id> (docs/e2b.md).`,
  );
}

/**
 * Who calls, on which sandbox: envd's authentication with the credential in `X-Access-Token` or
 * `E2B-Traffic-Access-Token`. A sandbox that is gone answers 502, which the SDK reads as "the
 * sandbox is not running" (its TimeoutError), as E2B's proxy does; to a caller the sandbox is not
 * visible to, the same as one that does not exist.
 */
function interpreterScope(deps: HttpServerDeps, req: IncomingMessage): EnvdScope {
  const header: HeaderReader = (name) => {
    const value = req.headers[name];
    return Array.isArray(value) ? value[0] : value;
  };
  const credential: HeaderReader = (name) => (name === 'x-access-token' ? (header('x-access-token') ?? header('e2b-traffic-access-token')) : header(name));
  try {
    return envdScope(deps, credential);
  } catch (err) {
    if (err instanceof CodedError && (err.code === 'SANDBOX_NOT_FOUND' || err.code === 'NOT_FOUND'))
      throw new E2bHttpError(502, `Sandbox '${header('e2b-sandbox-id') ?? ''}' is not running (it was killed or timed out).`);
    throw err;
  }
}

/** `POST /execute`: one cell, its output streamed as E2B's lines while it runs. */
async function execute(pool: DaemonSessionPool, bash: BashContexts, scope: EnvdScope, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const body = parse(ExecuteBody, await readJson(req, MAX_EXECUTE_BODY_BYTES), 'execution request');
  if (body.context_id && body.language) throw new E2bHttpError(400, 'Only one of context_id or language can be provided.');
  const language = body.context_id ? undefined : doorLanguage(body.language);
  const env = body.env_vars ?? undefined;
  // Checked before the answer starts, so a bad cell or variable is a 400 rather than an error line.
  const checked = CodeRunParams.safeParse({ code: body.code, ...(env && { env }) });
  if (!checked.success)
    throw new E2bHttpError(400, `Invalid execution request: ${checked.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; ')}.`);
  // The client going away (the SDK's timeoutMs) cancels the run: Warren interrupts the cell, and the context keeps its state.
  const abort = new AbortController();
  res.once('close', () => abort.abort());
  const lines = new LineStream(res);
  await withSession(pool, scope, async (session) => {
    // The SDK starts its timeoutMs once the answer's headers arrive, so they go out before the run;
    // a context that does not exist is the one failure it must still see as an HTTP error (404).
    const inBash = language === 'bash' || (body.context_id !== undefined && body.context_id !== null && isBashContext(body.context_id));
    if (body.context_id) {
      const found = inBash
        ? await bash.exists(session, body.context_id)
        : (await session.call('code.listContexts', {})).result.contexts.some((c) => c.id === body.context_id);
      if (!found) throw new E2bHttpError(404, `Context ${body.context_id} not found.`);
    }
    lines.start();
    const output = new OutputRelay(lines);
    if (inBash) {
      // A bash shell session answers when the command ends: its output comes in one piece.
      const run = await bash.run(session, body.context_id ?? undefined, scope.home, body.code, env, abort.signal);
      const result = run.result;
      output.chunk('stdout', { offset: 0 }, run.stdout);
      output.chunk('stderr', { offset: 0 }, run.stderr);
      output.finish(run.stdout.length, run.stderr.length);
      if (result.sessionRestarted)
        lines.write({
          type: 'stderr',
          text: '[the command could not be interrupted, so the bash context was started afresh: its state is gone]\n',
          timestamp: now(),
        });
      if (result.exitCode !== 0)
        lines.write({
          type: 'error',
          name: 'CalledProcessError',
          value: result.signal === null ? `the command exited with code ${result.exitCode ?? 'unknown'}` : `the command was stopped by ${result.signal}`,
          traceback: '',
        });
    } else {
      const { result } = await session.call(
        'code.run',
        {
          code: body.code,
          ...(body.context_id ? { context: body.context_id } : { language: language ?? 'python' }),
          ...(env && Object.keys(env).length > 0 && { env }),
          stream: true,
        },
        {
          signal: abort.signal,
          onEvent: (event, data, payload) => {
            if ((event === 'stdout' || event === 'stderr') && payload) output.chunk(event, data, payload);
            else if (event === 'result') lines.write(resultLine(data as CodeDisplay));
            else if (event === 'error') lines.write({ type: 'error', ...(data as object) });
          },
        },
      );
      output.finish(result.stdoutBytes, result.stderrBytes);
      if (result.executionCount !== null) lines.write({ type: 'number_of_executions', execution_count: result.executionCount });
    }
    lines.write({ type: 'end_of_execution' });
  }).catch((err: unknown) => {
    // Before the first line the SDK reads an HTTP error; after it, an error line ends the stream.
    if (!lines.started) throw err;
    const { message } = toE2bHttpError(err);
    lines.write({ type: 'error', name: 'WarrenError', value: message, traceback: '' });
  });
  lines.end();
}

/**
 * A run's stdout and stderr events as E2B's lines: bytes decoded as UTF-8 across chunks, and a
 * note where bytes never arrived as events (the kernel's cap on a cell's output keeps its head and
 * tail, and the daemon drops events while its connection is congested; the event offsets show
 * both), so the SDK's logs say what was left out instead of silently joining the pieces.
 */
export class OutputRelay {
  private readonly decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  private readonly sent = { stdout: 0, stderr: 0 };

  constructor(private readonly lines: { write(line: Record<string, unknown>): void }) {}

  /** One event's bytes, at the byte offset its data names. */
  chunk(name: 'stdout' | 'stderr', data: unknown, bytes: Buffer): void {
    const offset = (data as { offset?: unknown } | undefined)?.offset;
    if (typeof offset === 'number' && offset > this.sent[name]) this.note(name, offset - this.sent[name]);
    this.emit(name, this.decoders[name].write(bytes));
    this.sent[name] = (typeof offset === 'number' ? Math.max(offset, this.sent[name]) : this.sent[name]) + bytes.length;
  }

  /** The end of the run, with each stream's total bytes as the result counts them. */
  finish(stdoutBytes: number, stderrBytes: number): void {
    for (const [name, total] of [
      ['stdout', stdoutBytes],
      ['stderr', stderrBytes],
    ] as const) {
      this.emit(name, this.decoders[name].end());
      if (total > this.sent[name]) this.note(name, total - this.sent[name]);
      this.sent[name] = Math.max(this.sent[name], total);
    }
  }

  private note(name: 'stdout' | 'stderr', bytes: number): void {
    this.emit(name, `${this.decoders[name].end()}\n[... ${bytes} bytes of ${name} omitted ...]\n`);
  }

  private emit(name: 'stdout' | 'stderr', text: string): void {
    if (text !== '') this.lines.write({ type: name, text, timestamp: now() });
  }
}

/** Writes newline-delimited JSON, starting the 200 answer at the first line. */
class LineStream {
  started = false;
  constructor(private readonly res: ServerResponse) {}

  /** Sends the 200 answer's headers at once. */
  start(): void {
    if (this.started || this.res.destroyed) return;
    this.started = true;
    this.res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' });
    this.res.flushHeaders();
  }

  write(line: Record<string, unknown>): void {
    if (this.res.destroyed) return;
    this.start();
    if (line['type'] === 'stdout' || line['type'] === 'stderr') {
      if (line['text'] === '') return;
    }
    this.res.write(`${JSON.stringify(line)}\n`);
  }

  end(): void {
    if (!this.started) this.write({ type: 'end_of_execution' });
    this.res.end();
  }
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text);
}

/** Unix time in microseconds, as E2B's lines carry it. */
function now(): number {
  return Date.now() * 1000;
}
