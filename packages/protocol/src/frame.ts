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
  const id = 'id' in header ? header.id : null;
  if (json.length > MAX_HEADER_BYTES) {
    throw new CodedError(
      'FRAME_TOO_LARGE',
      `This ${header.type} frame's header is ${json.length} bytes, over the ${MAX_HEADER_BYTES}-byte limit. Ask for less at once (a smaller maxEntries, limit or range).`,
      id === null ? undefined : { id, limit: MAX_HEADER_BYTES },
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
    const id = leadingId(bytes.subarray(LENGTH_BYTES, LENGTH_BYTES + 256).toString('utf8'));
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

/**
 * The id of a header too large to parse, read from its start where encoders put it
 * (`{"type":"req","id":7,...`): only a top-level `id` right after an optional `type` counts, so a
 * string inside the params cannot pose as one.
 */
function leadingId(start: string): RequestId | undefined {
  const match = /^\{\s*(?:"type"\s*:\s*"[a-z]{1,16}"\s*,\s*)?"id"\s*:\s*(\d{1,16}|"[A-Za-z0-9_.:-]{1,64}")\s*,/.exec(start);
  if (!match) return undefined;
  const parsed = RequestId.safeParse(JSON.parse(match[1]!));
  return parsed.success ? parsed.data : undefined;
}

function idDetails(bytes: Buffer): { id: RequestId } | undefined {
  const id = RequestId.safeParse(peekHeader(bytes)?.id);
  return id.success ? { id: id.data } : undefined;
}

/** One zod issue as a short sentence naming its path. */
export function issueText(issue: { path: PropertyKey[]; message: string }): string {
  return issue.path.length > 0 ? `${issue.path.map(String).join('.')}: ${issue.message}` : issue.message;
}
