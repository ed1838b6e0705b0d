import { createHmac } from 'node:crypto';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { EventLog } from '../src/events/event-log.js';
import { signatureHeader, verifySignature } from '../src/events/webhook-signing.js';
import { WEBHOOKS_FILE, WebhookStore } from '../src/events/webhook-store.js';
import { TargetGuard, webhookUrl, type CheckedAddress } from '../src/events/webhook-target.js';
import { retryDelayMs } from '../src/events/webhook-worker.js';
import { DEFAULT_WEBHOOK_SETTINGS, WebhookService } from '../src/events/webhooks.js';
import type { WebhookSender } from '../src/events/webhook-post.js';
import type { Principal } from '../src/tenancy/principals.js';

const member = (tenant: string): Principal => ({ keyId: `key-${tenant}`, tenant, role: 'member', scopes: [] });
const admin: Principal = { keyId: 'admin', tenant: 'default', role: 'admin', scopes: [] };

/** A guard that never asks DNS: names resolve from the given table only. */
function guardOf(
  rules: Partial<ConstructorParameters<typeof TargetGuard>[0]> = {},
  hosts: Record<string, string[]> = {},
  self = { address: '127.0.0.1', port: 7420 },
) {
  return new TargetGuard(
    { allowedCidrs: [], allowPrivateTargets: false, ...rules },
    () => self,
    async (name) => (hosts[name] ?? []).map((address): CheckedAddress => ({ address, family: address.includes(':') ? 6 : 4 })),
    () => ['127.0.0.1', '::1', '192.168.1.20'],
  );
}

describe('webhook signatures', () => {
  it('sign "<t>.<body>" with HMAC-SHA256 of the secret, and verify only the same body, secret and a recent t', () => {
    const body = '{"id":1,"type":"created"}';
    const header = signatureHeader('whsec_test', body, 1_800_000_000);
    expect(header).toBe(`t=1800000000,v1=${createHmac('sha256', 'whsec_test').update(`1800000000.${body}`).digest('hex')}`);
    expect(verifySignature('whsec_test', body, header, 1_800_000_100)).toBe(true);
    expect(verifySignature('whsec_other', body, header, 1_800_000_100)).toBe(false);
    expect(verifySignature('whsec_test', `${body} `, header, 1_800_000_100)).toBe(false);
    // A replay ten minutes later.
    expect(verifySignature('whsec_test', body, header, 1_800_000_600)).toBe(false);
    expect(verifySignature('whsec_test', body, 't=1800000000,v1=zz', 1_800_000_000)).toBe(false);
    expect(verifySignature('whsec_test', body, undefined, 1_800_000_000)).toBe(false);
  });
});

describe('retry backoff', () => {
  it('doubles from the base and stops at the maximum', () => {
    expect([1, 2, 3, 4, 5].map((a) => retryDelayMs(a, 1000, 60_000))).toEqual([1000, 2000, 4000, 8000, 16_000]);
    expect(retryDelayMs(10, 1000, 60_000)).toBe(60_000);
  });
});

