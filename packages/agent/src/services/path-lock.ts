/**
 * One read-modify-write at a time per file. Edits (and conditional writes) read a file, decide,
 * then replace it; two of them on one file in the same daemon must not both read the old content,
 * or one acknowledged change is lost. Each waits for the one before it on the same real path, and
 * re-checks its own precondition once it holds the lock. Keys are the paths the policy resolved,
 * so two spellings of one file share a lock.
 *
 * @example
 * await withPathLock(target.absolute, async () => { read; check; atomicWrite(...) });
 */
const tails = new Map<string, Promise<void>>();

export async function withPathLock<T>(key: string, task: () => Promise<T>): Promise<T> {
  const before = tails.get(key);
  let release!: () => void;
  const mine = new Promise<void>((resolve) => (release = resolve));
  const tail = before ? before.then(() => mine) : mine;
  tails.set(key, tail);
  if (before) await before;
  try {
    return await task();
  } finally {
    release();
    if (tails.get(key) === tail) tails.delete(key);
  }
}
