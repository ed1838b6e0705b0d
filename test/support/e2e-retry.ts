import { jest } from '@jest/globals';

// End-to-end tests share one Docker engine and a 2-core machine with everything else. A test that
// fails once is run once more, and its first failure is printed; scripts/test then names every
// test that passed only on its retry, so a flaky test is reported, never hidden.
jest.retryTimes(Number(process.env.WARREN_E2E_RETRIES ?? 1), { logErrorsBeforeRetry: true });
