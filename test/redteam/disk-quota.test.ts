import { statfs } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@warren/sdk';
import { fillWorkspace } from '../support/disk-fill.js';
import { startTestController, type TestController } from '../support/fixtures.js';
import { sandboxCode } from '../support/redteam.js';

/**
 * Sandbox code tries to fill the host's disk through /workspace. Each workspace is a disk of its
 * own (`diskMb`), so the sandbox gets ENOSPC, the file API a typed error, the neighbour keeps
 * writing and the host's free space barely moves.
 */
describe('red team: filling the host disk through the workspace', () => {
  let warren: TestController;

  beforeAll(async () => {
    warren = await startTestController();
  }, 60_000);
  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
  });

  it("stops at the sandbox's own disk: ENOSPC inside, RESOURCE_EXHAUSTED through the file API, the neighbour untouched, the host keeps its space", async () => {
    const ready = (await (await fetch(`${warren.url}/readyz`)).json()) as { isolation: { diskQuota: { quota: boolean; reason?: string } } };
    expect(ready.isolation.diskQuota).toMatchObject({ quota: true });
    await using small = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, diskMb: 32 });
    await using neighbour = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, diskMb: 64 });
    const pid = (await small.daemonInfo()).pid;
    const hostBefore = await statfs(warren.controller.config.stateDir);

    const filled = await fillWorkspace(
      (script) => sandboxCode(small, `cd /workspace && ${script}`).then((r) => ({ exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr })),
      'fill.bin',
      200,
    );
    expect(filled.diskFull).toBe(true);
    expect(filled.bytesWritten).toBeLessThanOrEqual(32 * 1024 * 1024);
    await expect(small.files.write('more.bin', Buffer.alloc(4 * 1024 * 1024))).rejects.toMatchObject({ code: 'RESOURCE_EXHAUSTED' });
    expect((await small.daemonInfo()).pid).toBe(pid);

    const next = await fillWorkspace(
      (script) => sandboxCode(neighbour, `cd /workspace && ${script}`).then((r) => ({ exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr })),
      'eight.bin',
      8,
    );
    expect(next).toMatchObject({ exitCode: 0, bytesWritten: 8 * 1024 * 1024 });

    const hostAfter = await statfs(warren.controller.config.stateDir);
    const hostUsed = (hostBefore.bfree - hostAfter.bfree) * hostBefore.bsize;
    expect(hostUsed).toBeLessThan(64 * 1024 * 1024);
  });

  it('refuses a diskMb above the operator maximum, naming it', async () => {
    await expect(Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, diskMb: 10_000_000 })).rejects.toMatchObject({
      code: 'INVALID_PARAMS',
      message: expect.stringContaining('diskMb'),
    });
  });
});
