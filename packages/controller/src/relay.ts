import { CodedError, encodeFrame, frameRequestId, toWireError, WriteBatch } from '@warren/protocol';
import type { WebSocket } from 'ws';

/** Above this many unsent bytes on one side, the relay stops reading the other side. */
export const RELAY_HIGH_WATER_BYTES = 4 * 1024 * 1024;
/** Reading resumes once the unsent bytes fall below this. */
export const RELAY_LOW_WATER_BYTES = 1024 * 1024;

/** Hooks of {@link relay}. */
export interface RelayOptions {
  /** Checks each client frame; a returned frame (an error answer) goes back to the client instead of the frame going on. */
  allowFrame?: ((data: Buffer) => Buffer | undefined) | undefined;
  /** Sees each daemon frame before it goes on to the client unchanged (the call metrics). */
  observeAnswer?: ((data: Buffer) => void) | undefined;
}

/**
 * Passes frames both ways exactly as they are: the daemon validates them, and the controller
 * never re-encodes a payload. Either side closing closes the other, which cancels the calls the
 * daemon was running for this client.
 *
 * Backpressure: when one side cannot take frames as fast as the other sends them, the relay
 * stops reading the sender (`ws.pause()`), so the sender's own send buffer fills and it slows
 * down in turn (the daemon then pauses the process's pipes); the controller holds about the
 * high-water mark per direction at most, whatever a command prints.
 *
 * Small frames passed on during one turn of the event loop leave, after the first, in one write
 * per side ({@link WriteBatch}): a burst of calls on one connection costs the controller two system
 * calls per burst and direction instead of one per frame.
 */
export function relay(client: WebSocket, agent: WebSocket, options: RelayOptions = {}): void {
  const clientBatch = new WriteBatch(client);
  const agentBatch = new WriteBatch(agent);
  const toAgent = throttle(client, agent);
  const toClient = throttle(agent, client);
  client.on('message', (data: Buffer, isBinary: boolean) => {
    const refusal = options.allowFrame?.(data);
    if (refusal) {
      if (client.readyState !== client.OPEN) return;
      clientBatch.add(refusal.length);
      return client.send(refusal, { binary: true });
    }
    agentBatch.add(data.length);
    toAgent(data, isBinary);
  });
  agent.on('message', (data: Buffer, isBinary: boolean) => {
    options.observeAnswer?.(data);
    clientBatch.add(data.length);
    toClient(data, isBinary);
  });
  const closeBoth = () => {
    if (client.readyState !== client.CLOSED) client.close();
    if (agent.readyState !== agent.CLOSED) agent.close();
  };
  client.on('close', closeBoth);
  agent.on('close', closeBoth);
  client.on('error', () => client.terminate());
  agent.on('error', () => agent.terminate());
}

/**
 * Sends to `to`; while `to` has more than the high-water mark unsent, stops reading `from`. Each
 * send's completion (the socket took its bytes) looks at what is still unsent, so reading resumes
 * the moment it falls below the low-water mark, not at the next tick of a timer: a 100 MiB
 * transfer crosses the high-water mark with nearly every large frame.
 */
function throttle(from: WebSocket, to: WebSocket): (data: Buffer, isBinary: boolean) => void {
  let waiting = false;
  const sent = () => {
    if (!waiting || to.bufferedAmount > RELAY_LOW_WATER_BYTES) return;
    waiting = false;
    if (from.readyState === from.OPEN) from.resume();
  };
  return (data, isBinary) => {
    if (to.readyState !== to.OPEN) return;
    to.send(data, { binary: isBinary }, sent);
    if (!waiting && to.bufferedAmount > RELAY_HIGH_WATER_BYTES) {
      waiting = true;
      from.pause();
    }
  };
}

/**
 * The relay's own cap on client frames (the controller's `maxMessageBytes`): a larger frame is
 * answered `FRAME_TOO_LARGE` with its request id (read from the header's start) instead of
 * being passed on; undefined for a frame within the cap.
 */
export function sizeRefusal(data: Buffer, limit: number): Buffer | undefined {
  if (data.length <= limit) return undefined;
  const id = frameRequestId(data) ?? null;
  const error = new CodedError(
    'FRAME_TOO_LARGE',
    `This message is ${data.length} bytes; this controller passes on messages of at most ${limit} bytes (maxMessageBytes). Send less per call: write large content in pieces (files.write does).`,
    id === null ? { limit } : { id, limit },
  );
  return encodeFrame({ type: 'err', id, error: toWireError(error) });
}
