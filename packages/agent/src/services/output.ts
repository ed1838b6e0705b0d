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

  get truncated(): boolean {
    return this.total > this.capBytes;
  }

  /** The kept bytes as text, with a marker where bytes were dropped. */
  text(): string {
    const head = Buffer.concat(this.head);
    let tail = Buffer.concat(this.tail);
    const dropped = this.total - head.length - Math.min(tail.length, Math.floor(this.capBytes / 2));
    if (dropped <= 0) return Buffer.concat([head, tail]).toString('utf8');
    tail = tail.subarray(tail.length - Math.floor(this.capBytes / 2));
    return `${head.toString('utf8')}\n[... ${dropped} bytes omitted ...]\n${tail.toString('utf8')}`;
  }
}
