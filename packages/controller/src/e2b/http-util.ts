import type { IncomingMessage, ServerResponse } from 'node:http';
import type { z } from 'zod';
import { E2bHttpError } from './errors.js';

/** The largest JSON body the control plane reads. */
export const MAX_BODY_BYTES = 1024 * 1024;

/** A body checked against a schema, or E2B's 400 naming each field that is wrong. */
export function parse<T extends z.ZodType>(schema: T, body: unknown, what: string): z.output<T> {
  const parsed = schema.safeParse(body);
  if (!parsed.success)
    throw new E2bHttpError(400, `Invalid ${what}: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; ')}.`);
  return parsed.data;
}

/** Reads a JSON body of at most `limit` bytes, {@link MAX_BODY_BYTES} by default (413 past it, refused from its declared length before it is read); empty is `{}`. */
export async function readJson(req: IncomingMessage, limit = MAX_BODY_BYTES): Promise<unknown> {
  if (Number(req.headers['content-length'] ?? 0) > limit) {
    req.resume();
    throw new E2bHttpError(413, `The request body exceeds ${limit} bytes.`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw new E2bHttpError(413, `The request body exceeds ${limit} bytes.`);
    chunks.push(chunk);
  }
  if (size === 0) return {};
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new E2bHttpError(400, 'The request body is not valid JSON.');
  }
}

/** Answers with a JSON body. */
export function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text);
}
