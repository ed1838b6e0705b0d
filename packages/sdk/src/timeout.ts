import { makeError } from './errors.js';

/** The shortest sandbox timeout {@link sandboxTimeoutSeconds} takes: one second, in milliseconds. */
export const MIN_SANDBOX_TIMEOUT_MS = 1000;

/**
 * The controller's `ttlSeconds` for a sandbox timeout given in milliseconds, as E2B's
 * `sandbox.setTimeout(timeoutMs)` takes it: rounded up to whole seconds, as E2B rounds it. A value
 * under one second is refused rather than rounded, because it is nearly always a number of
 * seconds written for this SDK's earlier `setTimeout(ttlSeconds)`: `setTimeout(600)` would end
 * the sandbox in one second instead of ten minutes.
 *
 * @example
 * sandboxTimeoutSeconds(300_000); // 300
 * sandboxTimeoutSeconds(1500); // 2
 */
export function sandboxTimeoutSeconds(timeoutMs: number): number {
  if (typeof timeoutMs !== 'number' || !Number.isFinite(timeoutMs) || timeoutMs < MIN_SANDBOX_TIMEOUT_MS) {
    throw makeError(
      'INVALID_PARAMS',
      `setTimeout takes milliseconds, as E2B's SDK does, and at least ${MIN_SANDBOX_TIMEOUT_MS}; got ${String(timeoutMs)}. ` +
        `For ten minutes pass 600_000 (seconds times 1000).`,
    );
  }
  return Math.ceil(timeoutMs / 1000);
}
