import { CodedError } from './errors.js';
import { FrameHeader, RequestId } from './envelope.js';
import { MAX_FRAME_BYTES, MAX_HEADER_BYTES } from './version.js';

/** A decoded frame: the checked header and the payload bytes, if any. */
export interface Frame<H extends FrameHeader = FrameHeader> {
  header: H;
  payload?: Buffer | undefined;
}

const LENGTH_BYTES = 4;

/**
 * Encodes a frame as one binary WebSocket message: a 4-byte big-endian header length, the JSON
 * header, then the payload bytes as they are (file content is never base64 on the wire).
 *
 * @example
 * ws.send(encodeFrame({ type: 'req', id: 1, method: 'fs.read', params: { path: 'a.py' } }));
 */
export function encodeFrame(header: FrameHeader, payload?: Uint8Array): Buffer {
  const json = Buffer.from(JSON.stringify(header), 'utf8');
  // The sender refuses what the receiver would, with the request's id, so the caller hears why.
  const id = 'id' in header && header.id !== null ? { id: header.id } : {};
  if (json.length > MAX_HEADER_BYTES) {
    throw new CodedError(
      'FRAME_TOO_LARGE',
      `This ${header.type} frame's header is ${json.length} bytes, over the ${MAX_HEADER_BYTES}-byte limit. Ask for less at once (a smaller maxEntries, limit or range, or the next page with a cursor); a large value belongs in a file.`,
      { ...id, limit: MAX_HEADER_BYTES },
    );
  }
  const total = LENGTH_BYTES + json.length + (payload?.length ?? 0);
  if (total > MAX_FRAME_BYTES) {
    throw new CodedError(
      'FRAME_TOO_LARGE',
      `This ${header.type} frame is ${total} bytes, over the ${MAX_FRAME_BYTES}-byte limit. Send or ask for less per call: a range of a file, or content in pieces.`,
      { ...id, limit: MAX_FRAME_BYTES },
    );
  }
  const prefix = Buffer.allocUnsafe(LENGTH_BYTES);
  prefix.writeUInt32BE(json.length, 0);
  return payload && payload.length > 0 ? Buffer.concat([prefix, json, payload]) : Buffer.concat([prefix, json]);
}

/**
 * Reads just the header of a frame without checking it against the envelope schemas, so a relay
 * can route or audit a frame and pass the bytes on untouched. Returns undefined when the bytes
 * are not a frame.
 */
