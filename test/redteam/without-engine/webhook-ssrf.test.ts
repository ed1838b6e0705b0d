import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { startLocalController, type LocalController } from '../../support/local-controller.js';

/**
 * Webhooks as a way to make the controller send requests where an attacker (any tenant's member
 * key) points it: cloud metadata, the controller's own API, loopback services. Every URL here is
 * refused when it is registered, before any connection; the only listeners that may receive
 * anything are the ones this test makes on loopback.
 */

/** A loopback listener of the test's own that counts what reaches it and answers `status` (with `location` for a redirect). */
async function listener(status: number, location?: string) {
  let hits = 0;
  const server = http.createServer((req, res) => {
    hits++;
    req.resume();
    res.writeHead(status, location === undefined ? {} : { location }).end();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
    hits: () => hits,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const post = async (warren: LocalController, body: unknown) => {
  const res = await fetch(`${warren.url}/v1/webhooks`, {
    method: 'POST',
    headers: { authorization: `Bearer ${warren.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const json = (await res.json()) as { error?: { code: string; message: string }; webhook?: { id: string } };
  return { status: res.status, code: json.error?.code ?? 'ok', message: json.error?.message ?? '', id: json.webhook?.id };
};

/** A call on E2B's webhook API (`/e2b/events/webhooks<route>`) with the controller's key. */
const e2bWebhooks = async (warren: LocalController, method: string, route: string, body?: unknown) => {
  const res = await fetch(`${warren.url}/e2b/events/webhooks${route}`, {
    method,
    headers: { 'x-api-key': warren.apiKey, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, json: (await res.json()) as { id?: string; url?: string } };
};

/** An E2B webhook registration for `url`. */
const e2bHook = (url: string) => ({ name: 'probe', url, enabled: true, events: ['sandbox.lifecycle.created'], signatureSecret: 's' });

const list = async (warren: LocalController) =>
  ((await (await fetch(`${warren.url}/v1/webhooks`, { headers: { authorization: `Bearer ${warren.apiKey}` } })).json()) as { webhooks: unknown[] }).webhooks;

describe('webhook URLs cannot reach metadata, the controller or loopback (SSRF)', () => {
  describe('with the default settings', () => {
    let warren: LocalController;
    beforeAll(async () => {
      warren = await startLocalController();
    });
    afterAll(async () => {
      await warren?.[Symbol.asyncDispose]();
    });

    it.each([
      ['cloud metadata', 'http://169.254.169.254/latest/meta-data/iam/security-credentials/'],
      ['cloud metadata, IPv4-mapped', 'http://[::ffff:169.254.169.254]/latest/meta-data/'],
      ['cloud metadata, IPv4-mapped hex', 'http://[::ffff:a9fe:a9fe]/'],
      ['AWS metadata over IPv6', 'http://[fd00:ec2::254]/latest/meta-data/'],
      ['link-local IPv6', 'http://[fe80::1]/'],
      ['the unspecified address', 'http://0.0.0.0/'],
      ['the unspecified IPv6 address', 'http://[::]/'],
      ['loopback', 'http://127.0.0.1:6379/'],
      ['loopback, decimal', 'http://2130706433/'],
      ['loopback IPv6', 'http://[::1]/'],
      ['a private network', 'http://10.0.0.1/'],
    ])('refuses %s (%s) at registration', async (_, url) => {
      const answer = await post(warren, { url });
      expect([answer.status, answer.code]).toEqual([403, 'FORBIDDEN']);
      expect(answer.message).toMatch(/webhooks may not target it/);
    });

    it("refuses the controller's own API", async () => {
      const own = new URL(warren.url);
      const answer = await post(warren, { url: `http://127.0.0.1:${own.port}/v1/sandboxes` });
      expect([answer.status, answer.code]).toEqual([403, 'FORBIDDEN']);
    });

    it('refuses schemes other than http and https, and credentials in the URL', async () => {
      for (const url of ['file:///etc/passwd', 'gopher://127.0.0.1:6379/_FLUSHALL', 'ftp://example.com/', 'http://user:pass@example.com/'])
        expect((await post(warren, { url })).code).toBe('INVALID_PARAMS');
    });

    it("refuses the same targets through E2B's webhook API", async () => {
      const own = new URL(warren.url);
      for (const url of [
        'http://169.254.169.254/latest/meta-data/',
        'http://[::ffff:a9fe:a9fe]/',
        'http://2130706433/',
        `http://127.0.0.1:${own.port}/v1/keys`,
      ])
        expect([url, (await e2bWebhooks(warren, 'POST', '', e2bHook(url))).status]).toEqual([url, 403]);
    });

    it('registered nothing', async () => {
      expect(await list(warren)).toEqual([]);
    });
  });

  describe('with loopback and even link-local opened by the operator', () => {
    let warren: LocalController;
    let target: Awaited<ReturnType<typeof listener>>;
    let redirecting: Awaited<ReturnType<typeof listener>>;
    beforeAll(async () => {
      target = await listener(200);
      redirecting = await listener(302, target.url);
      warren = await startLocalController({
        webhooks: {
          allowedCidrs: ['127.0.0.0/8', '::1/128', '169.254.0.0/16'],
          allowPrivateTargets: true,
          maxPerTenant: 10,
          maxAttempts: 2,
          retryBaseMs: 10,
          retryMaxMs: 20,
          timeoutMs: 2000,
        },
      });
    });
    afterAll(async () => {
      await warren?.[Symbol.asyncDispose]();
      await target?.close();
      await redirecting?.close();
    });

    it('still refuses the metadata address, link-local and the controller itself', async () => {
      const own = new URL(warren.url);
      for (const url of [
        'http://169.254.169.254/latest/meta-data/',
        'http://169.254.10.10/',
        `http://127.0.0.1:${own.port}/v1/keys`,
        `http://127.0.0.2:${own.port}/`,
        `http://[::ffff:127.0.0.1]:${own.port}/`,
      ]) {
        const answer = await post(warren, { url });
        expect([url, answer.status, answer.code]).toEqual([url, 403, 'FORBIDDEN']);
      }
      expect(await list(warren)).toEqual([]);
    });

    it("refuses, through E2B's webhook API, a webhook's URL changed to metadata or the controller, and keeps the one it had", async () => {
      const made = await e2bWebhooks(warren, 'POST', '', e2bHook(target.url));
      expect(made.status).toBe(201);
      const own = new URL(warren.url);
      for (const url of ['http://169.254.169.254/latest/meta-data/', `http://127.0.0.1:${own.port}/v1/keys`, `http://[::ffff:127.0.0.1]:${own.port}/`])
        expect([url, (await e2bWebhooks(warren, 'PATCH', `/${made.json.id}`, { url })).status]).toEqual([url, 403]);
      expect((await e2bWebhooks(warren, 'GET', `/${made.json.id}`)).json).toMatchObject({ url: target.url });
      expect((await e2bWebhooks(warren, 'DELETE', `/${made.json.id}`)).status).toBe(200);
    });

    it('does not follow a redirect: the receiver it points to gets nothing, and the webhook shows why', async () => {
      const hook = await post(warren, { url: redirecting.url, events: ['created'] });
      expect(hook.status).toBe(201);
      const created = await fetch(`${warren.url}/v1/sandboxes`, {
        method: 'POST',
        headers: { authorization: `Bearer ${warren.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ policy: { root: warren.root, readOnly: false } }),
      });
      expect(created.status).toBe(201);
      let status: { failed: number; lastError?: string } = { failed: 0 };
      for (let i = 0; i < 500 && status.failed === 0; i++) {
        await new Promise((resolve) => setTimeout(resolve, 10));
        const res = await fetch(`${warren.url}/v1/webhooks/${hook.id}`, { headers: { authorization: `Bearer ${warren.apiKey}` } });
        status = ((await res.json()) as { status: typeof status }).status;
      }
      expect(status.failed).toBe(1);
      expect(status.lastError).toMatch(/redirects are not followed/);
      expect(redirecting.hits()).toBe(2);
      expect(target.hits()).toBe(0);
    });
  });
});
