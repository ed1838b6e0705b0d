import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Sandbox } from '@e2b/code-interpreter';
import { startTestController, tenantCredentials, type TestController } from '../support/fixtures.js';

/**
 * A stranger at `@e2b/code-interpreter`'s door (port 49999, `/execute` and `/contexts`), which
 * runs code: without the sandbox's token, with another sandbox's token, or with another tenant's
 * API key, nothing runs and nothing is listed, and an existing id answers as an unknown one does.
 */
describe("red team: the code interpreter's door runs code only for the sandbox's own callers", () => {
  let warren: TestController;
  let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
  let sandbox: Sandbox;
  let other: Sandbox;
  const strangerKey = `wk_test_${randomBytes(16).toString('hex')}`;
  const unknown = `nosuch${randomBytes(9).toString('hex')}`;

  beforeAll(async () => {
    const apiKey = `wk_test_${randomBytes(16).toString('hex')}`;
    // The stranger holds a member key of another tenant (an admin key would see every tenant's sandboxes).
    const credentials = await tenantCredentials(apiKey, []);
    await credentials.keys.add(strangerKey, { tenant: 'stranger', role: 'member' });
    // The remap engine is not given warren/e2b-base (as in e2b-existence.test.ts): the sandbox image has the same kernel.
    const remapped = process.env.WARREN_TEST_ENGINE === 'userns-remap';
    const template = { home: '/workspace', create: { image: 'warren/sandbox:latest' } };
    warren = await startTestController({ credentials, ...(remapped && { config: { e2bTemplates: { 'code-interpreter-v1': template } } }) });
    opts = { apiKey, apiUrl: `${warren.url}/e2b`, sandboxUrl: `${warren.url}/e2b` };
    sandbox = await Sandbox.create(opts);
    other = await Sandbox.create(opts);
    await sandbox.runCode('1');
  }, 120_000);
  afterAll(async () => {
    await sandbox?.kill().catch(() => undefined);
    await other?.kill().catch(() => undefined);
    await warren?.[Symbol.asyncDispose]();
  }, 60_000);

  /** One request to the door for sandbox `id`, with the given credential headers. */
  const call = async (id: string, route: string, method: string, headers: Record<string, string>, body?: unknown) => {
    const res = await fetch(`${warren.url}/e2b${route}`, {
      method,
      headers: { 'e2b-sandbox-id': id, 'e2b-sandbox-port': '49999', 'content-type': 'application/json', ...headers },
      ...(body !== undefined && { body: JSON.stringify(body) }),
    });
    return { status: res.status, body: (await res.text()).replaceAll(id, '<id>') };
  };
  const tokenOf = (s: Sandbox) => (s as unknown as { envdAccessToken: string }).envdAccessToken;

  it('refuses /execute and /contexts without a credential, with a wrong or foreign token, and with another tenant’s key', async () => {
    // Relative to the kernel's working folder, the template's home.
    const marker = `pwned-${randomBytes(4).toString('hex')}`;
    const attempts: Record<string, string>[] = [
      {},
      { 'x-access-token': 'not-a-token' },
      { 'e2b-traffic-access-token': tokenOf(other) },
      { 'x-access-token': tokenOf(other) },
      { 'x-access-token': strangerKey },
      { 'e2b-traffic-access-token': strangerKey },
    ];
    for (const headers of attempts) {
      const execute = await call(sandbox.sandboxId, '/execute', 'POST', headers, { code: `open(${JSON.stringify(marker)}, "w").close()` });
      expect(execute.status).not.toBe(200);
      expect(execute).toEqual(await call(unknown, '/execute', 'POST', headers, { code: '1' }));
      const contexts = await call(sandbox.sandboxId, '/contexts', 'GET', headers);
      expect(contexts.status).not.toBe(200);
      expect(contexts).toEqual(await call(unknown, '/contexts', 'GET', headers));
      const created = await call(sandbox.sandboxId, '/contexts', 'POST', headers, { language: 'python' });
      expect(created.status).not.toBe(200);
    }
    // Nothing ran: the owner's own call sees no marker file, and its token still works.
    expect((await sandbox.runCode(`import os; os.path.exists(${JSON.stringify(marker)})`)).text).toBe('False');
    expect((await call(sandbox.sandboxId, '/contexts', 'GET', { 'x-access-token': tokenOf(sandbox) })).status).toBe(200);
    expect((await call(sandbox.sandboxId, '/contexts', 'GET', { 'x-access-token': opts.apiKey })).status).toBe(200);
  }, 120_000);
});
