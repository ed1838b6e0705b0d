import { EventEmitter } from 'node:events';
import type { WebSocket } from 'ws';
import { encodeFrame, parseParams, PROTOCOL_MINOR, PROTOCOL_VERSION, type FrameHeader, type MethodName } from '@warren/protocol';
import { serveConnection } from './connection.js';
import type { Handlers } from './dispatch.js';

/** Calls the warm-up serves in full: they read and change nothing. */
const SERVED: ReadonlyArray<{ method: MethodName; params: Record<string, unknown> }> = [
  { method: 'fs.stat', params: { path: '.' } },
  { method: 'system.info', params: {} },
];

/** Methods whose params the warm-up only checks (running them would do something). */
const CHECKED: ReadonlyArray<{ method: MethodName; params: Record<string, unknown> }> = [
  { method: 'process.exec', params: { cmd: 'true' } },
  { method: 'fs.read', params: { path: 'a' } },
  { method: 'fs.write', params: { path: 'a' } },
  { method: 'fs.list', params: { path: '.' } },
];

/**
 * Runs the daemon's call path once before a client needs it: a hello, then a few calls that read
 * and change nothing (`fs.stat` of the workspace root, `system.info`) through the same connection
 * code as a client's, over an in-memory socket, unaudited; and the params check of the commonest
 * methods that do something (exec, read, write, list). V8 compiles each function, and zod each
 * schema's checker, the first time it runs: on a new daemon that is about ten milliseconds of CPU,
 * paid by the sandbox's first calls (a burst of first calls over many new sandboxes waited on it).
 * The daemon runs this once its socket listens, while the controller is still setting the sandbox
 * up, one step per turn of the event loop so that a connection arriving meanwhile (the readiness
 * probe) waits for one step at most. Answers are dropped; nothing it does can fail the daemon.
 *
 * @example
 * await warmUp(handlers);
 */
export async function warmUp(handlers: Handlers): Promise<void> {
  const socket = new MemorySocket();
  serveConnection(socket as unknown as WebSocket, handlers, { idle: { activity: () => undefined } as never });
  try {
    socket.deliver({ type: 'hello', protocolVersion: PROTOCOL_VERSION, protocolMinor: PROTOCOL_MINOR, client: 'warren-agent warm-up' });
    let id = 0;
    for (const { method, params } of SERVED) {
      await nextTurn();
      const answered = socket.answer(++id);
      socket.deliver({ type: 'req', id, method, params });
      await answered;
    }
    for (const { method, params } of CHECKED) {
      await nextTurn();
      parseParams(method, params);
    }
  } catch {
    // A warm-up that fails leaves the compiling to the first calls, as without it.
  } finally {
    socket.end();
  }
}

/** Lets the event loop serve what arrived meanwhile (the controller's readiness probe) between two steps. */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** The little of a `ws` WebSocket that `serveConnection` uses, in memory. */
class MemorySocket extends EventEmitter {
  readonly OPEN = 1;
  readyState = 1;
  bufferedAmount = 0;
  private readonly waiting = new Map<number, () => void>();

  deliver(header: FrameHeader): void {
    this.emit('message', encodeFrame(header), true);
  }

  /** Resolves when the final answer to request `id` is sent. */
  answer(id: number): Promise<void> {
    return new Promise((resolve) => this.waiting.set(id, resolve));
  }

  send(frame: Buffer): void {
    // `{"type":"res","id":N`, `{"type":"err","id":N` or an event: the warm-up's own frames, read without a parse.
    const match = /^\{"type":"(res|err|evt)","id":(\d+)/.exec(frame.subarray(4, 64).toString('latin1'));
    if (!match) return;
    const id = Number(match[2]);
    // The only event these calls can send is an approval request (a policy that asks before reads): denied.
    if (match[1] === 'evt') return this.deliver({ type: 'approval', id, allow: false });
    this.waiting.get(id)?.();
    this.waiting.delete(id);
  }

  close(): void {
    this.end();
  }

  terminate(): void {
    this.end();
  }

  end(): void {
    if (this.readyState !== this.OPEN) return;
    this.readyState = 3;
    for (const resolve of this.waiting.values()) resolve();
    this.waiting.clear();
    this.emit('close');
  }
}
