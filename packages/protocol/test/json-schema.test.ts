import { describe, expect, it } from '@jest/globals';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { ERROR_CODE_LIST, ERROR_CODES, METHODS, methodJsonSchemas, protocolJsonSchema, PROTOCOL_VERSION } from '../src/index.js';

const ajv = new Ajv2020({ strict: false });

describe('JSON Schema of the WebSocket methods', () => {
  it('has params and result for exactly the methods in the registry, with their registry facts', () => {
    const schemas = methodJsonSchemas();
    expect(Object.keys(schemas).sort()).toEqual(Object.keys(METHODS).sort());
    for (const [name, schema] of Object.entries(schemas)) {
      const spec = METHODS[name as keyof typeof METHODS] as { access: string; idempotent: boolean; payload?: string; events?: object };
      expect([name, schema.access, schema.idempotent, schema.payload]).toEqual([name, spec.access, spec.idempotent, spec.payload]);
      expect([name, Object.keys(schema.events ?? {})]).toEqual([name, Object.keys(spec.events ?? {})]);
      for (const data of Object.values(schema.events ?? {})) expect(() => ajv.compile(data)).not.toThrow();
      expect(() => ajv.compile(schema.params)).not.toThrow();
      expect(() => ajv.compile(schema.result)).not.toThrow();
    }
  });

  it('checks params strictly and reads results tolerantly, as the two ends do', () => {
    const { params, result } = methodJsonSchemas()['system.info'];
    const info = { agentVersion: '0.1.0', protocolVersion: 1, pid: 7, uid: 1000, rssBytes: 1, uptimeMs: 2 };
    expect(ajv.validate(params, {})).toBe(true);
    expect(ajv.validate(params, { verbose: true })).toBe(false);
    expect(ajv.validate(result, info)).toBe(true);
    expect(ajv.validate(result, { ...info, addedByANewerDaemon: 1 })).toBe(true);
    expect(ajv.validate(result, { ...info, pid: 'seven' })).toBe(false);
    const resize = methodJsonSchemas()['pty.resize'].params;
    expect(ajv.validate(resize, { handle: 'h_1', cols: 120, rows: 40 })).toBe(true);
    expect(ajv.validate(resize, { handle: 'h_1', cols: 120 })).toBe(false);
  });

  it('describes the events a method streams, from the registry', () => {
    const { events } = methodJsonSchemas()['pty.open'];
    expect(Object.keys(events ?? {}).sort()).toEqual(['output', 'started']);
    expect(ajv.validate(events!.started!, { handle: 'pty_1', pid: 12 })).toBe(true);
    expect(ajv.validate(events!.started!, { handle: 'pty_1' })).toBe(false);
  });

  it('describes the frame header every message starts with, under the protocol version', () => {
    const document = protocolJsonSchema();
    expect(Object.keys(document.commonEvents as object)).toEqual(['approval']);
    expect(document).toMatchObject({ $schema: 'https://json-schema.org/draft/2020-12/schema', protocolVersion: PROTOCOL_VERSION });
    const header = ajv.compile(document.frameHeader as object);
    expect(header({ type: 'req', id: 1, method: 'system.info', params: {} })).toBe(true);
    expect(header({ type: 'cancel', id: 1 })).toBe(true);
    expect(header({ type: 'nope', id: 1 })).toBe(false);
  });

  it('carries every wire error code with its status and suggestion, for clients in other languages', () => {
    const codes = protocolJsonSchema().errorCodes as Record<string, { status: number; suggestion: string }>;
    expect(Object.keys(codes)).toEqual(ERROR_CODE_LIST);
    expect(codes.NOT_FOUND).toEqual(ERROR_CODES.NOT_FOUND);
  });
});
