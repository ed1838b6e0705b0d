import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from '@jest/globals';
import { RestClient } from '../src/index.js';

const created = {
  id: 'abc',
  state: 'running',
  image: 'i',
  createdAt: new Date(0).toISOString(),
  expiresAt: new Date(0).toISOString(),
  labels: {},
  settings: { cpus: 1, memoryMb: 1, pidsLimit: 16, network: 'none', runtime: 'runc', user: '1000:1000', workdir: '/workspace', ttlSeconds: 10, mounts: [] },
  token: 't',
  readyMs: 1,
  pooled: false,
};
const busy = { error: { code: 'RESOURCE_EXHAUSTED', message: 'creates are waiting', details: { retryAfterSeconds: 0.05 } } };
const full = { error: { code: 'RESOURCE_EXHAUSTED', message: 'maxSandboxes', details: {} } };

/** A controller stand-in on loopback that answers each create with the next reply in `replies`. */
async function controller(replies: [number, unknown][]): Promise<{ url: string; calls: () => number; close: () => Promise<void> }> {
  let calls = 0;
  const server = createServer((_req, res) => {
    const [status, body] = replies[Math.min(calls++, replies.length - 1)]!;
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, calls: () => calls, close: () => new Promise((r) => server.close(() => r())) };
}

describe('creates refused for load are tried again', () => {
  it('waits the retry time and tries again until the create goes through', async () => {
    const c = await controller([
      [429, busy],
      [429, busy],
      [201, created],
    ]);
    await expect(new RestClient(c.url, 'k').create({})).resolves.toMatchObject({ id: 'abc' });
    expect(c.calls()).toBe(3);
    await c.close();
  });

  it('gives up after a bounded number of tries, and never retries a refusal without a retry time', async () => {
    const c = await controller([[429, busy]]);
    await expect(new RestClient(c.url, 'k').create({})).rejects.toMatchObject({ code: 'RESOURCE_EXHAUSTED' });
    expect(c.calls()).toBe(6);
    await c.close();
    const d = await controller([[429, full]]);
    await expect(new RestClient(d.url, 'k').create({})).rejects.toMatchObject({ code: 'RESOURCE_EXHAUSTED' });
    expect(d.calls()).toBe(1);
    await d.close();
  });
});