export function peekHeader(data: Buffer): Record<string, unknown> | undefined {
  try {
    const { json } = splitFrame(data);
    const parsed: unknown = JSON.parse(json);
    return parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Decodes and checks one frame. Throws a {@link CodedError} (`INVALID_FRAME` or
 * `FRAME_TOO_LARGE`) whose details carry the request id when one could be read, so the receiver
 * can answer the caller and keep the connection.
 */
export function decodeFrame(data: Buffer | ArrayBuffer | Buffer[] | string): Frame {
  if (typeof data === 'string') throw new CodedError('INVALID_FRAME', 'Text frames are not part of the protocol; send binary frames.');
  const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.isBuffer(data) ? data : Buffer.from(data);
  if (bytes.length > MAX_FRAME_BYTES) {
    throw new CodedError('FRAME_TOO_LARGE', `Frame of ${bytes.length} bytes exceeds the ${MAX_FRAME_BYTES}-byte limit.`, idDetails(bytes));
  }
  const { json, payload } = splitFrame(bytes);
  let raw: unknown;
  try {
    raw = JSON.parse(json);
  } catch {
    throw new CodedError('INVALID_FRAME', 'Frame header is not valid JSON.');
  }
  const parsed = FrameHeader.safeParse(raw);
  if (!parsed.success) {
    const id = RequestId.safeParse((raw as { id?: unknown } | null)?.id);
    throw new CodedError(
      'INVALID_FRAME',
      `Frame header is invalid: ${parsed.error.issues.map(issueText).join('; ')}`,
      id.success ? { id: id.data } : undefined,
    );
  }
  return payload.length > 0 ? { header: parsed.data, payload } : { header: parsed.data };
}

function splitFrame(bytes: Buffer): { json: string; payload: Buffer } {
  if (bytes.length < LENGTH_BYTES) throw new CodedError('INVALID_FRAME', 'Frame is shorter than its 4-byte length prefix.');
  const headerLength = bytes.readUInt32BE(0);
  if (headerLength > MAX_HEADER_BYTES) {
    const id = frameRequestId(bytes);
    throw new CodedError(
      'FRAME_TOO_LARGE',
      `Frame header of ${headerLength} bytes exceeds the ${MAX_HEADER_BYTES}-byte limit; send less per call (a large value belongs in a file, written with files.write).`,
      id === undefined ? undefined : { id },
    );
  }
  if (LENGTH_BYTES + headerLength > bytes.length) throw new CodedError('INVALID_FRAME', 'Frame header length runs past the end of the frame.');
  return {
    json: bytes.subarray(LENGTH_BYTES, LENGTH_BYTES + headerLength).toString('utf8'),
    payload: bytes.subarray(LENGTH_BYTES + headerLength),
  };
}

/** How far into a header {@link frameRequestId} looks for a top-level `id`. */
const ID_SCAN_BYTES = 4096;

/**
 * The request id a frame carries, read without parsing its whole header: the top-level keys of
 * the header's first 4 KiB are scanned (values skipped, strings and nesting respected), so a frame
 * too large to decode, or to pass on, can still be answered with its id. Encoders put the id
 * near the start (`{"type":"req","id":7,...`); a string inside the params cannot pose as it.
 * Undefined when the id is not there, is not a valid id, or the bytes are not a frame.
 *
 * @example
 * frameRequestId(encodeFrame({ type: 'req', id: 7, method: 'system.info', params: {} })); // 7
 */
export function frameRequestId(bytes: Buffer): RequestId | undefined {
  if (bytes.length < LENGTH_BYTES) return undefined;
  const end = Math.min(bytes.length, LENGTH_BYTES + bytes.readUInt32BE(0), LENGTH_BYTES + ID_SCAN_BYTES);
  return leadingId(bytes.subarray(LENGTH_BYTES, end).toString('utf8'));
}

function leadingId(text: string): RequestId | undefined {
  const scanner = new TopLevelScanner(text);
  try {
    scanner.expect('{');
    for (;;) {
      const key = JSON.parse(scanner.string()) as string;
      scanner.expect(':');
      const value = scanner.value();
      if (key === 'id') {
        const parsed = RequestId.safeParse(JSON.parse(value));
        return parsed.success ? parsed.data : undefined;
      }
      if (scanner.next() === '}') return undefined;
      scanner.expect(',');
    }
  } catch {
    return undefined; // the window ended, or the bytes are not JSON: no id to recover
  }
}

/** Reads JSON tokens from a prefix of a header; throws when the prefix ends or is not JSON. */
class TopLevelScanner {
  private at = 0;
  constructor(private readonly text: string) {}

  /** The next character that is not white space, without consuming it. */
  next(): string {
    while (this.at < this.text.length && ' \t\r\n'.includes(this.text[this.at]!)) this.at++;
    if (this.at >= this.text.length) throw new Error('end of window');
    return this.text[this.at]!;
  }

  expect(char: string): void {
    if (this.next() !== char) throw new Error(`expected ${char}`);
    this.at++;
  }

  /** A JSON string token, quotes included. */
  string(): string {
    this.expect('"');
    const start = this.at - 1;
    for (;;) {
      const c = this.text[this.at++];
      if (c === undefined) throw new Error('end of window');
      if (c === '\\') this.at++;
      else if (c === '"') return this.text.slice(start, this.at);
    }
  }

  /** Any JSON value's text, nested objects and arrays skipped as a whole. */
  value(): string {
    const first = this.next();
    if (first === '"') return this.string();
    const start = this.at;
    if (first === '{' || first === '[') {
      let depth = 0;
      for (;;) {
        const c = this.next();
        if (c === '"') {
          this.string();
          continue;
        }
        this.at++;
        if (c === '{' || c === '[') depth++;
        else if (c === '}' || c === ']') depth--;
        if (depth === 0) return this.text.slice(start, this.at);
      }
    }
    while (this.at < this.text.length && !',}] \t\r\n'.includes(this.text[this.at]!)) this.at++;
    if (this.at >= this.text.length) throw new Error('end of window');
    return this.text.slice(start, this.at);
  }
}

function idDetails(bytes: Buffer): { id: RequestId } | undefined {
  const id = frameRequestId(bytes) ?? RequestId.safeParse(peekHeader(bytes)?.id).data;
  return id === undefined ? undefined : { id };
}

/** One zod issue as a short sentence naming its path. */
export function issueText(issue: { path: PropertyKey[]; message: string }): string {
  return issue.path.length > 0 ? `${issue.path.map(String).join('.')}: ${issue.message}` : issue.message;
}
