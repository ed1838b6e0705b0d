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
  if (payload && payload.length > 0 && inPlace(payload, LENGTH_BYTES + json.length)) {
    // The payload's own buffer has room before it (allocFramePayload): the prefix and the header
    // go there, and the frame is a view of that buffer, so the payload is never copied.
    const frame = Buffer.from(payload.buffer, payload.byteOffset - LENGTH_BYTES - json.length, total);
    frame.writeUInt32BE(json.length, 0);
    json.copy(frame, LENGTH_BYTES);
    return frame;
  }
  const prefix = Buffer.allocUnsafe(LENGTH_BYTES);
  prefix.writeUInt32BE(json.length, 0);
  return payload && payload.length > 0 ? Buffer.concat([prefix, json, payload]) : Buffer.concat([prefix, json]);
}

/**
 * The room {@link allocFramePayload} keeps before a payload: a frame's 4-byte length prefix and a
 * header of up to this less 4 bytes fit there (a larger header is encoded by copying, as always).
 */
export const FRAME_HEADROOM_BYTES = 4096;

/** The buffers made by {@link allocFramePayload} whose room is still free, with where their payload starts. */
const headroom = new WeakMap<ArrayBufferLike, number>();

/**
 * A payload buffer of `size` bytes (its content is not initialised: fill it, or send a
 * `subarray(0, filled)` of it) with room before it for the frame's prefix and header, so
 * {@link encodeFrame} puts them in place instead of copying the payload into a new frame: a large
 * read answered from such a buffer is copied once less. The room is used once; a payload that does
 * not start where this one did (a later slice of it) is encoded by copying.
 *
 * @example
 * const payload = allocFramePayload(length);
 * const { bytesRead } = await handle.read(payload, 0, length, offset);
 * ws.send(encodeFrame({ type: 'res', id, result }, payload.subarray(0, bytesRead)));
 */
export function allocFramePayload(size: number): Buffer {
  const whole = Buffer.allocUnsafeSlow(FRAME_HEADROOM_BYTES + size);
  headroom.set(whole.buffer, whole.byteOffset + FRAME_HEADROOM_BYTES);
  return whole.subarray(FRAME_HEADROOM_BYTES);
}

/** Whether `payload` starts a buffer of {@link allocFramePayload} with `bytes` of room free before it; if so, the room is taken. */
function inPlace(payload: Uint8Array, bytes: number): boolean {
  if (headroom.get(payload.buffer) !== payload.byteOffset || bytes > FRAME_HEADROOM_BYTES) return false;
  headroom.delete(payload.buffer);
  return true;
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
 * The bytes of a frame's payload (after its header), read from its length prefix without parsing
 * anything: 0 for bytes that are not a frame. What a relay counts as a call's bytes in and out.
 *
 * @example
 * framePayloadLength(encodeFrame({ type: 'res', id: 1, result: {} }, Buffer.from('abc'))); // 3
 */
export function framePayloadLength(data: Buffer): number {
  if (data.length < LENGTH_BYTES) return 0;
  return Math.max(0, data.length - LENGTH_BYTES - data.readUInt32BE(0));
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
