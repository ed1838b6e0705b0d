/** Percentiles of a sample, in the sample's unit. */
export interface Summary {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  mean: number;
}

export function summarize(samples: number[]): Summary {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? NaN;
  const mean = sorted.reduce((a, b) => a + b, 0) / Math.max(1, sorted.length);
  return { n: sorted.length, p50: at(0.5), p90: at(0.9), p99: at(0.99), mean };
}

/** Runs `fn` `warmup` times unmeasured, then `n` times measured, one after another; milliseconds. */
export async function timeIt(n: number, fn: (i: number) => Promise<unknown>, warmup = Math.min(5, n)): Promise<number[]> {
  for (let i = 0; i < warmup; i++) await fn(i);
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const start = performance.now();
    await fn(i);
    samples.push(performance.now() - start);
  }
  return samples;
}
