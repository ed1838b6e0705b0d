import { z } from 'zod';
import { ERROR_CODE_LIST, type ErrorCode, type WireErrorBody } from './errors.js';

/** A request id: unique among the requests in flight on one connection. */
export const RequestId = z.union([z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER), z.string().min(1).max(64)]);
export type RequestId = z.infer<typeof RequestId>;

const KNOWN_CODES: ReadonlySet<string> = new Set(ERROR_CODE_LIST);

/**
 * An error body, read tolerantly: a code this build does not know (a newer server's) becomes
 * `INTERNAL` with the server's code kept in `details.code`, and fields added later are dropped.
 */
export const WireError = z
  .object({
    code: z.string().min(1).max(100),
    message: z.string(),
    details: z.record(z.string(), z.unknown()).optional(),
  })
  .transform((e): WireErrorBody => {
    if (KNOWN_CODES.has(e.code)) return { ...e, code: e.code as ErrorCode };
    return { code: 'INTERNAL', message: e.message, details: { ...e.details, code: e.code } };
  });

// The handshake and everything a server sends are read tolerantly (`z.object`: fields added by a
// later minor are dropped), so either end may grow them within a major; requests, cancels and
// approvals, the client's input to the server, stay strict.

/** The first frame a client sends. */
export const HelloFrame = z.object({
  type: z.literal('hello'),
  /** The major version: the two ends must share it. */
  protocolVersion: z.number().int().positive(),
  /** The client's minor version within the major (0 when absent, as from the first SDKs). */
  protocolMinor: z.number().int().nonnegative().optional(),
  client: z.string().max(200).optional(),
});

/**
 * The server's answer to a compatible hello, with its own minor: the two ends then speak the
 * lower of the two minors (see `negotiatedMinor`).
 */
export const WelcomeFrame = z.object({
  type: z.literal('welcome'),
  protocolVersion: z.number().int().positive(),
  protocolMinor: z.number().int().nonnegative().optional(),
  server: z.string().max(200),
  serverVersion: z.string().max(100),
});

/** A call: `params` are checked against the method's schema by the receiver. */
export const RequestFrame = z.strictObject({
  type: z.literal('req'),
  id: RequestId,
  method: z.string().min(1).max(100),
  params: z.unknown(),
});

/** The final, successful answer to a request. */
export const ResponseFrame = z.object({
  type: z.literal('res'),
  id: RequestId,
  result: z.unknown(),
});

/** The final, failed answer to a request; `id` is null when the frame it answers had none. */
export const ErrorFrame = z.object({
  type: z.literal('err'),
  id: RequestId.nullable(),
  error: WireError,
});

/** One event of a streaming request, before its final `res` or `err`. */
export const EventFrame = z.object({
  type: z.literal('evt'),
  id: RequestId,
  event: z.string().min(1).max(100),
  data: z.unknown(),
});

/** Asks the receiver to stop the work of a request in flight. */
export const CancelFrame = z.strictObject({
  type: z.literal('cancel'),
  id: RequestId,
});

/**
 * The client's answer to an `approval` event of a request in flight (seed 001's read/write
 * approval): `allow: false`, or no answer in time, fails the request with `APPROVAL_DENIED`.
 */
export const ApprovalFrame = z.strictObject({
  type: z.literal('approval'),
  id: RequestId,
  allow: z.boolean(),
});

/** Every frame header that may cross the wire. */
export const FrameHeader = z.discriminatedUnion('type', [
  HelloFrame,
  WelcomeFrame,
  RequestFrame,
  ResponseFrame,
  ErrorFrame,
  EventFrame,
  CancelFrame,
  ApprovalFrame,
]);

export type HelloFrame = z.infer<typeof HelloFrame>;
export type WelcomeFrame = z.infer<typeof WelcomeFrame>;
export type RequestFrame = z.infer<typeof RequestFrame>;
export type ResponseFrame = z.infer<typeof ResponseFrame>;
export type ErrorFrame = z.infer<typeof ErrorFrame>;
export type EventFrame = z.infer<typeof EventFrame>;
export type CancelFrame = z.infer<typeof CancelFrame>;
export type ApprovalFrame = z.infer<typeof ApprovalFrame>;
export type FrameHeader = z.infer<typeof FrameHeader>;