describe('the webhook target guard (SSRF)', () => {
  it('takes http and https URLs only, without credentials or a fragment', () => {
    expect(webhookUrl('https://hooks.example.com/warren?x=1').href).toBe('https://hooks.example.com/warren?x=1');
    for (const bad of ['ftp://example.com/', 'file:///etc/passwd', 'gopher://x/', 'http://user:pw@example.com/', 'https://example.com/#x', 'not a url'])
      expect(() => webhookUrl(bad)).toThrow(expect.objectContaining({ code: 'INVALID_PARAMS' }));
  });

  it('refuses loopback, link-local, metadata, unspecified, private and own addresses by default', () => {
    const guard = guardOf();
    for (const address of [
      '127.0.0.1',
      '127.9.9.9',
      '::1',
      '169.254.169.254',
      '169.254.1.1',
      'fe80::1',
      'fd00:ec2::254',
      '0.0.0.0',
      '::',
      '::ffff:127.0.0.1',
      '::ffff:169.254.169.254',
      '10.1.2.3',
      '192.168.1.20',
      '100.100.100.200',
      '224.0.0.1',
    ])
      expect([address, guard.refusal(address, 443)]).toEqual([address, expect.any(String)]);
    expect(guard.refusal('93.184.216.34', 443)).toBeUndefined();
    expect(guard.refusal('2606:2800:220:1::1', 443)).toBeUndefined();
  });

  it('opens loopback and private ranges only as the operator says, never metadata, link-local or the controller itself', () => {
    const guard = guardOf({ allowedCidrs: ['127.0.0.0/8', '169.254.0.0/16', '0.0.0.0/0'], allowPrivateTargets: true });
    expect(guard.refusal('127.0.0.1', 8080)).toBeUndefined();
    expect(guard.refusal('10.1.2.3', 443)).toBeUndefined();
    expect(guard.refusal('fd12::1', 443)).toBeUndefined();
    expect(guard.refusal('169.254.169.254', 80)).toMatch(/metadata/);
    expect(guard.refusal('169.254.1.1', 80)).toMatch(/link-local/);
    expect(guard.refusal('fd00:ec2::254', 80)).toMatch(/metadata/);
    expect(guard.refusal('0.0.0.0', 80)).toMatch(/unspecified/);
    // The controller's own listener, by any loopback or own address.
    expect(guard.refusal('127.0.0.1', 7420)).toMatch(/controller/);
    expect(guard.refusal('127.0.0.2', 7420)).toMatch(/controller/);
    expect(guard.refusal('::ffff:127.0.0.1', 7420)).toMatch(/controller/);
  });

  it('checks every address a name resolves to, and hands back the one checked (no second lookup)', async () => {
    const guard = guardOf({}, { 'good.example': ['93.184.216.34'], 'rebind.example': ['93.184.216.34', '169.254.169.254'], 'local.example': ['127.0.0.1'] });
    await expect(guard.resolve(new URL('https://good.example/hook'))).resolves.toEqual({ address: '93.184.216.34', family: 4 });
    await expect(guard.resolve(new URL('https://rebind.example/hook'))).rejects.toMatchObject({
      code: 'FORBIDDEN',
      message: expect.stringMatching(/169\.254\.169\.254/),
    });
    await expect(guard.resolve(new URL('http://local.example/'))).rejects.toMatchObject({ code: 'FORBIDDEN' });
    await expect(guard.resolve(new URL('http://[::1]:8080/'))).rejects.toMatchObject({ code: 'FORBIDDEN' });
    await expect(guard.resolve(new URL('http://nowhere.example/'))).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
  });

  it('refuses a bad allowedCidrs entry at start', () => {
    expect(() => guardOf({ allowedCidrs: ['localhost'] })).toThrow(/allowedCidrs/);
    expect(() => guardOf({ allowedCidrs: ['10.0.0.0/33'] })).toThrow(/allowedCidrs/);
  });
});

/** A webhook service over an in-memory log whose sender is scripted, and whose waits are recorded, not slept. */
async function serviceOf(answers: (attempt: number) => Error | undefined, stateDir?: string) {
  const log = await EventLog.open({ retain: 100 });
  const sent: { body: string; headers: Record<string, string>; address: CheckedAddress }[] = [];
  const waits: number[] = [];
  const send: WebhookSender = async ({ body, headers, address }) => {
    sent.push({ body, headers, address });
    const failure = answers(sent.length);
    if (failure) throw failure;
  };
  const store = await WebhookStore.load(stateDir);
  const service = new WebhookService({
    store,
    log,
    guard: guardOf({ allowedCidrs: ['127.0.0.1/32'] }),
    settings: { ...DEFAULT_WEBHOOK_SETTINGS, maxAttempts: 4, retryBaseMs: 1000, retryMaxMs: 5000 },
    send,
    sleep: async (ms) => void waits.push(ms),
  });
  service.start();
  return { log, sent, waits, service, store };
}

async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 5));
  expect(check()).toBe(true);
}

