import { describe } from '@jest/globals';
import { providerContract } from '../../../test/support/provider-contract.js';
import { FakeProvider } from './fakes.js';

describe('the fake provider keeps the provider contract', () => {
  const provider = new FakeProvider();
  let n = 0;
  providerContract(() => ({
    provider,
    spec: () => ({ agentId: `a${++n}`, image: 'any', env: {}, labels: { 'warren.sandbox': `a${n}` }, settings: {} as never, daemonSecret: 's'.repeat(32) }),
    stopFromOutside: async (handle) => provider.die(handle),
  }));
});
