import { once } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { CodedError, ERROR_CODES, type ErrorCode, type ImageEvent, type RestErrorBody } from '@warren/protocol';

/** A JSON body is read up to this size; a larger one is FRAME_TOO_LARGE. */
const MAX_BODY_BYTES = 1024 * 1024;

/**
 * An NDJSON answer of {@link ImageEvent} lines. Before `start` a failure is an ordinary error
 * answer with its status; after it, the status is sent, so a failure is the last line, an
 * `error` event with the same body an error answer has.
 *
 * @example
 * const stream = eventStream(res);
 * await stream.run(async () => ({ type: 'done', image }));
 */
export function eventStream(res: ServerResponse) {
  let started = false;
  const start = () => {
    if (started) return;
    started = true;
    res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' });
  };
  const send = (event: ImageEvent) => {
    start();
    if (!res.writableEnded) res.write(`${JSON.stringify(event)}\n`);
  };
  return {
    start,
    send,
    async run(work: () => Promise<ImageEvent>): Promise<void> {
      try {
        send(await work());
      } catch (err) {
        if (!started) throw err;
        const coded = err instanceof CodedError ? err : new CodedError('INTERNAL', err instanceof Error ? err.message : String(err));
        const error = {
          code: coded.code,
          message: coded.message,
          suggestion: ERROR_CODES[coded.code].suggestion,
          ...(coded.details ? { details: coded.details } : {}),
        };
        send({ type: 'error', error });
      }
      res.end();
    },
  };
}

/**
 * An NDJSON answer of `lines`, one JSON value per line, sent as they come: reading waits while the
 * client's socket is full, and stops when the client goes away. Whatever fails after the first
 * line can only end the answer early.
 *
 * @example
 * await sendJsonLines(res, trail.export({ tenant: 'acme' }));
 */
export async function sendJsonLines(res: ServerResponse, lines: AsyncIterable<unknown>): Promise<void> {
  res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' });
  const gone = new AbortController();
  res.once('close', () => gone.abort());
  try {
    for await (const line of lines) {
      if (gone.signal.aborted) return;
      if (!res.write(`${JSON.stringify(line)}\n`)) await once(res, 'drain', { signal: gone.signal }).catch(() => undefined);
    }
  } finally {
    res.end();
  }
}

/**
 * Reads a build context (a tar archive) of at most `maxMb` MiB; a larger one is refused
 * (BUILD_CONTEXT_TOO_LARGE) before it is read to the end, an empty one is INVALID_PARAMS.
 *
 * @example
 * const context = await readContext(req, deps.config.images.maxBuildContextMb);
 */
export async function readContext(req: IncomingMessage, maxMb: number): Promise<Buffer> {
  const max = maxMb * 1024 * 1024;
  const tooLarge = () =>
    new CodedError(
      'BUILD_CONTEXT_TOO_LARGE',
      `The build context is larger than this controller's ${maxMb} MiB (images.maxBuildContextMb); build from a smaller folder.`,
      {
        maxBytes: max,
      },
    );
  if (Number(req.headers['content-length'] ?? 0) > max) throw tooLarge();
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > max) {
      req.destroy();
      throw tooLarge();
    }
    chunks.push(chunk);
  }
  if (size === 0)
    throw new CodedError('INVALID_PARAMS', 'The build request has no body; send the build context as a tar archive (warren images build packs a folder).');
  return Buffer.concat(chunks);
}

/**
 * Reads a JSON body of at most 1 MiB (FRAME_TOO_LARGE past it, INVALID_PARAMS when it is not
 * JSON); an empty body is `{}`. The router reads a route's body with it before parsing it.
 *
 * @example
 * const raw = await readJson(req);
 */
export async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new CodedError('FRAME_TOO_LARGE', `Request body exceeds ${MAX_BODY_BYTES} bytes.`);
    chunks.push(chunk);
  }
  if (size === 0) return {};
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new CodedError('INVALID_PARAMS', 'Request body is not valid JSON.');
  }
}

/**
 * Answers with a JSON body and its length.
 *
 * @example
 * sendJson(res, 200, { status: 'ok' });
 */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text);
}

/** The one shape of every REST error: code, message, and what to do next. */
export function errorBody(err: unknown): { status: number; body: RestErrorBody } {
  const coded = err instanceof CodedError ? err : new CodedError('INTERNAL', unexpectedMessage(err));
  const code: ErrorCode = coded.code;
  const body: RestErrorBody = { error: { code, message: coded.message, suggestion: ERROR_CODES[code].suggestion } };
  if (coded.details) body.error.details = coded.details;
  return { status: ERROR_CODES[code].status, body };
}

/**
 * What a client is told of an error no part of Warren expected: a system call's failure names its
 * kind and call only, since Node's message carries the host path it failed on (a snapshot's copy,
 * the state folder), which the controller's log keeps instead.
 */
export function unexpectedMessage(err: unknown): string {
  const { code, syscall } = (err ?? {}) as { code?: unknown; syscall?: unknown };
  if (typeof code === 'string' && typeof syscall === 'string')
    return `A file operation on the controller's host failed (${code} in ${syscall}); the controller's log has the details.`;
  return err instanceof Error ? err.message : String(err);
}
