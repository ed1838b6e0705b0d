import { z } from 'zod';
import { FrameHeader } from './envelope.js';
import { ERROR_CODES } from './errors.js';
import type { MethodAccess } from './method-spec.js';
import { COMMON_EVENTS, METHODS, type MethodName } from './methods.js';
import { MAX_FRAME_BYTES, MAX_HEADER_BYTES, PROTOCOL_MINOR, PROTOCOL_VERSION, WS_MAX_PAYLOAD_BYTES } from './version.js';

/** A JSON Schema (draft 2020-12) document or subschema. */
export type JsonSchema = Record<string, unknown>;

/** One WebSocket method as JSON Schema: what a caller sends, what it gets back, and the registry's facts about it. */
export interface MethodJsonSchema {
  /** The `params` of the `req` frame, as a caller may write them (fields with defaults are optional). */
  params: JsonSchema;
  /** The `result` of the `res` frame, as the daemon sends it; open to fields a newer daemon may add. */
  result: JsonSchema;
  access: MethodAccess;
  /** Which frame carries binary bytes after its JSON header, if any. */
  payload?: 'request' | 'response';
  idempotent: boolean;
  /** The `data` of each event the method streams before its answer, by event name (bytes travel as the event frame's payload). */
  events?: Record<string, JsonSchema>;
}

const ZOD_CHECK_FORMATS = new Set(['starts_with', 'ends_with', 'includes']);

/**
 * The options that turn Warren's zod schemas into JSON Schema for one direction: what a receiver
 * takes (`input`: checked strictly, unknown fields refused, fields with defaults optional) or what
 * it answers (`output`: readers ignore fields they do not know, so no `additionalProperties: false`,
 * and a server may add a field within a major version).
 *
 * @example
 * z.toJSONSchema(SandboxInfo, jsonSchemaOptions('output'));
 */
export function jsonSchemaOptions(io: 'input' | 'output'): {
  io: 'input' | 'output';
  unrepresentable: 'any';
  override: (ctx: { jsonSchema: JsonSchema }) => void;
} {
  return {
    io,
    unrepresentable: 'any',
    override: ({ jsonSchema }) => {
      if (io === 'output' && jsonSchema.additionalProperties === false) delete jsonSchema.additionalProperties;
      // zod names its own string checks as formats (`starts_with`); the `pattern` beside it says the same in standard terms.
      if (typeof jsonSchema.format === 'string' && ZOD_CHECK_FORMATS.has(jsonSchema.format) && typeof jsonSchema.pattern === 'string') delete jsonSchema.format;
    },
  };
}

/** A zod schema as a JSON Schema subschema; the dialect is stated once, at the top of the document. */
function convert(schema: z.ZodType, io: 'input' | 'output'): JsonSchema {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, jsonSchemaOptions(io)) as JsonSchema;
  return rest;
}

/**
 * The params, result and event payloads of every method in the registry ({@link METHODS}) as
 * JSON Schema, made from the same zod schemas both ends check with, for clients written without
 * this package.
 *
 * @example
 * const { params } = methodJsonSchemas()['fs.read']; // { type: 'object', properties: { path: ... }, ... }
 */
export function methodJsonSchemas(): Record<MethodName, MethodJsonSchema> {
  const methods = {} as Record<MethodName, MethodJsonSchema>;
  for (const name of Object.keys(METHODS).sort() as MethodName[]) {
    const spec = METHODS[name] as (typeof METHODS)[MethodName] & { payload?: 'request' | 'response'; events?: Readonly<Record<string, z.ZodType>> };
    const events = spec.events && Object.fromEntries(Object.entries(spec.events).map(([event, data]) => [event, convert(data, 'output')]));
    methods[name] = {
      params: convert(spec.params, 'input'),
      result: convert(spec.result, 'output'),
      access: spec.access,
      ...(spec.payload ? { payload: spec.payload } : {}),
      idempotent: spec.idempotent,
      ...(events ? { events } : {}),
    };
  }
  return methods;
}

/**
 * The whole wire as one JSON document (checked in as docs/protocol.schema.json, written by
 * `pnpm openapi`): the protocol version, the frame header every binary message starts with, the
 * events any request may carry (`commonEvents`), each method's params, result and events, and the
 * closed list of error codes with their HTTP status and suggestion (`errorCodes`), from which
 * clients in other languages generate their error classes (packages/sdk-python).
 *
 * @example
 * writeFileSync('protocol.schema.json', `${JSON.stringify(protocolJsonSchema(), null, 2)}\n`);
 */
export function protocolJsonSchema(): JsonSchema {
  return {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    title: 'Warren WebSocket protocol',
    description:
      'One binary WebSocket message is one frame: a 4-byte big-endian header length, a JSON header (frameHeader), then the payload bytes. ' +
      'A `req` frame names a method and carries its params; the answer is a `res` frame with its result or an `err` frame. ' +
      'Params are checked strictly; results may gain fields within a major version, so readers should ignore fields they do not know.',
    protocolVersion: PROTOCOL_VERSION,
    protocolMinor: PROTOCOL_MINOR,
    // The sizes both ends refuse beyond (see version.ts): a frame, its JSON header, one WebSocket message.
    limits: { maxFrameBytes: MAX_FRAME_BYTES, maxHeaderBytes: MAX_HEADER_BYTES, wsMaxPayloadBytes: WS_MAX_PAYLOAD_BYTES },
    frameHeader: convert(FrameHeader, 'input'),
    commonEvents: Object.fromEntries(Object.entries(COMMON_EVENTS).map(([event, data]) => [event, convert(data, 'output')])),
    methods: methodJsonSchemas(),
    errorCodes: ERROR_CODES,
  };
}
