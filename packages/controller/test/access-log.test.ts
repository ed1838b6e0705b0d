import { describe, expect, it } from '@jest/globals';
import { WebSocket } from 'ws';
import { createLogger, REDACTED } from '../src/logger.js';
import { API_KEY, startFakeHttpServer } from './http-server.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Waits for the access line of the request with this id (it is written when the answer has gone out). */
async function accessLine(lines: { msg: string; requestId?: unknown }[], event: string, requestId: string) {
  for (;;) {
    const line = lines.find((l) => l.msg === event && l.requestId === requestId);
    if (line) return line;
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('request ids', () => {
  it('keeps a sane incoming X-Request-Id, echoes it, and logs one access line with it', async () => {
    await using server = await startFakeHttpServer();
    const res = await fetch(`${server.url}/v1/sandboxes`, { headers: { authorization: `Bearer ${API_KEY}`, 'x-request-id': 'req-42.a:b_c' } });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-request-id')).toBe('req-42.a:b_c');
    expect(await accessLine(server.lines, 'http.request', 'req-42.a:b_c')).toMatchObject({
      level: 'info',
      method: 'GET',
      path: '/v1/sandboxes',
      status: 200,
      caller: 'operator',
      durationMs: expect.any(Number),
    });
    expect(server.lines.filter((l) => l.msg === 'http.request')).toHaveLength(1);
  });

  it.each([
    ['spaces and quotes', 'a b"c'],
    ['too long', 'x'.repeat(129)],
    ['empty', ''],
  ])('replaces an incoming id that is %s with a fresh UUID', async (_what, given) => {
    await using server = await startFakeHttpServer();
    const res = await fetch(`${server.url}/healthz`, { headers: { 'x-request-id': given } });
    const id = res.headers.get('x-request-id')!;
    expect(id).toMatch(UUID);
    expect(await accessLine(server.lines, 'http.request', id)).toMatchObject({ path: '/healthz', status: 200 });
    if (given) expect(server.raw.join('')).not.toContain(given);
  });

  it('makes a new id per request when none is sent, and logs errors with their code', async () => {
    await using server = await startFakeHttpServer();
    const [a, b] = await Promise.all([fetch(`${server.url}/healthz`), fetch(`${server.url}/v1/sandboxes`)]);
    const [idA, idB] = [a.headers.get('x-request-id')!, b.headers.get('x-request-id')!];
    expect(idA).toMatch(UUID);
    expect(idB).toMatch(UUID);
    expect(idA).not.toBe(idB);
    expect(await accessLine(server.lines, 'http.request', idB)).toMatchObject({ status: 401, code: 'UNAUTHORIZED' });
  });

  it('gives a refused WebSocket upgrade the id and an access line with its status', async () => {
    await using server = await startFakeHttpServer();
    const { id } = await server.sandboxes.create({});
    const ws = new WebSocket(`${server.url.replace('http', 'ws')}/v1/sandboxes/${id}/connect`, {
      headers: { authorization: 'Bearer wst_not-a-token', 'x-request-id': 'upgrade-7' },
    });
    const answer = await new Promise<{ status: number; requestId: string | undefined }>((resolve) =>
      ws.on('unexpected-response', (_req, res) => resolve({ status: res.statusCode!, requestId: res.headers['x-request-id'] as string | undefined })),
    );
    ws.on('error', () => undefined);
    ws.terminate();
    expect(answer).toEqual({ status: 401, requestId: 'upgrade-7' });
    expect(await accessLine(server.lines, 'ws.connect', 'upgrade-7')).toMatchObject({ status: 401, code: 'UNAUTHORIZED', sandboxId: id });
  });
});

describe('what the log never holds', () => {
  it('no API key, no sandbox token, no request body and no query string, on any line', async () => {
    await using server = await startFakeHttpServer();
    const created = await fetch(`${server.url}/v1/sandboxes`, {
      method: 'POST',
      headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ env: { DB_PASSWORD: 'body-secret-1234' }, labels: { task: 'label-in-body' } }),
    });
    expect(created.status).toBe(201);
    const { id, token } = (await created.json()) as { id: string; token: string };
    const sandboxCall = await fetch(`${server.url}/v1/sandboxes/${id}?token=query-secret-5678`, { headers: { authorization: `Bearer ${token}` } });
    expect(sandboxCall.status).toBe(200);
    await accessLine(server.lines, 'http.request', sandboxCall.headers.get('x-request-id')!);
    const all = server.raw.join('');
    expect(server.lines.map((l) => l.msg)).toEqual(['sandbox.created', 'http.request', 'http.request']);
    for (const secret of [API_KEY, token, 'body-secret-1234', 'label-in-body', 'query-secret-5678'])
      expect([secret, all.includes(secret)]).toEqual([secret, false]);
  });

  it('redacts credentials by field name, at the top of a line and one level down', () => {
    const raw: string[] = [];
    const logger = createLogger({ destination: { write: (line: string) => void raw.push(line) } });
    logger.info(
      { token: 't1', apiKey: 'k1', sandbox: { token: 't2', secret: 's2' }, headers: { authorization: 'Bearer a1', 'x-api-key': 'k2', host: 'h' } },
      'x',
    );
    const line = JSON.parse(raw[0]!) as Record<string, unknown>;
    expect(line).toMatchObject({
      msg: 'x',
      level: 'info',
      token: REDACTED,
      apiKey: REDACTED,
      sandbox: { token: REDACTED, secret: REDACTED },
      headers: { authorization: REDACTED, 'x-api-key': REDACTED, host: 'h' },
    });
    for (const secret of ['t1', 'k1', 't2', 's2', 'a1', 'k2']) expect(raw[0]).not.toContain(`"${secret}"`);
  });

  it("names what happened under pino's msg key, so tools for pino read the lines", () => {
    const raw: string[] = [];
    createLogger({ destination: { write: (line: string) => void raw.push(line) } }).info({ sandboxId: 's1' }, 'sandbox.created');
    const line = JSON.parse(raw[0]!) as Record<string, unknown>;
    expect(line).toMatchObject({ msg: 'sandbox.created', level: 'info', sandboxId: 's1' });
    expect(line).not.toHaveProperty('event');
    expect(line).not.toHaveProperty('message');
  });

  it('writes nothing below its level', () => {
    const raw: string[] = [];
    const logger = createLogger({ level: 'warn', destination: { write: (line: string) => void raw.push(line) } });
    logger.info('quiet');
    logger.debug('quieter');
    logger.warn('loud');
    expect(raw.map((line) => (JSON.parse(line) as { msg: string; level: string }).msg)).toEqual(['loud']);
  });
});

describe('/metrics', () => {
  it("has the process's default metrics beside Warren's own, for the API key only", async () => {
    await using server = await startFakeHttpServer();
    expect((await fetch(`${server.url}/metrics`)).status).toBe(401);
    const res = await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${API_KEY}` } });
    expect(res.status).toBe(200);
    const text = await res.text();
    for (const name of [
      'process_cpu_user_seconds_total',
      'process_resident_memory_bytes',
      'nodejs_eventloop_lag_seconds',
      'nodejs_heap_size_used_bytes',
      'warren_sandboxes',
      'warren_calls_total',
    ])
      expect([name, new RegExp(`^# TYPE ${name} `, 'm').test(text)]).toEqual([name, true]);
  });
});
