import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { METHODS } from '@warren/protocol';
import { Sandbox as E2bSandbox } from 'e2b';
import { RestClient, Sandbox } from '@warren/sdk';
import WebSocket from 'ws';
import { ROUTES } from '../../../packages/controller/src/routes/table.js';
import { startLocalController, type LocalController } from '../../support/local-controller.js';

/** An id of the same shape as a sandbox's that names none. */
const NOWHERE = 'zzzzzzzzzzzzzzzzzzzzzz';

/**
 * A key is a boundary: tenant B's key (and B's tokens) against tenant A's objects, on every door
 * the controller has. Each answer must be exactly the answer for an id that does not exist, so a
 * door added later without the ownership check fails here: REST routes come from the route table
 * itself, WebSocket methods from the protocol registry.
 */
describe('tenants: every door answers another tenant exactly as nothing', () => {
  let warren: LocalController;
  let keyA: string;
  let keyB: string;
  let sandboxA: Sandbox;

  const call = async (method: string, route: string, headers: Record<string, string>, body?: unknown) => {
    const res = await fetch(`${warren.url}${route}`, {
      method,
      headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, body: text };
  };
  const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
  const makeKey = async (body: Record<string, unknown>, admin = warren.apiKey) => {
    const made = await call('POST', '/v1/keys', bearer(admin), body);
    expect(made.status).toBe(201);
    return JSON.parse(made.body) as { key: string; id: string; tenant: string };
  };
  /** An answer with the sandbox id it names replaced, so A's and a missing one compare as wholes. */
  const same = (answer: { status: number; body: string }, id: string) => ({ status: answer.status, body: answer.body.replaceAll(id, '<id>') });

  beforeAll(async () => {
    warren = await startLocalController();
    keyA = (await makeKey({ tenant: 'acme', role: 'member' })).key;
    keyB = (await makeKey({ tenant: 'bravo', role: 'member' })).key;
    sandboxA = await Sandbox.create({ baseUrl: warren.url, apiKey: keyA, policy: { root: warren.root, readOnly: false } });
  }, 60_000);
  afterAll(async () => {
    sandboxA?.close();
    await warren?.[Symbol.asyncDispose]();
  });

  it("every REST route that names a sandbox answers B's key on A's sandbox as on one that does not exist", async () => {
    const routes = ROUTES.filter((r) => r.path.includes('{id}'));
    expect(routes.length).toBeGreaterThan(15);
    for (const route of routes) {
      const path = (id: string) => route.path.replace('{id}', id).replace('{port}', '8080');
      const body = route.method === 'GET' || route.method === 'DELETE' ? undefined : {};
      const onA = same(await call(route.method, path(sandboxA.id), bearer(keyB), body), sandboxA.id);
      const onNothing = same(await call(route.method, path(NOWHERE), bearer(keyB), body), NOWHERE);
      expect({ route: `${route.method} ${route.path}`, ...onA }).toEqual({ route: `${route.method} ${route.path}`, ...onNothing });
      expect(onA.status).toBe(404);
    }
    // A's own key still reaches it, so the 404s above are the boundary, not a broken route.
    expect((await call('GET', `/v1/sandboxes/${sandboxA.id}`, bearer(keyA))).status).toBe(200);
  });

  it("B's list and the E2B gateway's list hold none of A's sandboxes; an admin's list does", async () => {
    const list = JSON.parse((await call('GET', '/v1/sandboxes', bearer(keyB))).body) as { sandboxes: { id: string }[] };
    expect(list.sandboxes.map((s) => s.id)).not.toContain(sandboxA.id);
    const e2b = JSON.parse((await call('GET', '/e2b/v2/sandboxes', { 'x-api-key': keyB })).body) as { sandboxID: string }[];
    expect(e2b.map((s) => s.sandboxID)).not.toContain(sandboxA.id);
    const admin = JSON.parse((await call('GET', '/v1/sandboxes', bearer(warren.apiKey))).body) as { sandboxes: { id: string }[] };
    expect(admin.sandboxes.map((s) => s.id)).toContain(sandboxA.id);
  });

  it('the WebSocket, every protocol method, the port proxy, the E2B control plane and envd answer B as for nothing', async () => {
    const upgrade = (id: string) =>
      new Promise<number>((resolve) => {
        const ws = new WebSocket(`${warren.url.replace('http', 'ws')}/v1/sandboxes/${id}/ws`, { headers: bearer(keyB) });
        ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
        ws.on('open', () => {
          ws.close();
          resolve(101);
        });
        ws.on('error', () => resolve(-1));
      });
    expect(await upgrade(sandboxA.id)).toBe(await upgrade(NOWHERE));
    expect(await upgrade(sandboxA.id)).toBe(404);
    // Every protocol method rides that one connection, so none of them reaches A's daemon over B's key.
    expect(Object.keys(METHODS).length).toBeGreaterThan(30);
    await expect(Sandbox.connect(sandboxA.id, { baseUrl: warren.url, token: keyB })).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND' });
    const port = (id: string) => call('GET', `/v1/sandboxes/${id}/ports/8080/`, bearer(keyB));
    expect(same(await port(sandboxA.id), sandboxA.id)).toEqual(same(await port(NOWHERE), NOWHERE));
    const plane = (id: string) => call('GET', `/e2b/sandboxes/${id}`, { 'x-api-key': keyB });
    expect(same(await plane(sandboxA.id), sandboxA.id)).toEqual(same(await plane(NOWHERE), NOWHERE));
    // A's log (its calls and its commands' output) is as absent to B as a sandbox that never was.
    for (const logs of ['/e2b/v2/sandboxes/%s/logs', '/e2b/sandboxes/%s/logs']) {
      const read = (id: string) => call('GET', logs.replace('%s', id), { 'x-api-key': keyB });
      expect(same(await read(sandboxA.id), sandboxA.id)).toEqual(same(await read(NOWHERE), NOWHERE));
      expect((await read(sandboxA.id)).status).toBe(404);
    }
    const envd = (id: string) => call('GET', `/e2b/files?path=/etc/hostname`, { 'x-access-token': keyB, 'e2b-sandbox-id': id });
    expect(same(await envd(sandboxA.id), sandboxA.id)).toEqual(same(await envd(NOWHERE), NOWHERE));
    const health = (id: string) => call('GET', `/e2b/health`, { 'x-access-token': keyB, 'e2b-sandbox-id': id });
    expect(same(await health(sandboxA.id), sandboxA.id)).toEqual(same(await health(NOWHERE), NOWHERE));
  });

  it("A's sandbox token and tokens derived from it reach A's sandbox only, never B's", async () => {
    const sandboxB = await Sandbox.create({ baseUrl: warren.url, apiKey: keyB, policy: { root: warren.root, readOnly: false } });
    try {
      const derived = (await sandboxA.deriveToken({ inherit: true })).token;
      for (const token of [sandboxA.token, derived]) expect((await call('GET', `/v1/sandboxes/${sandboxB.id}`, bearer(token))).status).toBe(401);
    } finally {
      sandboxB.close();
    }
  });

  it('a member key manages no keys and raises no limits; tenant names are plain lowercase ASCII', async () => {
    expect((await call('POST', '/v1/keys', bearer(keyA), { tenant: 'acme', role: 'admin' })).status).toBe(403);
    expect((await call('GET', '/v1/keys', bearer(keyA))).status).toBe(403);
    expect((await call('POST', '/v1/tenants/acme/limits', bearer(keyA), { maxSandboxes: 1000 })).status).toBe(403);
    expect((await call('GET', '/v1/tenant?tenant=bravo', bearer(keyA))).status).toBe(403);
    expect((await call('GET', '/metrics', bearer(keyA))).status).toBe(403);
    for (const tenant of ['../acme', 'acme/x', 'Acme', 'аcme', 'acme\u200b', '', 'a'.repeat(64)]) {
      const made = await call('POST', '/v1/keys', bearer(warren.apiKey), { tenant, role: 'member' });
      expect({ tenant, status: made.status }).toEqual({ tenant, status: 400 });
    }
  });

  it('an expired key, a revoked key (its open WebSocket closed at once) and a token derived before the revocation are all refused', async () => {
    const shortLived = await makeKey({ tenant: 'acme', role: 'member', expiresInSeconds: 1 });
    expect((await call('GET', '/v1/sandboxes', bearer(shortLived.key))).status).toBe(200);
    await new Promise((r) => setTimeout(r, 1100));
    expect((await call('GET', '/v1/sandboxes', bearer(shortLived.key))).status).toBe(401);

    const doomed = await makeKey({ tenant: 'acme', role: 'member' });
    const handle = await Sandbox.connect(sandboxA.id, { baseUrl: warren.url, token: doomed.key });
    const derived = (await handle.deriveToken({ inherit: true, allowExec: true })).token;
    expect((await handle.commands.run('echo alive')).stdout).toBe('alive\n');
    const started = Date.now();
    expect((await call('DELETE', `/v1/keys/${doomed.id}`, bearer(warren.apiKey))).status).toBe(200);
    const outcome = await handle.commands.run('echo again').then(
      () => 'ran',
      (err: { code?: string }) => err.code ?? 'failed',
    );
    expect(outcome).not.toBe('ran');
    expect(Date.now() - started).toBeLessThan(1000);
    handle.close();
    expect((await call('GET', '/v1/sandboxes', bearer(doomed.key))).status).toBe(401);
    expect((await call('GET', `/v1/sandboxes/${sandboxA.id}`, bearer(derived))).status).toBe(401);
    expect((await call('DELETE', `/v1/keys/${doomed.id}`, bearer(keyA))).status).toBe(403);
  });

  it("a revoked key's open port tunnel, and the E2B command stream of a sandbox it made, end within a second, not at their next request", async () => {
    // An app "in the sandbox" (the daemons run in this process) that never finishes its answer.
    const app: Server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      const timer = setInterval(() => res.write('tick\n'), 50);
      res.on('close', () => clearInterval(timer));
    });
    await new Promise<void>((resolve) => app.listen(0, '127.0.0.1', resolve));
    const doomed = await makeKey({ tenant: 'acme', role: 'member' });
    const e2bOptions = { apiKey: doomed.key, apiUrl: `${warren.url}/e2b`, sandboxUrl: `${warren.url}/e2b` };
    // Its envd access token is the sandbox's own token, which ends with the key that made the sandbox.
    const made = await E2bSandbox.create(e2bOptions);
    try {
      const tunnel = await fetch(`${warren.url}/v1/sandboxes/${sandboxA.id}/ports/${(app.address() as AddressInfo).port}/`, { headers: bearer(doomed.key) });
      expect(tunnel.status).toBe(200);
      const reader = tunnel.body!.getReader();
      expect(new TextDecoder().decode((await reader.read()).value)).toContain('tick');
      const command = await made.commands.run('sleep 30', { background: true });
      const commandEnded = command.wait().then(
        () => 'exited',
        (err: Error) => err.message,
      );
      const tunnelEnded = (async () => {
        for (;;) if ((await reader.read()).done) return 'ended';
      })().catch(() => 'failed');

      const revoked = Date.now();
      expect((await call('DELETE', `/v1/keys/${doomed.id}`, bearer(warren.apiKey))).status).toBe(200);
      const within = (what: Promise<string>) => Promise.race([what, new Promise<string>((r) => setTimeout(() => r('still open'), 1500))]);
      expect(await within(tunnelEnded)).not.toBe('still open');
      expect(await within(commandEnded)).toMatch(/revoked/);
      expect(Date.now() - revoked).toBeLessThan(1500);
    } finally {
      await E2bSandbox.kill(made.sandboxId, { ...e2bOptions, apiKey: warren.apiKey });
      app.closeAllConnections();
      await new Promise((resolve) => app.close(resolve));
    }
  });

  it("a sandbox's own token rotated: the old one, what was derived from it and its open connection end; the new one works", async () => {
    const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: keyA, policy: { root: warren.root, readOnly: false } });
    try {
      const old = sandbox.token;
      const byOldToken = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token: old });
      const derived = (await byOldToken.deriveToken({ inherit: true })).token;
      const grandchild = (await (await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token: derived })).deriveToken({ inherit: true })).token;
      expect((await byOldToken.commands.run('echo alive')).stdout).toBe('alive\n');
      // A derived token cannot rotate the token it came from (it would cut off its parent).
      expect((await call('POST', `/v1/sandboxes/${sandbox.id}/token/rotate`, bearer(derived))).status).toBe(403);
      // Another tenant's key cannot rotate it: the same answer as for a sandbox that does not exist.
      const foreign = await call('POST', `/v1/sandboxes/${sandbox.id}/token/rotate`, bearer(keyB));
      expect(same(foreign, sandbox.id)).toEqual(same(await call('POST', `/v1/sandboxes/${NOWHERE}/token/rotate`, bearer(keyB)), NOWHERE));
      const fresh = await new RestClient(warren.url, keyA).rotateSandboxToken(sandbox.id);
      expect(fresh).not.toBe(old);
      const outcome = await byOldToken.commands.run('echo again').then(
        () => 'ran',
        (err: { code?: string }) => err.code ?? 'failed',
      );
      expect(outcome).not.toBe('ran');
      byOldToken.close();
      for (const token of [old, derived, grandchild]) expect((await call('GET', `/v1/sandboxes/${sandbox.id}`, bearer(token))).status).toBe(401);
      expect((await call('GET', `/v1/sandboxes/${sandbox.id}`, bearer(fresh))).status).toBe(200);
      // One derived token of the new one, revoked alone.
      const child = (await (await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token: fresh })).deriveToken({ inherit: true })).token;
      await new RestClient(warren.url, fresh).revokeToken(sandbox.id, child);
      expect((await call('GET', `/v1/sandboxes/${sandbox.id}`, bearer(child))).status).toBe(401);
      expect((await call('GET', `/v1/sandboxes/${sandbox.id}`, bearer(fresh))).status).toBe(200);
      // E2B's connect hands out the new token as the envd access token.
      const e2b = await E2bSandbox.connect(sandbox.id, { apiKey: keyA, apiUrl: `${warren.url}/e2b`, sandboxUrl: `${warren.url}/e2b` });
      expect((e2b as unknown as { envdAccessToken?: string }).envdAccessToken).toBe(fresh);
    } finally {
      sandbox.close();
      await call('DELETE', `/v1/sandboxes/${sandbox.id}`, bearer(keyA));
    }
  });

  it('a port URL ends with the credential that minted it: a rotated sandbox token, a revoked derived token, a revoked key (URL, cookie and open tunnel)', async () => {
    // An app "in the sandbox" (the daemons run in this process): /stream never finishes its answer.
    const app: Server = createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      if (req.url !== '/stream') return void res.end('plain');
      const timer = setInterval(() => res.write('tick\n'), 50);
      res.on('close', () => clearInterval(timer));
    });
    await new Promise<void>((resolve) => app.listen(0, '127.0.0.1', resolve));
    const appPort = (app.address() as AddressInfo).port;
    const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: keyA, policy: { root: warren.root, readOnly: false } });
    const mint = async (credential: string) => {
      const minted = await call('POST', `/v1/sandboxes/${sandbox.id}/port-urls`, bearer(credential), { port: appPort, ttlSeconds: 3600 });
      expect(minted.status).toBe(201);
      return (JSON.parse(minted.body) as { path: string }).path;
    };
    /** What a browser holding the URL gets: by its query, and by the cookie the first answer set (on a request without the query). */
    const opens = async (link: string, cookie?: string) => {
      const res = await fetch(`${warren.url}${cookie === undefined ? link : link.split('?')[0]}`, cookie === undefined ? {} : { headers: { cookie } });
      await res.text();
      return res.status;
    };
    const cookieOf = async (link: string) => (await fetch(`${warren.url}${link}`)).headers.get('set-cookie')!.split(';')[0]!;
    const within = (what: Promise<string>) => Promise.race([what, new Promise<string>((r) => setTimeout(() => r('still open'), 1500))]);
    /** A streamed answer through the URL, with a promise of its end (in an object, so awaiting the stream does not await its end). */
    const stream = async (link: string): Promise<{ ended: Promise<string> }> => {
      const res = await fetch(`${warren.url}${link.replace('/?', '/stream?')}`);
      expect(res.status).toBe(200);
      const reader = res.body!.getReader();
      expect(new TextDecoder().decode((await reader.read()).value)).toContain('tick');
      const ended = (async () => {
        for (;;) if ((await reader.read()).done) return 'ended';
      })().catch(() => 'failed');
      return { ended };
    };
    try {
      // Minted by the sandbox's own token, which is then rotated.
      const byToken = await mint(sandbox.token);
      const byKey = await mint(keyA);
      const tokenCookie = await cookieOf(byToken);
      expect([await opens(byToken), await opens(byToken, tokenCookie)]).toEqual([200, 200]);
      // The signature covers what the URL was minted from: dropping or swapping it opens nothing.
      expect(await opens(byToken.replace(/&warren_by=[^&]*/, ''))).toBe(401);
      expect(await opens(byToken.replace(/warren_by=[^&]*/, /warren_by=[^&]*/.exec(byKey)![0]))).toBe(401);
      const tokenStream = await stream(byToken);
      const fresh = await new RestClient(warren.url, keyA).rotateSandboxToken(sandbox.id);
      expect(await within(tokenStream.ended)).not.toBe('still open');
      expect([await opens(byToken), await opens(byToken, tokenCookie)]).toEqual([401, 401]);
      // The refusal is the rotation's: a URL of the new token, and one of the API key, still open the port.
      expect([await opens(await mint(fresh)), await opens(byKey)]).toEqual([200, 200]);

      // Minted by a derived token, which is then revoked alone.
      const child = (await (await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token: fresh })).deriveToken({ inherit: true, allowExec: true })).token;
      const byChild = await mint(child);
      const childCookie = await cookieOf(byChild);
      expect(await opens(byChild)).toBe(200);
      await new RestClient(warren.url, fresh).revokeToken(sandbox.id, child);
      expect([await opens(byChild), await opens(byChild, childCookie)]).toEqual([401, 401]);

      // Minted by an API key, which is then revoked.
      const doomed = await makeKey({ tenant: 'acme', role: 'member' });
      const byDoomed = await mint(doomed.key);
      const doomedCookie = await cookieOf(byDoomed);
      const keyStream = await stream(byDoomed);
      expect((await call('DELETE', `/v1/keys/${doomed.id}`, bearer(warren.apiKey))).status).toBe(200);
      expect(await within(keyStream.ended)).not.toBe('still open');
      expect([await opens(byDoomed), await opens(byDoomed, doomedCookie)]).toEqual([401, 401]);
      expect(await opens(byKey)).toBe(200);
    } finally {
      sandbox.close();
      await call('DELETE', `/v1/sandboxes/${sandbox.id}`, bearer(keyA));
      app.closeAllConnections();
      await new Promise((resolve) => app.close(resolve));
    }
  });

  it('scopes narrow a key and the token of a sandbox it creates: no exec, no writes, no lifecycle', async () => {
    const reader = await makeKey({ tenant: 'acme', role: 'member', scopes: ['sandboxes:create'] });
    const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: reader.key, policy: { root: warren.root, readOnly: false } });
    try {
      for (const handle of [sandbox, await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token: sandbox.token })]) {
        await expect(handle.commands.run('true')).rejects.toMatchObject({ code: 'FORBIDDEN' });
        await expect(handle.files.write('scoped.txt', 'x')).rejects.toMatchObject({ code: 'FORBIDDEN' });
      }
      expect((await call('POST', `/v1/sandboxes/${sandbox.id}/keepalive`, bearer(reader.key))).status).toBe(403);
      expect((await call('POST', `/v1/sandboxes/${sandbox.id}/keepalive`, bearer(sandbox.token))).status).toBe(403);
      // The E2B gateway holds the same scopes: no lifecycle, no snapshots, no volumes for this key.
      expect((await call('DELETE', `/e2b/sandboxes/${sandbox.id}`, { 'x-api-key': reader.key })).status).toBe(403);
      expect((await call('POST', `/e2b/sandboxes/${sandbox.id}/snapshots`, { 'x-api-key': reader.key }, {})).status).toBe(403);
      expect((await call('GET', '/e2b/volumes', { 'x-api-key': reader.key })).status).toBe(403);
      expect((await call('GET', '/v1/snapshots', bearer(reader.key))).status).toBe(403);
      const noCreate = await makeKey({ tenant: 'acme', role: 'member', scopes: ['exec'] });
      expect((await call('POST', '/v1/sandboxes', bearer(noCreate.key), {})).status).toBe(403);
    } finally {
      await call('DELETE', `/v1/sandboxes/${sandbox.id}`, bearer(warren.apiKey));
      sandbox.close();
    }
  });

  it("concurrent creates at a tenant's limit never end over it; the limit is named, and GET /v1/tenant shows it", async () => {
    expect((await call('POST', '/v1/tenants/charlie/limits', bearer(warren.apiKey), { maxSandboxes: 3 })).status).toBe(200);
    const key = (await makeKey({ tenant: 'charlie', role: 'member' })).key;
    const answers = await Promise.all(
      Array.from({ length: 30 }, () => call('POST', '/v1/sandboxes', bearer(key), { policy: { root: warren.root, readOnly: false } })),
    );
    const made = answers.filter((a) => a.status === 201);
    expect(made).toHaveLength(3);
    for (const refused of answers.filter((a) => a.status !== 201)) {
      expect(refused.status).toBe(429);
      expect(JSON.parse(refused.body)).toMatchObject({ error: { code: 'RESOURCE_EXHAUSTED', details: { limit: 'maxSandboxes', max: 3 } } });
    }
    const report = JSON.parse((await call('GET', '/v1/tenant', bearer(key))).body) as { usage: { sandboxes: number }; limits: { maxSandboxes: number } };
    expect(report).toMatchObject({ usage: { sandboxes: 3 }, limits: { maxSandboxes: 3 } });
    expect((await call('GET', '/metrics', bearer(warren.apiKey))).body).toContain('warren_tenant_sandboxes{tenant="charlie",state="running"} 3');
    for (const answer of made) await call('DELETE', `/v1/sandboxes/${(JSON.parse(answer.body) as { id: string }).id}`, bearer(key));
  });
});
