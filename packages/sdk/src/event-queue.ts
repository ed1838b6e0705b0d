import type { ParsedEvent } from '@warren/protocol';
import type { Channel } from './channel.js';

/** Output bytes of one stream, and where they start in that stream. */
export interface OutputEvent {
  type: 'stdout' | 'stderr';
  data: Buffer;
  offset: number;
}

/** Above this many queued bytes a stream stops reading its connection; below the low mark it reads again. */
export const QUEUE_HIGH_WATER_BYTES = 4 * 1024 * 1024;
export const QUEUE_LOW_WATER_BYTES = 1024 * 1024;

/**
 * The queue between a connection's event frames and an `AsyncIterable` consumer. It bounds its
 * memory by pausing the connection's reads while it holds more than the high-water mark, so a
 * slow consumer slows the sandbox process instead of filling this process's memory.
 */
export class EventQueue<T> implements AsyncIterableIterator<T> {
  private readonly items: { item: T; bytes: number }[] = [];
  private queuedBytes = 0;
  private paused = false;
  private ended = false;
  private failure: unknown;
  private wake: (() => void) | undefined;

  constructor(
    private readonly connection: Channel,
    /** Called when the consumer stops early (break, return, throw): stop the producing call. */
    private readonly onAbandon: () => void,
  ) {}

  push(item: T, bytes = 0): void {
    if (this.ended) return;
    this.items.push({ item, bytes });
    this.queuedBytes += bytes;
    if (!this.paused && this.queuedBytes > QUEUE_HIGH_WATER_BYTES) {
      this.paused = true;
      this.connection.pauseReading();
    }
    this.notify();
  }

  end(): void {
    this.ended = true;
    this.notify();
  }

  fail(err: unknown): void {
    this.failure ??= err;
    this.ended = true;
    this.notify();
  }

  async next(): Promise<IteratorResult<T>> {
    for (;;) {
      const head = this.items.shift();
      if (head) {
        this.queuedBytes -= head.bytes;
        if (this.paused && this.queuedBytes < QUEUE_LOW_WATER_BYTES) this.unpause();
        return { value: head.item, done: false };
      }
      if (this.failure !== undefined) {
        const err = this.failure;
        this.failure = undefined;
        this.unpause();
        throw err;
      }
      if (this.ended) {
        this.unpause();
        return { value: undefined, done: true };
      }
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }

  async return(): Promise<IteratorResult<T>> {
    if (!this.ended) this.onAbandon();
    this.ended = true;
    this.items.length = 0;
    this.queuedBytes = 0;
    this.unpause();
    return { value: undefined, done: true };
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<T> {
    return this;
  }

  private unpause(): void {
    if (!this.paused) return;
    this.paused = false;
    this.connection.resumeReading();
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }
}

/** A checked output event as an {@link OutputEvent}; other events are ignored. */
export function toOutputEvent(event: ParsedEvent, bytes: Buffer | undefined): OutputEvent | undefined {
  if (event.event !== 'stdout' && event.event !== 'stderr') return undefined;
  return { type: event.event, data: bytes ?? Buffer.alloc(0), offset: event.data.offset };
}

/**
 * Puts a result's output back from the response payload (the protocol's `OutputPayloadLayout`):
 * stdout bytes then stderr bytes, decoded as UTF-8.
 */
export function withOutput<R extends { stdout: string; stderr: string; outputPayload?: { stdout: number; stderr: number } | undefined }>(
  result: R,
  payload: Buffer | undefined,
): R {
  const layout = result.outputPayload;
  if (!layout) return result;
  const bytes = payload ?? Buffer.alloc(0);
  const { outputPayload: _layout, ...rest } = result;
  return {
    ...rest,
    stdout: bytes.subarray(0, layout.stdout).toString('utf8'),
    stderr: bytes.subarray(layout.stdout, layout.stdout + layout.stderr).toString('utf8'),
  } as R;
}
