import { CODED_ERRORS, CodedError, WireClient, WS_MAX_PAYLOAD_BYTES, type MethodName, type ParamsIn, type Result } from '@warren/protocol';
import { wsSocket } from '@warren/protocol/node';
import { lstatSync, type Stats } from 'node:fs';
import type { Duplex } from 'node:stream';
import { WebSocket } from 'ws';
import type { DaemonEndpoint } from './provider.js';

/** A connection failure as a client may see it: the kind of failure, no host path or host text. */
function unreachable(code: string | undefined): CodedError {
  const why =
    code === 'ENOENT'
      ? 'it is not listening yet'
      : code === 'ECONNREFUSED'
        ? 'it refused the connection'
        : code === 'ETIMEDOUT'
          ? 'it did not answer in time'
          : 'the connection failed';
  return new CodedError(
    'SANDBOX_NOT_READY',
    `The sandbox daemon is not reachable: ${why}. Retry shortly; if it persists, look at the sandbox's state.`,
    code ? { cause: code } : undefined,
  );
}

/**
 * Opens a WebSocket to a sandbox's daemon, presenting the session secret: over its unix socket,
 * or over the stream the provider opens to it. Resolves once open; frames are not touched, so the
 * caller can relay them as they are.
 *
 * A socket's folder belongs to the daemon, so the path's last step is checked with `lstat` first:
 * a link or any other kind of file there is refused rather than followed to a host socket.
 * Failures never name the host path or the host's error text.
 */
export function openAgentSocket(endpoint: DaemonEndpoint, secret: string, timeoutMs = 5000, headers: Record<string, string> = {}): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    let url: string;
    let createConnection: ((options: unknown, onCreate: (err: Error | null, stream?: Duplex) => void) => undefined) | undefined;
    if ('socketPath' in endpoint) {
      let kind: Stats;
      try {
        kind = lstatSync(endpoint.socketPath);
      } catch (err) {
        reject(unreachable((err as NodeJS.ErrnoException).code));
        return;
      }
      if (!kind.isSocket()) {
        reject(
          new CodedError(
            'SANDBOX_NOT_READY',
            "The sandbox daemon's socket is not a socket; the controller does not connect to it. Kill the sandbox and create a new one.",
          ),
        );
        return;
      }
      url = `ws+unix://${endpoint.socketPath}:/`;
    } else {
      url = 'ws://warren-daemon/';
      // http.request takes a stream from createConnection through its callback, once it is open.
      createConnection = (_options, onCreate) => {
        endpoint.openStream().then(
          (stream) => onCreate(null, stream),
          (err: unknown) => onCreate(err instanceof Error ? err : new Error(String(err))),
        );
        return undefined;
      };
    }
    const ws = new WebSocket(url, {
      headers: { ...headers, authorization: `Bearer ${secret}` },
      maxPayload: WS_MAX_PAYLOAD_BYTES,
      handshakeTimeout: timeoutMs,
      perMessageDeflate: false,
      // Masking guards browsers' frames against proxies; on this private channel it guards
      // nothing, and a zero mask lets ws send each payload without copying and masking it.
      generateMask: (mask: Buffer) => void mask.fill(0),
      ...(createConnection ? { createConnection: createConnection as never } : {}),
    });
    // A stream through the engine has no socket timeout for handshakeTimeout to use: time it here.
    const timer = setTimeout(() => fail(unreachable('ETIMEDOUT')), timeoutMs);
    const fail = (err: Error) => {
      clearTimeout(timer);
      ws.removeAllListeners();
      ws.on('error', () => undefined);
      ws.terminate();
      reject(err instanceof CodedError ? err : unreachable((err as NodeJS.ErrnoException).code));
    };
    ws.once('open', () => {
      clearTimeout(timer);
      ws.removeListener('error', fail);
      resolve(ws);
    });
    ws.once('error', fail);
    ws.once('unexpected-response', (_req, res) =>
      fail(new CodedError('UPSTREAM_UNAVAILABLE', `The sandbox daemon refused the connection (HTTP ${res.statusCode}).`)),
    );
  });
}

/**
 * A real call to the daemon: hello, then `system.info`. The controller calls a sandbox ready only
 * when this answers, not when its container has started.
 */
export function probeAgent(endpoint: DaemonEndpoint, secret: string, timeoutMs = 5000, headers: Record<string, string> = {}): Promise<Result<'system.info'>> {
  return callAgent(endpoint, secret, 'system.info', {}, timeoutMs, headers);
}

/**
 * One call to a daemon over a connection of its own (hello, the call, close), for the
 * controller's own needs: the readiness probe and the audit route.
 *
 * @example
 * const { entries } = await callAgent({ socketPath }, secret, 'audit.list', { limit: 100 });
 */
export async function callAgent<M extends MethodName>(
  endpoint: DaemonEndpoint,
  secret: string,
  method: M,
  params: ParamsIn<M>,
  timeoutMs = 5000,
  headers: Record<string, string> = {},
): Promise<Result<M>> {
  const deadline = Date.now() + timeoutMs;
  const ws = await openAgentSocket(endpoint, secret, timeoutMs, headers);
  const closed = () => new CodedError('SANDBOX_NOT_READY', `The sandbox daemon closed the connection during ${method}.`);
  const late = () => new CodedError('SANDBOX_NOT_READY', `The sandbox daemon did not answer ${method} within ${timeoutMs} ms.`);
  try {
    const client = await WireClient.connect(wsSocket(ws, { batch: false }), {
      client: 'warren-controller',
      handshakeTimeoutMs: Math.max(1, deadline - Date.now()),
      errors: {
        fromWire: CODED_ERRORS.fromWire,
        local: (code, message, options) => (code === 'REQUEST_TIMEOUT' ? late() : CODED_ERRORS.local(code, message, options)),
      },
      checkParams: false,
      peerClosedError: closed,
      handshakeClosedError: closed,
      handshakeTimeoutError: late,
    });
    const { result } = await client.call(method, params, { timeoutMs: Math.max(1, deadline - Date.now()) });
    return result;
  } finally {
    ws.close();
  }
}
