import { CodedError } from '@warren/protocol';

/** How long a task may wait for a slot, and how many may wait at once. */
export interface WaitLimits {
  /** Tasks waiting beyond this are refused at once. */
  maxWaiting: number;
  /** A task that waited this long is refused. */
  timeoutMs: number;
  /** What the refusal says (it names the limit and when to retry). */
  refuse: (why: 'queue-full' | 'timeout') => CodedError;
}

/**
 * Runs at most `size` tasks at once; the others wait their turn, first come first served. With
 * {@link WaitLimits}, the wait is bounded in length and in time, and past either the task is
 * refused with the caller's error instead of queueing forever.
 *
 * @example
 * const slots = new Slots(4);
 * await slots.run(() => provider.start(handle, agentId, secret));
 */
export class Slots {
  private free: number;
  private readonly waiting: { go: () => void }[] = [];

  constructor(private readonly size: number) {
    this.free = size;
  }

  /** Tasks running now. */
  get busy(): number {
    return this.size - this.free;
  }

  /** Tasks waiting for a slot now. */
  get queued(): number {
    return this.waiting.length;
  }

  async run<T>(task: () => Promise<T>, limits?: WaitLimits): Promise<T> {
    if (this.free > 0) this.free--;
    else await this.wait(limits);
    try {
      return await task();
    } finally {
      const next = this.waiting.shift();
      if (next) next.go();
      else this.free++;
    }
  }

  private wait(limits: WaitLimits | undefined): Promise<void> {
    if (limits && this.waiting.length >= limits.maxWaiting) return Promise.reject(limits.refuse('queue-full'));
    return new Promise<void>((resolve, reject) => {
      const entry = {
        go: () => {
          clearTimeout(timer);
          resolve();
        },
      };
      const timer = limits
        ? setTimeout(() => {
            this.waiting.splice(this.waiting.indexOf(entry), 1);
            reject(limits.refuse('timeout'));
          }, limits.timeoutMs)
        : undefined;
      timer?.unref();
      this.waiting.push(entry);
    });
  }
}
