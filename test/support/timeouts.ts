import { jest } from '@jest/globals';

// Hang guards, not performance assertions: e2e tests start real containers on a 2-core machine.
jest.setTimeout(Number(process.env.WARREN_TEST_TIMEOUT_MS ?? 120_000));
