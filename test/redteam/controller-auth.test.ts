import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { decodeFrame, encodeFrame, PROTOCOL_VERSION, type FrameHeader } from '@warren/protocol';
import { Sandbox } from '@warren/sdk';
import { WebSocket } from 'ws';
import { startTestController, type TestController } from '../support/fixtures.js';

interface Answer {
  status: number;
  body: unknown;
}

/** Every credential that must not work, by name. */
type BadCredential = 'no key' | 'empty' | 'wrong, equal length' | 'wrong, other length' | "another sandbox's token";

describe('auth and limits', () => {
  let warren: TestController;
  let a: Sandbox;
  let b: Sandbox;

  beforeAll(async () => {
    warren = await startTestController({
      // A heartbeat short enough to watch, long enough that a loaded machine answers every ping in time.
      config: { maxSandboxes: 2, maxConnections: 4, maxMessageBytes: 64 * 1024, heartbeatMs: 1000, allowedOrigins: ['http://allowed.example'] },
    });
    a = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
    b = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey });
  });
  afterAll(async () => {
    for (const s of [a, b]) await s?.kill().catch(() => undefined);
    await warren?.[Symbol.asyncDispose]();
  });

  const endpoints = (id: string): [string, string, unknown?][] => [
    ['POST', '/v1/sandboxes', {}],
    ['GET', '/v1/sandboxes'],
    ['GET', `/v1/sandboxes/${id}`],
    ['DELETE', `/v1/sandboxes/${id}`],
    ['POST', `/v1/sandboxes/${id}/keepalive`],
    ['POST', `/v1/sandboxes/${id}/timeout`, { ttlSeconds: 60 }],
    ['POST', `/v1/sandboxes/${id}/pause`],
    ['POST', `/v1/sandboxes/${id}/resume`],
    ['POST', `/v1/sandboxes/${id}/derive`, {}],
    ['GET', `/v1/sandboxes/${id}/audit`],
    ['GET', '/metrics'],
    ['WS', `/v1/sandboxes/${id}/connect`],
  ];

  const authHeader = (credential: BadCredential | { token: string }): Record<string, string> => {
    if (typeof credential === 'object') return { authorization: `Bearer ${credential.token}` };
    switch (credential) {
      case 'no key':
        return {};
      case 'empty':
        return { authorization: 'Bearer ' };
      case 'wrong, equal length':
        return { authorization: `Bearer ${'x'.repeat(warren.apiKey.length)}` };
      case 'wrong, other length':
        return { authorization: `Bearer wk_${randomBytes(40).toString('hex')}` };
      case "another sandbox's token":
        return { authorization: `Bearer ${b.token}` };
    }
  };

  async function call(method: string, route: string, headers: Record<string, string>, body?: unknown): Promise<Answer> {
    if (method === 'WS') return upgrade(route, headers);
    const res = await fetch(`${warren.url}${route}`, {
      method,
      headers: { ...headers, 'content-type': 'application/json' },
      body: body === undefined ? null : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  }

  function upgrade(route: string, headers: Record<string, string>): Promise<Answer> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(`${warren.url.replace(/^http/, 'ws')}${route}`, { headers });
      ws.on('open', () => {
        ws.close();
        resolve({ status: 101, body: undefined });
      });
      ws.on('unexpected-response', (_req, res) => {
        let text = '';
        res.on('data', (chunk: Buffer) => (text += chunk.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
      });
      ws.on('error', reject);
    });
  }

  /** Waits until the controller holds at most `count` client connections (a close completes asynchronously); the test timeout bounds it. */
  async function connectionsAtMost(count: number): Promise<void> {
    while (((await warren.controller.metrics.connections.get()).values[0]?.value ?? 0) > count) await new Promise((r) => setTimeout(r, 20));
  }

  const UNAUTHORIZED = {
    error: {
      code: 'UNAUTHORIZED',
      message: 'Missing or invalid credential: send Authorization: Bearer <API key>, or a token of this sandbox.',
      suggestion: expect.any(String),
    },
  };

  it('answers every endpoint x every bad credential with the same 401 shape, never a 500', async () => {
    const bad: BadCredential[] = ['no key', 'empty', 'wrong, equal length', 'wrong, other length', "another sandbox's token"];
    const seen = new Set<string>();
    for (const [method, route, body] of endpoints(a.id)) {
      for (const credential of bad) {
        const answer = await call(method, route, authHeader(credential), body);
        expect({ endpoint: `${method} ${route}`, credential, ...answer }).toEqual({
          endpoint: `${method} ${route}`,
          credential,
          status: 401,
          body: UNAUTHORIZED,
        });
        seen.add(JSON.stringify(answer.body));
      }
    }
    expect(seen.size).toBe(1);
    // Nothing was created, killed or paused by any of those.
    expect((await a.info()).state).toBe('running');
    expect(warren.controller.sandboxes.list()).toHaveLength(2);
  });

  it("refuses a sandbox's token beyond its sandbox (401) and a derived token on routes beyond its reach (one 403 shape)", async () => {
    const derived = (await a.deriveToken({ inherit: true })).token;
    // A sandbox token is no API key: on the controller-wide routes it is just an invalid credential.
    for (const [method, route, body] of [
      ['POST', '/v1/sandboxes', {}],
      ['GET', '/v1/sandboxes'],
      ['GET', '/metrics'],
    ] as const) {
      expect(await call(method, route, { authorization: `Bearer ${a.token}` }, body)).toEqual({ status: 401, body: UNAUTHORIZED });
    }
    const cases: [string, string, string, unknown?][] = [
      [derived, 'DELETE', `/v1/sandboxes/${a.id}`],
      [derived, 'POST', `/v1/sandboxes/${a.id}/pause`],
      [derived, 'POST', `/v1/sandboxes/${a.id}/timeout`, { ttlSeconds: 60 }],
      [derived, 'GET', `/v1/sandboxes/${a.id}/audit`],
    ];
    for (const [token, method, route, body] of cases) {
      const answer = await call(method, route, { authorization: `Bearer ${token}` }, body);
      expect({ route: `${method} ${route}`, ...answer }).toEqual({
        route: `${method} ${route}`,
        status: 403,
        body: {
          error: {
            code: 'FORBIDDEN',
            message: expect.stringMatching(/^This credential may not use this route; it needs /),
            suggestion: expect.any(String),
            details: { access: expect.stringMatching(/^(lifecycle|audit)$/) },
          },
        },
      });
    }
    // ...while each works where it reaches.
    expect((await call('GET', `/v1/sandboxes/${a.id}`, { authorization: `Bearer ${a.token}` })).status).toBe(200);
    expect((await call('GET', `/v1/sandboxes/${a.id}`, { authorization: `Bearer ${derived}` })).status).toBe(200);
    expect((await call('WS', `/v1/sandboxes/${a.id}/connect`, { authorization: `Bearer ${derived}` })).status).toBe(101);
    // A derived token for one sandbox does not reach another, and a tampered one reaches nothing.
    expect(await call('GET', `/v1/sandboxes/${b.id}`, { authorization: `Bearer ${derived}` })).toEqual({ status: 401, body: UNAUTHORIZED });
    const tampered = `${derived.slice(0, -2)}${derived.endsWith('AA') ? 'BB' : 'AA'}`;
    expect(await call('GET', `/v1/sandboxes/${a.id}`, { authorization: `Bearer ${tampered}` })).toEqual({ status: 401, body: UNAUTHORIZED });
  });

  it('refuses WebSocket upgrades from a foreign Origin or for a foreign Host', async () => {
    const key = { authorization: `Bearer ${warren.apiKey}` };
    const route = `/v1/sandboxes/${a.id}/connect`;
    expect(await call('WS', route, { ...key, origin: 'http://evil.example' })).toMatchObject({
      status: 403,
      body: { error: { code: 'FORBIDDEN', message: expect.stringContaining('Origin') } },
    });
    expect(await call('WS', route, { ...key, host: 'evil.example' })).toMatchObject({
      status: 403,
      body: { error: { code: 'FORBIDDEN', message: expect.stringContaining('Host') } },
    });
    expect((await call('WS', route, { ...key, origin: 'http://allowed.example' })).status).toBe(101);
    expect((await call('WS', route, { ...key, host: `localhost:${new URL(warren.url).port}` })).status).toBe(101);
  });

  it('caps sandboxes per controller', async () => {
    const answer = await call('POST', '/v1/sandboxes', { authorization: `Bearer ${warren.apiKey}` }, {});
    expect(answer).toMatchObject({ status: 429, body: { error: { code: 'RESOURCE_EXHAUSTED', message: expect.stringContaining('maxSandboxes') } } });
  });

  it('caps connections, and closes a connection that sends a message above the size cap', async () => {
    const open: Sandbox[] = [];
    let refusal: unknown;
    try {
      for (let i = 0; i < 8 && refusal === undefined; i++) {
        await Sandbox.connect(a.id, { baseUrl: warren.url, token: a.token }).then(
          (s) => open.push(s),
          (err: unknown) => (refusal = err),
        );
      }
      expect(refusal).toMatchObject({ code: 'RESOURCE_EXHAUSTED', message: expect.stringContaining('maxConnections') });
      expect(open.length).toBeLessThanOrEqual(4);
      expect(warren.controller.metrics.connections).toBeDefined();
    } finally {
      for (const s of open) s.close();
    }
    await connectionsAtMost(2); // a's and b's
    const ws = new WebSocket(`${warren.url.replace(/^http/, 'ws')}/v1/sandboxes/${a.id}/connect`, { headers: { authorization: `Bearer ${a.token}` } });
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    // A message over maxMessageBytes is answered with its request id (null when it names none),
    // never passed on, and the connection lives on.
    const answers: FrameHeader[] = [];
    ws.on('message', (data: Buffer) => answers.push(decodeFrame(data).header));
    const answered = async (count: number) => {
      for (let i = 0; i < 100 && answers.length < count; i++) await new Promise((r) => setTimeout(r, 20));
      return answers[count - 1];
    };
    ws.send(encodeFrame({ type: 'hello', protocolVersion: PROTOCOL_VERSION }));
    expect(await answered(1)).toMatchObject({ type: 'welcome' });
    ws.send(Buffer.alloc(100 * 1024));
    expect(await answered(2)).toMatchObject({ type: 'err', id: null, error: { code: 'FRAME_TOO_LARGE' } });
    ws.send(encodeFrame({ type: 'req', id: 5, method: 'fs.write', params: { path: 'big.bin' } }, Buffer.alloc(100 * 1024)));
    expect(await answered(3)).toMatchObject({ type: 'err', id: 5, error: { code: 'FRAME_TOO_LARGE', details: { id: 5, limit: 64 * 1024 } } });
    ws.send(encodeFrame({ type: 'req', id: 6, method: 'system.info', params: {} }));
    expect(await answered(4)).toMatchObject({ type: 'res', id: 6 });
    ws.close();
  });

  it('keeps live connections through heartbeats and closes one that stops answering pings', async () => {
    await connectionsAtMost(2); // a's and b's: the connections of the tests before are closed
    const live = await Sandbox.connect(a.id, { baseUrl: warren.url, token: a.token });
    try {
      const { port } = new URL(warren.url);
      const socket = net.connect(Number(port), '127.0.0.1');
      let received = '';
      const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
      socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
      socket.write(
        [
          `GET /v1/sandboxes/${a.id}/connect HTTP/1.1`,
          `Host: 127.0.0.1:${port}`,
          'Upgrade: websocket',
          'Connection: Upgrade',
          `Sec-WebSocket-Key: ${randomBytes(16).toString('base64')}`,
          'Sec-WebSocket-Version: 13',
          `Authorization: Bearer ${a.token}`,
          '',
          '',
        ].join('\r\n'),
      );
      // This client never answers a ping: the controller closes it within a few heartbeats.
      await closed;
      expect(received).toMatch(/^HTTP\/1\.1 101/);
      // The well-behaved connection answered every ping (ws does) and still works.
      expect((await live.commands.run('echo alive')).stdout).toBe('alive\n');
    } finally {
      live.close();
    }
  });
});
