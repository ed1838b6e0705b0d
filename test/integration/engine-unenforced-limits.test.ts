import { describe, expect, it } from '@jest/globals';
import { startLocalController } from '../support/local-controller.js';

// The local provider's daemons run without cgroups, so it reports limitsEnforced: false, as
// rootless Docker on cgroup v1 does: what the controller does with such an engine.
describe('a controller on an engine that does not enforce limits', () => {
  it('refuses to start with NOT_SUPPORTED unless engine.allowUnenforcedLimits is on', async () => {
    await expect(startLocalController({ engine: { allowUnenforcedLimits: false } })).rejects.toMatchObject({
      code: 'NOT_SUPPORTED',
      message: expect.stringMatching(/without enforcing them.*engine\.allowUnenforcedLimits: true/s),
    });
  });

  it('starts, and says limitsEnforced: false in /readyz, when the operator opted in', async () => {
    await using warren = await startLocalController({ engine: { allowUnenforcedLimits: true } });
    const ready = (await (await fetch(`${warren.url}/readyz`)).json()) as { isolation: { limitsEnforced: boolean } };
    expect(ready.isolation.limitsEnforced).toBe(false);
  });
});
