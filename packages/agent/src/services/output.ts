/**
 * Keeps a stream's head and tail within a byte cap and counts everything, so a flood of output
 * costs bounded memory and the caller still sees how it began and how it ended.
 */
export class CappedOutput {
  private readonly head: Buffer[] = [];
  private headBytes = 0;
  private tail: Buffer[] = [];
  private tailBytes = 0;
  /** Every byte the stream produced, kept or not. */
  total = 0;

  constructor(private readonly capBytes: number) {}

  push(chunk: Buffer): void {
    this.total += chunk.length;
    const headRoom = Math.ceil(this.capBytes / 2) - this.headBytes;
    if (headRoom > 0) {
      const taken = chunk.subarray(0, headRoom);
      this.head.push(taken);
      this.headBytes += taken.length;
      chunk = chunk.subarray(taken.length);
      if (chunk.length === 0) return;
    }
    this.tail.push(chunk);
    this.tailBytes += chunk.length;
    const tailCap = Math.floor(this.capBytes / 2);
    while (this.tailBytes - (this.tail[0]?.length ?? 0) >= tailCap) this.tailBytes -= this.tail.shift()!.length;
  }

  /** Counts bytes the producer dropped before they reached here (they are part of the middle that is left out). */
  omit(bytes: number): void {
    this.total += bytes;
  }

  get truncated(): boolean {
    return this.total > this.capBytes;
  }

  /** The kept bytes, with a marker line where bytes were dropped. */
  bytes(): Buffer {
    const head = Buffer.concat(this.head);
    let tail = Buffer.concat(this.tail);
    const dropped = this.total - head.length - Math.min(tail.length, Math.floor(this.capBytes / 2));
    if (dropped <= 0) return Buffer.concat([head, tail]);
    tail = tail.subarray(tail.length - Math.floor(this.capBytes / 2));
    return Buffer.concat([head, Buffer.from(`\n[... ${dropped} bytes omitted ...]\n`), tail]);
  }

  /** The kept bytes as text, with a marker where bytes were dropped. */
  text(): string {
    return this.bytes().toString('utf8');
  }
}

/** A run of bytes of one stream, and where it starts in that stream. */
export interface OffsetChunk {
  offset: number;
  data: Buffer;
}

/**
 * The last `capacityBytes` of a stream, addressed by byte offset from the stream's start, so a
 * reader that reconnects can ask for everything after the offset it last saw. Memory stays
 * within the capacity plus one chunk whatever the stream's length.
 */
export class RingOutput {
  private chunks: OffsetChunk[] = [];
  private bufferedBytes = 0;
  /** The offset one past the last byte written: the stream's total length. */
  end = 0;
  private readonly waiters = new Set<() => void>();
  private closed = false;

  constructor(private readonly capacityBytes: number) {}

  /** The offset of the oldest byte still held. */
  get start(): number {
    return this.end - this.bufferedBytes;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  push(data: Buffer): void {
    if (data.length === 0) return;
    this.chunks.push({ offset: this.end, data });
    this.end += data.length;
    this.bufferedBytes += data.length;
    while (this.bufferedBytes > this.capacityBytes) {
      const first = this.chunks[0]!;
      const excess = this.bufferedBytes - this.capacityBytes;
      if (first.data.length <= excess) {
        this.chunks.shift();
        this.bufferedBytes -= first.data.length;
      } else {
        this.chunks[0] = { offset: first.offset + excess, data: first.data.subarray(excess) };
        this.bufferedBytes -= excess;
      }
    }
    this.wake();
  }

  /** Marks the stream ended: readers waiting for more are woken and find nothing. */
  close(): void {
    this.closed = true;
    this.wake();
  }

  /**
   * The held bytes from `offset` on, at most `maxBytes` of them. An offset older than the oldest
   * held byte reads from the oldest held byte: the returned chunk's offset shows the gap.
   */
  read(offset: number, maxBytes = 1024 * 1024): OffsetChunk | undefined {
    const from = Math.max(offset, this.start);
    if (from >= this.end) return undefined;
    const parts: Buffer[] = [];
    let size = 0;
    for (const chunk of this.chunks) {
      const chunkEnd = chunk.offset + chunk.data.length;
      if (chunkEnd <= from) continue;
      const part = chunk.data.subarray(Math.max(0, from - chunk.offset));
      parts.push(part);
      size += part.length;
      if (size >= maxBytes) break;
    }
    const data = Buffer.concat(parts);
    return { offset: from, data: data.length > maxBytes ? data.subarray(0, maxBytes) : data };
  }

  /** Resolves when bytes past `offset` exist or the stream closed (or the signal aborts). */
  async waitBeyond(offset: number, signal?: AbortSignal): Promise<void> {
    if (this.end > offset || this.closed || signal?.aborted) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        this.waiters.delete(done);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      this.waiters.add(done);
      signal?.addEventListener('abort', done, { once: true });
    });
  }

  private wake(): void {
    for (const waiter of [...this.waiters]) waiter();
  }
}

/**
 * Moves a result's output into the response payload (see the protocol's `OutputPayloadLayout`):
 * output is bytes, and escaping it into the size-limited JSON header would not fit.
 */
export function outputAsPayload<R extends { stdout: string; stderr: string }>(
  result: R,
  stdout: CappedOutput,
  stderr: CappedOutput,
): { result: R & { outputPayload: { stdout: number; stderr: number } }; payload: Buffer } {
  const out = stdout.bytes();
  const err = stderr.bytes();
  return { result: { ...result, stdout: '', stderr: '', outputPayload: { stdout: out.length, stderr: err.length } }, payload: Buffer.concat([out, err]) };
}
