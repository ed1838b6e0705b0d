import { describe, expect, it } from '@jest/globals';
import {
  allocFramePayload,
  CodedError,
  decodeFrame,
  encodeFrame,
  FRAME_HEADROOM_BYTES,
  frameRequestId,
  MAX_FRAME_BYTES,
  MAX_HEADER_BYTES,
  type FrameHeader,
} from '../src/index.js';

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    return err instanceof CodedError ? err.code : 'not a CodedError';
  }
  return undefined;
}

describe('frames', () => {
  const headers: FrameHeader[] = [
    { type: 'hello', protocolVersion: 1, client: 'test' },
    { type: 'welcome', protocolVersion: 1, server: 'warren-agent', serverVersion: '0.1.0' },
    { type: 'req', id: 7, method: 'fs.read', params: { path: 'a.py' } },
    { type: 'req', id: 'abc', method: 'process.exec', params: { cmd: ['ls', '-l'] } },
    { type: 'res', id: 7, result: { path: 'a.py', size: 3, mtimeMs: 1 } },
    { type: 'err', id: null, error: { code: 'INVALID_FRAME', message: 'bad' } },
    { type: 'err', id: 3, error: { code: 'NOT_FOUND', message: 'gone', details: { path: 'x' } } },
    { type: 'evt', id: 9, event: 'stdout', data: { offset: 0 } },
    { type: 'cancel', id: 9 },
  ];

  it.each(headers)('round-trips a $type frame', (header) => {
    expect(decodeFrame(encodeFrame(header))).toEqual({ header });
  });

  it('carries a binary payload as raw bytes, not base64', () => {
    const payload = Buffer.from([0, 255, 1, 254, 0x0a]);
    const encoded = encodeFrame({ type: 'res', id: 1, result: {} }, payload);
    expect(encoded.subarray(encoded.length - payload.length)).toEqual(payload);
    expect(decodeFrame(encoded).payload).toEqual(payload);
  });

  it('puts the header in the room before a payload from allocFramePayload, sharing its memory instead of copying it', () => {
    const payload = allocFramePayload(1000);
    payload.fill(7);
    const sent = payload.subarray(0, 600);
    const header: FrameHeader = { type: 'res', id: 1, result: { bytesRead: 600 } };
    const encoded = encodeFrame(header, sent);
    expect(encoded.buffer).toBe(payload.buffer);
    expect(encoded.byteOffset + encoded.length).toBe(sent.byteOffset + sent.length);
    expect(decodeFrame(encoded)).toEqual({ header, payload: Buffer.alloc(600, 7) });
    // The bytes are the same as a frame encoded by copying.
    expect(Buffer.compare(encoded, encodeFrame(header, Buffer.alloc(600, 7)))).toBe(0);
  });

  it('uses the room once: encoding the same payload again copies, and leaves the first frame as it was', () => {
    const payload = allocFramePayload(64);
    payload.fill(1);
    const first = encodeFrame({ type: 'res', id: 1, result: {} }, payload);
    const before = Buffer.from(first);
    const second = encodeFrame({ type: 'res', id: 22222, result: { other: 'a longer header than the first' } }, payload);
    expect(second.buffer).not.toBe(payload.buffer);
    expect(Buffer.compare(first, before)).toBe(0);
    expect(decodeFrame(second).payload).toEqual(Buffer.alloc(64, 1));
  });

  it('never writes before a payload that does not start its buffer, nor into a buffer it did not make', () => {
    const payload = allocFramePayload(256);
    payload.fill(3);
    const later = payload.subarray(128);
    const encoded = encodeFrame({ type: 'res', id: 1, result: {} }, later);
    expect(encoded.buffer).not.toBe(payload.buffer);
    expect(payload).toEqual(Buffer.alloc(256, 3));
    const theirs = Buffer.alloc(8192, 5);
    encodeFrame({ type: 'res', id: 1, result: {} }, theirs.subarray(FRAME_HEADROOM_BYTES));
    expect(theirs).toEqual(Buffer.alloc(8192, 5));
  });

  it('copies when the header is larger than the room', () => {
    const payload = allocFramePayload(16);
    const header: FrameHeader = { type: 'res', id: 1, result: { text: 'x'.repeat(FRAME_HEADROOM_BYTES) } };
    const encoded = encodeFrame(header, payload.fill(9));
    expect(encoded.buffer).not.toBe(payload.buffer);
    expect(decodeFrame(encoded)).toEqual({ header, payload: Buffer.alloc(16, 9) });
  });

  it('rejects a text frame with INVALID_FRAME', () => {
    expect(codeOf(() => decodeFrame('{"type":"hello"}'))).toBe('INVALID_FRAME');
  });

  it('rejects a frame shorter than its length prefix', () => {
    expect(codeOf(() => decodeFrame(Buffer.from([0, 0])))).toBe('INVALID_FRAME');
  });

  it('rejects a header length that runs past the frame', () => {
    const bytes = Buffer.alloc(8);
    bytes.writeUInt32BE(1000, 0);
    expect(codeOf(() => decodeFrame(bytes))).toBe('INVALID_FRAME');
  });

  it('rejects a header that is not JSON', () => {
    const json = Buffer.from('{nope');
    const prefix = Buffer.alloc(4);
    prefix.writeUInt32BE(json.length, 0);
    expect(codeOf(() => decodeFrame(Buffer.concat([prefix, json])))).toBe('INVALID_FRAME');
  });

  it('rejects an unknown frame type and keeps the request id for the answer', () => {
    const raw = Buffer.from(JSON.stringify({ type: 'bogus', id: 12 }));
    const prefix = Buffer.alloc(4);
    prefix.writeUInt32BE(raw.length, 0);
    try {
      decodeFrame(Buffer.concat([prefix, raw]));
      throw new Error('decoded');
    } catch (err) {
      expect(err).toBeInstanceOf(CodedError);
      expect((err as CodedError).code).toBe('INVALID_FRAME');
      expect((err as CodedError).details).toEqual({ id: 12 });
    }
  });

  it('rejects unknown keys in a header (strict objects)', () => {
    const raw = Buffer.from(JSON.stringify({ type: 'cancel', id: 1, __proto__x: 1 }));
    const prefix = Buffer.alloc(4);
    prefix.writeUInt32BE(raw.length, 0);
    expect(codeOf(() => decodeFrame(Buffer.concat([prefix, raw])))).toBe('INVALID_FRAME');
  });

  it('rejects an oversized frame with FRAME_TOO_LARGE, naming its request id', () => {
    const frame = Buffer.concat([encodeFrame({ type: 'req', id: 5, method: 'fs.write', params: { path: 'big' } }), Buffer.alloc(MAX_FRAME_BYTES + 1)]);
    try {
      decodeFrame(frame);
      throw new Error('decoded');
    } catch (err) {
      expect((err as CodedError).code).toBe('FRAME_TOO_LARGE');
      expect((err as CodedError).details).toEqual({ id: 5 });
    }
  });

  it('refuses to encode a header or a frame over the caps, naming the request id, so the sender can answer instead', () => {
    const details = (fn: () => unknown) => {
      try {
        fn();
      } catch (err) {
        return { code: (err as CodedError).code, details: (err as CodedError).details };
      }
      return undefined;
    };
    const big = 'x'.repeat(MAX_HEADER_BYTES);
    expect(details(() => encodeFrame({ type: 'res', id: 9, result: { big } }))).toEqual({
      code: 'FRAME_TOO_LARGE',
      details: { id: 9, limit: MAX_HEADER_BYTES },
    });
    expect(details(() => encodeFrame({ type: 'res', id: 'r1', result: {} }, Buffer.alloc(MAX_FRAME_BYTES)))).toEqual({
      code: 'FRAME_TOO_LARGE',
      details: { id: 'r1', limit: MAX_FRAME_BYTES },
    });
    expect(details(() => encodeFrame({ type: 'res', id: 3, result: {} }, Buffer.alloc(MAX_FRAME_BYTES - 1024)))).toBeUndefined();
  });

  it('reads the id of a header too large to decode from its first bytes, and only a top-level one', () => {
    const frameOf = (json: string) => {
      const body = Buffer.from(json);
      const prefix = Buffer.alloc(4);
      prefix.writeUInt32BE(MAX_HEADER_BYTES + 1);
      return Buffer.concat([prefix, body]);
    };
    const filler = 'y'.repeat(8000);
    const cases: [string, unknown][] = [
      [`{"type":"req","id":77,"method":"process.exec","params":{"env":{"BIG":"${filler}`, 77],
      [`{ "id" : "call-1" , "type":"req","params":{"a":"${filler}`, 'call-1'],
      [`{"type":"req","method":"fs.write","params":{"path":"a\\\\\\"}","nested":[1,{"id":5}]},"id":12,"x":"${filler}`, 12],
      [`{"type":"req","params":{"id":5,"text":"${filler}`, undefined],
      [`{"type":"req","note":"\\"id\\":6","params":"${filler}`, undefined],
      [`{"type":"req","id":-1,"x":"${filler}`, undefined],
      [`{"type":"req","id":{"a":1},"x":"${filler}`, undefined],
      [`{"type":"req","params":"${filler}","id":4}`, undefined],
      [`not json at all ${filler}`, undefined],
      ['', undefined],
    ];
    for (const [json, id] of cases) expect([json.slice(0, 60), frameRequestId(frameOf(json))]).toEqual([json.slice(0, 60), id]);
    try {
      decodeFrame(frameOf(cases[0]![0]));
      throw new Error('decoded');
    } catch (err) {
      expect([(err as CodedError).code, (err as CodedError).details]).toEqual(['FRAME_TOO_LARGE', { id: 77 }]);
    }
  });
});
