import { z } from 'zod';
import type { MethodSpec } from '../method-spec.js';

/** The port the daemon's egress relay listens on inside a sandbox (`HTTP_PROXY=http://127.0.0.1:3128`). */
export const EGRESS_RELAY_PORT = 3128;
/** Where the daemon writes the egress CA and the trust bundle inside a sandbox (a root-owned tmpfs). */
export const EGRESS_TRUST_DIR = '/run/warren-egress';
/**
 * How many bytes of one relayed connection either end may have in flight before the other has
 * passed them on: the daemon stops reading the sandbox's socket (and the controller its gateway
 * socket) at this mark, so a slow side pushes back instead of filling memory.
 */
export const EGRESS_STREAM_WINDOW = 256 * 1024;
/**
 * The loopback address where the relay answers DNS (UDP and TCP port 53) and takes the connections
 * of clients that ignore proxy variables (:80 and :443) inside a sandbox; allowed names resolve to it.
 * Not 127.0.0.1, so a sandbox's own servers on 127.0.0.1:80 keep working.
 */
export const EGRESS_TRANSPARENT_ADDRESS = '127.0.88.1';
/** The most connections one sandbox's relay may hold open at once, whatever the controller asks. */
export const EGRESS_MAX_STREAMS = 4096;

const StreamId = z
  .number()
  .int()
  .min(1)
  .max(2 ** 31 - 1);

/**
 * `egress.serve`: the controller's long-lived call that makes the daemon listen on the sandbox's
 * loopback and carry every connection made there to the controller, which hands it to the
 * sandbox's egress gateway. The call lasts as long as the relay does; cancelling it (or closing
 * the connection) closes the listener and every relayed connection.
 */
export const EgressServeParams = z.strictObject({
  /** The loopback port to listen on; 0 picks a free one (tests), reported by the `listening` event. */
  port: z.number().int().min(0).max(65535).default(EGRESS_RELAY_PORT),
  /** Connections the relay holds at once; one more is closed at once (the gateway's own cap still applies). */
  maxConnections: z.number().int().min(1).max(EGRESS_MAX_STREAMS).default(256),
  /** The interception CA (PEM, never its key), written to `ca.pem` with a trust bundle beside it. */
  caPem: z
    .string()
    .max(16 * 1024)
    .regex(/^-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\r\n-]+-----END CERTIFICATE-----\s*$/, 'one PEM certificate')
    .optional(),
  /**
   * Also serve the transparent path: DNS on `address` port 53 (UDP and TCP) and TCP :80 and :443,
   * each relayed as its own kind of connection. With `resolvConf`, the daemon points the sandbox's
   * resolver at `address` (only where the sandbox has no interface but loopback).
   */
  transparent: z
    .strictObject({
      address: z.string().regex(/^127\.(?:\d{1,3})\.(?:\d{1,3})\.(?:\d{1,3})$/, 'an IPv4 loopback address'),
      /** Ports, for tests that cannot bind the real ones; 0 picks a free one (reported by `listening`). */
      ports: z
        .strictObject({ dns: z.number().int().min(0).max(65535), http: z.number().int().min(0).max(65535), tls: z.number().int().min(0).max(65535) })
        .optional(),
      resolvConf: z.boolean().default(false),
    })
    .optional(),
});
export const EgressServeResult = z.strictObject({});

/** What the controller tells one relayed connection: bytes for it (the payload), what it passed on, half-close, close. */
export const EgressSendParams = z.strictObject({
  stream: StreamId,
  /** Bytes of this connection's data the controller has passed on since the last ack (opens the daemon's window). */
  ack: z.number().int().min(0).max(EGRESS_STREAM_WINDOW).optional(),
  /** The gateway side has finished sending: half-close the sandbox's socket after the payload. */
  end: z.boolean().optional(),
  /** The gateway side is gone: close the sandbox's socket at once. */
  close: z.boolean().optional(),
});
/** Answered once the payload is written to the sandbox's socket: the controller's window reopens by that much. */
export const EgressSendResult = z.strictObject({});

export const EGRESS_METHODS = {
  'egress.serve': {
    params: EgressServeParams,
    result: EgressServeResult,
    access: 'controller',
    idempotent: false,
    events: {
      /** The relay listens (on the port asked for, or the one picked for port 0). */
      listening: z.strictObject({
        port: z.number().int().min(1).max(65535),
        /** Where the transparent path listens, when asked for. */
        transparent: z
          .strictObject({ dns: z.number().int().min(1).max(65535), http: z.number().int().min(1).max(65535), tls: z.number().int().min(1).max(65535) })
          .optional(),
      }),
      /**
       * A sandbox process connected; `stream` names the connection from now on. `kind`: `proxy`
       * (the proxy port, the default), `http` (:80), `tls` (:443) or `dns` (DNS messages, each
       * with a two-byte length in front as on TCP; one UDP query is one such connection).
       */
      open: z.strictObject({ stream: StreamId, kind: z.enum(['proxy', 'http', 'tls', 'dns']).optional() }),
      /** Bytes the sandbox sent on a connection (the event's payload); at most the window unacknowledged. */
      data: z.strictObject({ stream: StreamId }),
      /** The sandbox half-closed a connection. */
      end: z.strictObject({ stream: StreamId }),
      /** A connection is gone on the sandbox's side. */
      close: z.strictObject({ stream: StreamId }),
    },
  },
  'egress.send': { params: EgressSendParams, result: EgressSendResult, access: 'controller', payload: 'request', idempotent: false },
} as const satisfies Record<string, MethodSpec>;
