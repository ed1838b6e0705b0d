import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { startLocalController, type LocalController } from '../support/local-controller.js';

/** One request a test receiver got: its headers and its raw body. */
interface Received {
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** A webhook receiver on a loopback port of the test's own, answering every request with `status`. */
async function receiver(status: number) {
  const received: Received[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      received.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      res.writeHead(status).end();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
  return { url, received, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

/** What a receiver checks, written as a receiver would (docs/events.md): HMAC-SHA256 of "<t>.<body>". */
function verified(secret: string, { headers, body }: Received): boolean {
  const parts = Object.fromEntries(
    String(headers['warren-signature'])
      .split(',')
      .map((p) => p.split('=', 2)),
  );
  const expected = createHmac('sha256', secret).update(`${parts.t}.${body}`).digest();
  const given = Buffer.from(String(parts.v1), 'hex');
  return given.length === expected.length && timingSafeEqual(given, expected) && Math.abs(Date.now() / 1000 - Number(parts.t)) < 300;
}

async function until(check: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error('timed out waiting');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('lifecycle events and webhooks over a real controller', () => {
  let warren: LocalController;
  let good: Awaited<ReturnType<typeof receiver>>;
  let bad: Awaited<ReturnType<typeof receiver>>;
  let memberB: string;

  const api = async (method: string, route: string, key: string, body?: unknown) => {
    const res = await fetch(`${warren.url}${route}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, json: (text ? JSON.parse(text) : {}) as Record<string, any> }; // eslint-disable-line @typescript-eslint/no-explicit-any
  };

  beforeAll(async () => {
    good = await receiver(200);
    bad = await receiver(500);
    warren = await startLocalController({
      // The test's receivers are on loopback: opened for this controller only.
      webhooks: {
        allowedCidrs: ['127.0.0.1/32'],
        allowPrivateTargets: false,
        maxPerTenant: 10,
        maxAttempts: 3,
        retryBaseMs: 20,
        retryMaxMs: 100,
        timeoutMs: 2000,
      },
    });
    memberB = (await warren.credentials.keys.create({ tenant: 'b', role: 'member' })).key;
  });
  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
    await good?.close();
    await bad?.close();
  });

  it('serves created, ready and killed by cursor, delivers them signed, and shows a failing receiver failing', async () => {
    const hook = await api('POST', '/v1/webhooks', warren.apiKey, { url: good.url });
    expect(hook.status).toBe(201);
    const secret = hook.json.secret as string;
    expect(secret).toMatch(/^whsec_/);
    const failing = await api('POST', '/v1/webhooks', warren.apiKey, { url: bad.url, events: ['created'] });
    expect(failing.status).toBe(201);
    // The secret is shown once: never in a listing or a description.
    expect(JSON.stringify((await api('GET', '/v1/webhooks', warren.apiKey)).json)).not.toContain(secret);

    const created = await api('POST', '/v1/sandboxes', warren.apiKey, { policy: { root: warren.root, readOnly: false } });
    expect(created.status).toBe(201);
    const id = created.json.id as string;
    expect((await api('DELETE', `/v1/sandboxes/${id}`, warren.apiKey)).status).toBe(204);

    const page = await api('GET', '/v1/events?after=0', warren.apiKey);
    expect(page.status).toBe(200);
    const mine = (page.json.events as { id: number; type: string; sandboxId: string; tenant: string }[]).filter((e) => e.sandboxId === id);
    expect(mine.map((e) => e.type)).toEqual(['created', 'ready', 'killed']);
    expect(mine.every((e) => e.tenant === 'default')).toBe(true);
    // The cursor: after the last one, nothing; after the first, the other two; by type, only that type.
    expect((await api('GET', `/v1/events?after=${page.json.next}`, warren.apiKey)).json).toEqual({ events: [], next: page.json.next });
    expect(((await api('GET', `/v1/events?after=${mine[0]!.id}`, warren.apiKey)).json.events as { type: string }[]).map((e) => e.type)).toEqual([
      'ready',
      'killed',
    ]);
    expect(((await api('GET', '/v1/events?types=killed', warren.apiKey)).json.events as { type: string }[]).map((e) => e.type)).toEqual(['killed']);
    expect((await api('GET', '/v1/events?types=exploded', warren.apiKey)).json.error.code).toBe('INVALID_PARAMS');

    await until(() => good.received.length >= 3);
    expect(good.received.map((r) => (JSON.parse(r.body) as { type: string }).type)).toEqual(['created', 'ready', 'killed']);
    for (const delivery of good.received) {
      expect(verified(secret, delivery)).toBe(true);
      expect(delivery.headers['warren-event-id']).toBe(String((JSON.parse(delivery.body) as { id: number }).id));
      expect(delivery.headers['content-type']).toBe('application/json');
    }
    expect(verified('whsec_wrong', good.received[0]!)).toBe(false);

    // The failing receiver got the one event it wants three times (the first try and two retries), then it was given up.
    const failingId = failing.json.webhook.id as string;
    await until(async () => (await api('GET', `/v1/webhooks/${failingId}`, warren.apiKey)).json.status.failed === 1);
    expect(bad.received).toHaveLength(3);
    expect(new Set(bad.received.map((r) => r.headers['warren-event-id'])).size).toBe(1);
    const status = (await api('GET', `/v1/webhooks/${failingId}`, warren.apiKey)).json.status;
    expect(status).toMatchObject({ delivered: 0, failed: 1, consecutiveFailures: 3, lastError: 'HTTP 500', pending: 0 });
    expect(status.lastFailureAt).toEqual(expect.any(String));
    const goodStatus = (await api('GET', `/v1/webhooks/${hook.json.webhook.id}`, warren.apiKey)).json.status;
    expect(goodStatus).toMatchObject({ delivered: 3, failed: 0, consecutiveFailures: 0 });
  });

  it("keeps tenant b from tenant default's events and webhooks, and b's long poll wakes for b's own event", async () => {
    const adminHooks = (await api('GET', '/v1/webhooks', warren.apiKey)).json.webhooks as { id: string }[];
    expect(adminHooks.length).toBeGreaterThan(0);
    const theirs = adminHooks[0]!.id;

    expect((await api('GET', '/v1/events?after=0', memberB)).json).toEqual({ events: [], next: 0 });
    expect((await api('GET', '/v1/events?tenant=default', memberB)).json.error.code).toBe('FORBIDDEN');
    expect((await api('GET', '/v1/webhooks', memberB)).json).toEqual({ webhooks: [] });
    const other = await api('GET', `/v1/webhooks/${theirs}`, memberB);
    const none = await api('GET', '/v1/webhooks/wh_0000000000000000', memberB);
    expect([other.status, other.json.error.code]).toEqual([404, 'NOT_FOUND']);
    expect([none.status, none.json.error.code]).toEqual([404, 'NOT_FOUND']);
    expect(String(other.json.error.message).replace(theirs, 'X')).toBe(String(none.json.error.message).replace('wh_0000000000000000', 'X'));
    expect((await api('DELETE', `/v1/webhooks/${theirs}`, memberB)).status).toBe(404);
    expect((await api('POST', '/v1/webhooks', memberB, { url: good.url, tenant: 'default' })).json.error.code).toBe('FORBIDDEN');

    // b's own webhook and events.
    const own = await api('POST', '/v1/webhooks', memberB, { url: good.url });
    expect([own.status, own.json.webhook.tenant]).toEqual([201, 'b']);
    const polling = api('GET', '/v1/events?after=0&wait=20', memberB);
    const created = await api('POST', '/v1/sandboxes', memberB, { policy: { root: warren.root, readOnly: false } });
    expect(created.status).toBe(201);
    const woke = await polling;
    expect((woke.json.events as { type: string; sandboxId: string; tenant: string }[]).map((e) => [e.type, e.sandboxId, e.tenant])).toContainEqual([
      'created',
      created.json.id,
      'b',
    ]);
    // The admin sees both tenants, or one with ?tenant=.
    const all = (await api('GET', '/v1/events', warren.apiKey)).json.events as { tenant: string }[];
    expect(new Set(all.map((e) => e.tenant))).toEqual(new Set(['default', 'b']));
    const onlyB = (await api('GET', '/v1/events?tenant=b', warren.apiKey)).json.events as { tenant: string }[];
    expect(onlyB.length).toBeGreaterThan(0);
    expect(onlyB.every((e) => e.tenant === 'b')).toBe(true);
    // A sandbox's own token reads no events (it is not a credential outside its sandbox's routes).
    expect([401, 403]).toContain((await api('GET', '/v1/events', created.json.token as string)).status);
    expect((await api('DELETE', `/v1/webhooks/${own.json.webhook.id}`, memberB)).status).toBe(204);
    expect((await api('GET', `/v1/webhooks/${own.json.webhook.id}`, memberB)).status).toBe(404);
    await api('DELETE', `/v1/sandboxes/${created.json.id}`, memberB);
  });
  it("serves the same stream on E2B's events API, per team (tenant), with E2B's type names", async () => {
    const e2b = async (route: string, key: string) => {
      const res = await fetch(`${warren.url}/e2b${route}`, { headers: { 'x-api-key': key } });
      return { status: res.status, json: await res.json() };
    };
    const created = await api('POST', '/v1/sandboxes', warren.apiKey, { policy: { root: warren.root, readOnly: false } });
    const id = created.json.id as string;
    expect((await api('POST', `/v1/sandboxes/${id}/pause`, warren.apiKey)).status).toBe(200);
    expect((await api('POST', `/v1/sandboxes/${id}/resume`, warren.apiKey)).status).toBe(200);
    expect((await api('DELETE', `/v1/sandboxes/${id}`, warren.apiKey)).status).toBe(204);

    const mine = await e2b(`/events/sandboxes/${id}?orderAsc=true`, warren.apiKey);
    expect(mine.status).toBe(200);
    const events = mine.json as { type: string; sandboxId: string; sandboxTeamId: string; version: string; id: string; timestamp: string }[];
    expect(events.map((e) => e.type)).toEqual([
      'sandbox.lifecycle.created',
      'sandbox.lifecycle.paused',
      'sandbox.lifecycle.resumed',
      'sandbox.lifecycle.killed',
    ]);
    expect(events[0]).toMatchObject({ version: 'v1', sandboxId: id, sandboxTeamId: 'default', id: expect.stringMatching(/^[0-9a-f-]{36}$/) });
    // Newest first by default, paged, and filtered by type.
    expect(((await e2b(`/events/sandboxes/${id}?limit=1`, warren.apiKey)).json as { type: string }[]).map((e) => e.type)).toEqual(['sandbox.lifecycle.killed']);
    expect(((await e2b('/events/sandboxes?types=sandbox.lifecycle.paused', warren.apiKey)).json as { sandboxId: string }[]).map((e) => e.sandboxId)).toEqual([
      id,
    ]);
    expect((await e2b('/events/sandboxes?types=sandbox.lifecycle.exploded', warren.apiKey)).status).toBe(400);
    // Tenant b sees none of the default tenant's events, by sandbox or by team.
    expect((await e2b(`/events/sandboxes/${id}`, memberB)).json).toEqual([]);
    expect((await e2b('/events/sandboxes?limit=100', memberB)).json as { sandboxTeamId: string }[]).toEqual(
      expect.not.arrayContaining([expect.objectContaining({ sandboxTeamId: 'default' })]),
    );
  });

  it("registers, lists, changes and deletes webhooks through E2B's API, and delivers in E2B's words with E2B's signature", async () => {
    const e2b = async (method: string, route: string, key: string, body?: unknown) => {
      const res = await fetch(`${warren.url}/e2b${route}`, {
        method,
        headers: { 'x-api-key': key, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const text = await res.text();
      return { status: res.status, json: (text ? JSON.parse(text) : {}) as Record<string, any> }; // eslint-disable-line @typescript-eslint/no-explicit-any
    };
    const ids = (listed: unknown) => (listed as { id: string }[]).map((w) => w.id);
    const hook = await receiver(200);
    try {
      const secret = 'secret-for-event-signature-verification';
      // What E2B's docs send, `updated` included (accepted; Warren never sends it).
      const registered = await e2b('POST', '/events/webhooks', warren.apiKey, {
        name: 'My Sandbox Webhook',
        url: hook.url,
        enabled: true,
        events: ['sandbox.lifecycle.created', 'sandbox.lifecycle.updated', 'sandbox.lifecycle.killed'],
        signatureSecret: secret,
      });
      expect(registered.status).toBe(201);
      expect(registered.json).toMatchObject({ name: 'My Sandbox Webhook', enabled: true, url: hook.url, teamID: 'default' });
      expect(registered.json).not.toHaveProperty('signatureSecret');
      const id = registered.json.id as string;
      expect(ids((await e2b('GET', '/events/webhooks', warren.apiKey)).json)).toContain(id);
      expect((await e2b('GET', `/events/webhooks/${id}`, warren.apiKey)).json.events).toEqual([
        'sandbox.lifecycle.created',
        'sandbox.lifecycle.updated',
        'sandbox.lifecycle.killed',
      ]);
      // Another tenant's key: its list holds none of it, and its id answers as one that does not exist.
      expect((await e2b('GET', '/events/webhooks', memberB)).json).toEqual([]);
      const missing = await e2b('GET', '/events/webhooks/wh_0000000000000000', memberB);
      const foreign = await e2b('GET', `/events/webhooks/${id}`, memberB);
      expect({ status: foreign.status, message: String(foreign.json.message).replace(id, '<id>') }).toEqual({
        status: missing.status,
        message: String(missing.json.message).replace('wh_0000000000000000', '<id>'),
      });
      expect(foreign.status).toBe(404);
      expect((await e2b('DELETE', `/events/webhooks/${id}`, memberB)).status).toBe(404);
      // A target the controller may not reach, and types E2B does not have, are refused.
      expect(
        (
          await e2b('POST', '/events/webhooks', warren.apiKey, {
            name: 'x',
            url: 'http://169.254.169.254/',
            events: ['sandbox.lifecycle.created'],
            signatureSecret: 's',
          })
        ).status,
      ).toBe(403);
      expect(
        (await e2b('POST', '/events/webhooks', warren.apiKey, { name: 'x', url: hook.url, events: ['sandbox.lifecycle.exploded'], signatureSecret: 's' }))
          .status,
      ).toBe(400);

      // A sandbox's life: created and killed reach the receiver (paused and resumed were not asked for).
      const created = await api('POST', '/v1/sandboxes', warren.apiKey, { policy: { root: warren.root, readOnly: false } });
      const sandboxId = created.json.id as string;
      expect((await api('POST', `/v1/sandboxes/${sandboxId}/pause`, warren.apiKey)).status).toBe(200);
      expect((await api('POST', `/v1/sandboxes/${sandboxId}/resume`, warren.apiKey)).status).toBe(200);
      expect((await api('DELETE', `/v1/sandboxes/${sandboxId}`, warren.apiKey)).status).toBe(204);
      const ofSandbox = () => hook.received.filter((r) => (JSON.parse(r.body) as { sandboxId: string }).sandboxId === sandboxId);
      await until(() => ofSandbox().length >= 2);
      const [first, second] = ofSandbox();
      expect([first, second].map((r) => (JSON.parse(r!.body) as { type: string }).type)).toEqual(['sandbox.lifecycle.created', 'sandbox.lifecycle.killed']);
      expect(JSON.parse(first!.body)).toMatchObject({ version: 'v1', sandboxId, sandboxTeamId: 'default' });
      // The receiver's check, as E2B documents it: unpadded base64 SHA-256 of the secret and the raw body.
      for (const r of [first!, second!]) {
        const expected = createHash('sha256')
          .update(secret + r.body)
          .digest('base64')
          .replace(/=+$/, '');
        expect(r.headers['e2b-signature']).toBe(expected);
        expect(r.headers).toMatchObject({ 'e2b-webhook-id': id, 'e2b-signature-version': 'v1' });
      }

      // Disabled, it lets events pass by; the change shows; deleted, it is gone.
      const changed = await e2b('PATCH', `/events/webhooks/${id}`, warren.apiKey, { enabled: false, name: 'Renamed' });
      expect(changed.json).toMatchObject({ enabled: false, name: 'Renamed' });
      const before = hook.received.length;
      const quiet = await api('POST', '/v1/sandboxes', warren.apiKey, { policy: { root: warren.root, readOnly: false } });
      expect((await api('DELETE', `/v1/sandboxes/${quiet.json.id as string}`, warren.apiKey)).status).toBe(204);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(hook.received.length).toBe(before);
      expect((await e2b('DELETE', `/events/webhooks/${id}`, warren.apiKey)).status).toBe(200);
      expect((await e2b('GET', `/events/webhooks/${id}`, warren.apiKey)).status).toBe(404);
      // Warren's own webhooks are not E2B's: not in E2B's list.
      const own = await api('POST', '/v1/webhooks', warren.apiKey, { url: hook.url });
      expect(ids((await e2b('GET', '/events/webhooks', warren.apiKey)).json)).not.toContain(own.json.webhook.id);
      expect((await api('DELETE', `/v1/webhooks/${own.json.webhook.id as string}`, warren.apiKey)).status).toBe(204);
    } finally {
      await hook.close();
    }
  });
});