describe('webhook delivery', () => {
  it('delivers each event signed with the secret shown once, in order, with its id', async () => {
    const { log, sent, service } = await serviceOf(() => undefined);
    const { webhook, secret } = await service.register(member('a'), { url: 'http://127.0.0.1:9999/hook' });
    expect(secret).toMatch(/^whsec_/);
    expect(JSON.stringify(service.get(member('a'), webhook.id))).not.toContain(secret);
    log.append({ type: 'created', tenant: 'a', sandboxId: 's1' });
    log.append({ type: 'created', tenant: 'b', sandboxId: 's2' });
    log.append({ type: 'killed', tenant: 'a', sandboxId: 's1' });
    await until(() => sent.length === 2);
    expect(sent.map((s) => (JSON.parse(s.body) as { type: string }).type)).toEqual(['created', 'killed']);
    for (const s of sent) {
      expect(verifySignature(secret, s.body, s.headers['Warren-Signature'], Math.floor(Date.now() / 1000))).toBe(true);
      expect(s.headers['Warren-Event-Id']).toBe(String((JSON.parse(s.body) as { id: number }).id));
      expect(s.address).toEqual({ address: '127.0.0.1', family: 4 });
    }
    await until(() => service.get(member('a'), webhook.id).status.delivered === 2);
    expect(service.get(member('a'), webhook.id).status).toMatchObject({ delivered: 2, failed: 0, consecutiveFailures: 0, pending: 0, cursor: 3 });
    await service.close();
  });

  it('retries a failing receiver with doubling waits, then gives the event up and shows why', async () => {
    const { log, sent, waits, service } = await serviceOf(() => new Error('HTTP 503'));
    const { webhook } = await service.register(member('a'), { url: 'http://127.0.0.1:9999/hook' });
    log.append({ type: 'created', tenant: 'a', sandboxId: 's1' });
    await until(() => service.get(member('a'), webhook.id).status.failed === 1);
    expect(sent).toHaveLength(4);
    expect(waits).toEqual([1000, 2000, 4000]);
    expect(service.get(member('a'), webhook.id).status).toMatchObject({ delivered: 0, failed: 1, consecutiveFailures: 4, lastError: 'HTTP 503', pending: 0 });
    await service.close();
  });

  it('goes on with the next event once a receiver recovers', async () => {
    // Down for the first event's four attempts, up from the fifth.
    const { log, sent, service } = await serviceOf((attempt) => (attempt <= 4 ? new Error('connect ECONNREFUSED') : undefined));
    const { webhook } = await service.register(member('a'), { url: 'http://127.0.0.1:9999/hook' });
    log.append({ type: 'created', tenant: 'a', sandboxId: 's1' });
    log.append({ type: 'ready', tenant: 'a', sandboxId: 's1' });
    await until(() => service.get(member('a'), webhook.id).status.delivered === 1);
    expect(service.get(member('a'), webhook.id).status.failed).toBe(1);
    expect((JSON.parse(sent.at(-1)!.body) as { type: string }).type).toBe('ready');
    expect(service.get(member('a'), webhook.id).status).toMatchObject({ consecutiveFailures: 0, pending: 0 });
    await service.close();
  });

  it('counts as pending every event after the cursor, the one being tried included', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const log = await EventLog.open({ retain: 100 });
    let calls = 0;
    const service = new WebhookService({
      store: await WebhookStore.load(undefined),
      log,
      guard: guardOf({ allowedCidrs: ['127.0.0.1/32'] }),
      settings: DEFAULT_WEBHOOK_SETTINGS,
      send: async () => {
        calls++;
        await held;
      },
    });
    const { webhook } = await service.register(member('a'), { url: 'http://127.0.0.1:9999/hook' });
    for (const type of ['created', 'ready', 'killed'] as const) log.append({ type, tenant: 'a', sandboxId: 's1' });
    await until(() => calls === 1);
    expect(service.get(member('a'), webhook.id).status.pending).toBe(3);
    release();
    await until(() => service.get(member('a'), webhook.id).status.pending === 0);
    await service.close();
  });

  it("keeps a tenant's webhooks from another tenant (NOT_FOUND as for none) and lets an admin see them all", async () => {
    const { service } = await serviceOf(() => undefined);
    const { webhook } = await service.register(member('a'), { url: 'http://127.0.0.1:9999/hook' });
    expect(service.list(member('b'))).toEqual([]);
    expect(() => service.get(member('b'), webhook.id)).toThrow(expect.objectContaining({ code: 'NOT_FOUND' }));
    await expect(service.remove(member('b'), webhook.id)).rejects.toMatchObject({ code: 'NOT_FOUND' });
    expect(() => service.get(member('b'), 'wh_0000000000000000')).toThrow(expect.objectContaining({ code: 'NOT_FOUND' }));
    expect(service.list(admin).map((w) => w.id)).toEqual([webhook.id]);
    await expect(service.register(member('b'), { url: 'http://127.0.0.1:9999/hook', tenant: 'a' })).rejects.toMatchObject({ code: 'FORBIDDEN' });
    await service.remove(member('a'), webhook.id);
    expect(service.list(admin)).toEqual([]);
    await service.close();
  });

  it('refuses a target the guard refuses at registration, before any delivery', async () => {
    const { sent, service } = await serviceOf(() => undefined);
    await expect(service.register(member('a'), { url: 'http://169.254.169.254/latest/meta-data/' })).rejects.toMatchObject({ code: 'FORBIDDEN' });
    await expect(service.register(member('a'), { url: 'http://10.0.0.1/' })).rejects.toMatchObject({ code: 'FORBIDDEN' });
    expect(service.list(admin)).toEqual([]);
    expect(sent).toEqual([]);
    await service.close();
  });

  it('keeps webhooks, their secrets and cursors in webhooks.json (mode 0600) across a restart', async () => {
    const stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-webhooks-'));
    try {
      const first = await serviceOf(() => undefined, stateDir);
      const { webhook } = await first.service.register(member('a'), { url: 'http://127.0.0.1:9999/hook', events: ['killed'] });
      first.log.append({ type: 'killed', tenant: 'a', sandboxId: 's1' });
      await until(() => first.service.get(member('a'), webhook.id).status.delivered === 1);
      await first.service.close();
      expect((await stat(path.join(stateDir, WEBHOOKS_FILE))).mode & 0o777).toBe(0o600);
      const store = await WebhookStore.load(stateDir);
      expect(store.get(webhook.id)).toMatchObject({ tenant: 'a', events: ['killed'], cursor: 1, status: { delivered: 1 } });
    } finally {
      await rm(stateDir, { recursive: true, force: true });
    }
  });
});
