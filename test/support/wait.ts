/**
 * Polls `probe` until it gives a value (anything but `undefined`), then returns it; after
 * `timeoutMs` it fails naming `what`. The one wait of the test tiers: a test waits for a state,
 * never for a fixed time.
 *
 * @example
 * const record = await until('the sandbox to be running', async () => (await sandbox.info()).state === 'running' || undefined);
 */
export async function until<T>(what: string, probe: () => T | undefined | Promise<T | undefined>, timeoutMs = 30_000, everyMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
