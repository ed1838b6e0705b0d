/**
 * Runs at most `size` tasks at once; the others wait their turn, first come first served.
 *
 * @example
 * const slots = new Slots(4);
 * await slots.run(() => provider.start(handle, agentId, secret));
 */
export class Slots {
  private free: number;
  private readonly waiting: (() => void)[] = [];

  constructor(size: number) {
    this.free = size;
  }

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await task();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    }
  }
}
