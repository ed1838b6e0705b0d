import { describe, expect, it } from '@jest/globals';
import { openApiDocument } from '../src/routes/openapi.js';
import { ROUTE_TAGS } from '../src/routes/route.js';
import { ROUTES } from '../src/routes/table.js';
import { API_KEY, startFakeHttpServer, type FakeHttpServer } from './http-server.js';

const auth = { authorization: `Bearer ${API_KEY}` };

type ErrorAnswer = { status: number; code: string; message: string; details?: Record<string, unknown> };

/** One REST call with the API key; the error's code, message and details when it is refused. */
async function call(server: FakeHttpServer, method: string, route: string, body?: string): Promise<ErrorAnswer> {
  const res = await fetch(`${server.url}${route}`, {
    method,
    headers: { ...auth, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body }),
  });
  const json = res.headers.get('content-type') === 'application/json' ? ((await res.json()) as { error?: Omit<ErrorAnswer, 'status'> }) : {};
  return {
    status: res.status,
    code: json.error?.code ?? 'ok',
    message: json.error?.message ?? '',
    ...(json.error?.details ? { details: json.error.details } : {}),
  };
}

describe('the route table parses each route’s inputs before its handler', () => {
  it('answers a wrong method 405 METHOD_NOT_ALLOWED with an Allow header naming the methods of the path', async () => {
    await using server = await startFakeHttpServer();
    const { id } = await server.sandboxes.create({});
    for (const [route, allowed] of [
      ['/v1/sandboxes', 'POST, GET'],
      [`/v1/sandboxes/${id}`, 'GET, DELETE'],
      [`/v1/sandboxes/${id}/network`, 'GET, POST'],
      ['/v1/images', 'GET, DELETE'],
      ['/healthz', 'GET'],
    ] as const) {
      const res = await fetch(`${server.url}${route}`, { method: 'PUT', headers: auth });
      const body = (await res.json()) as { error: { code: string; details: { allowed: string } } };
      expect([route, res.status, body.error.code, res.headers.get('allow'), body.error.details.allowed]).toEqual([
        route,
        405,
        'METHOD_NOT_ALLOWED',
        allowed,
        allowed,
      ]);
    }
  });

  it('refuses a bad body with INVALID_PARAMS naming the request, the issue and what to send', async () => {
    await using server = await startFakeHttpServer();
    const { id } = await server.sandboxes.create({});
    const timeout = await call(server, 'POST', `/v1/sandboxes/${id}/timeout`, '{"ttlSeconds":"soon"}');
    expect(timeout).toMatchObject({ status: 400, code: 'INVALID_PARAMS', details: { field: 'ttlSeconds' } });
    expect(timeout.message).toMatch(/^Invalid timeout request: ttlSeconds: .+\. Send \{ "ttlSeconds": <seconds from now> \}\.$/);
    const fork = await call(server, 'POST', `/v1/sandboxes/${id}/fork`, '{"count":0}');
    expect(fork).toMatchObject({ status: 400, code: 'INVALID_PARAMS', details: { field: 'count' } });
    expect(fork.message).toContain('Send { "count": <1-10> }.');
    expect(await call(server, 'POST', `/v1/sandboxes/${id}/timeout`, '{"ttl')).toMatchObject({ status: 400, message: 'Request body is not valid JSON.' });
    // Unknown create options are the schema's refusal; unhardening ones are refused by name first.
    expect((await call(server, 'POST', '/v1/sandboxes', '{"imagee":"x"}')).message).toMatch(/^Invalid sandbox request: .*Allowed create options: /);
    expect(await call(server, 'POST', '/v1/sandboxes', '{"privileged":true}')).toMatchObject({
      status: 403,
      code: 'FORBIDDEN',
      details: { field: 'privileged' },
    });
    expect(await call(server, 'POST', '/v1/sandboxes', '[]')).toMatchObject({ status: 400, message: expect.stringContaining('must be a JSON object') });
  });

  it('refuses a bad query parameter with its own message, and gives the handler typed values', async () => {
    await using server = await startFakeHttpServer();
    const { id } = await server.sandboxes.create({ labels: { team: 'red' } });
    await server.sandboxes.create({ labels: { team: 'blue' } });
    expect(await call(server, 'GET', '/v1/sandboxes?label=team')).toMatchObject({
      status: 400,
      code: 'INVALID_PARAMS',
      message: "Label filter 'team' is not key=value; use ?label=team=red.",
    });
    expect((await call(server, 'GET', '/v1/sandboxes?state=asleep')).message).toBe(
      "State filter 'asleep' is not one of running, paused, exited, gone, hibernated.",
    );
    expect((await call(server, 'GET', `/v1/sandboxes/${id}/metrics?history=maybe`)).message).toBe("?history= must be true or false, got 'maybe'.");
    expect((await call(server, 'GET', `/v1/sandboxes/${id}/audit?since=-1`)).message).toBe("?since= must be a whole number, got '-1'.");
    expect((await call(server, 'GET', `/v1/sandboxes/${id}/egress?limit=1.5`)).message).toBe("?limit= must be a whole number, got '1.5'.");
    expect((await call(server, 'DELETE', '/v1/images')).message).toBe('Name the image to remove: DELETE /v1/images?image=<id or name>.');
    expect((await call(server, 'POST', '/v1/images/build')).message).toMatch(/^Invalid build request: tag: .*Use \?tag=<name\[:tag\]>&dockerfile=<path>\.$/);
    const listed = await fetch(`${server.url}/v1/sandboxes?label=team=red&state=running`, { headers: auth });
    expect(((await listed.json()) as { sandboxes: { id: string }[] }).sandboxes.map((s) => s.id)).toEqual([id]);
    expect((await call(server, 'GET', `/v1/sandboxes/${id}/audit?since=&limit=5`)).status).toBe(200);
  });

  it('decodes and checks path parameters, refusing a path trick with the resource’s own message', async () => {
    await using server = await startFakeHttpServer();
    expect(await call(server, 'GET', '/v1/snapshots/..%2Fetc')).toMatchObject({
      status: 400,
      code: 'INVALID_PARAMS',
      message: expect.stringContaining("'../etc' is not a snapshot id or name"),
      details: { field: 'snapshot' },
    });
    expect(await call(server, 'DELETE', '/v1/volumes/a%2F..%2Fb')).toMatchObject({ status: 400, details: { field: 'volume' } });
    expect(await call(server, 'GET', '/v1/volumes/%E0%A4%A')).toMatchObject({ status: 400, code: 'INVALID_PARAMS', details: { field: 'volume' } });
    expect(await call(server, 'GET', '/v1/snapshots/nothing-here')).toMatchObject({ status: 404, code: 'SNAPSHOT_NOT_FOUND' });
  });

  it('leaves a hibernated sandbox asleep for the routes that say so, and wakes it for any other', async () => {
    await using server = await startFakeHttpServer();
    const { id } = await server.sandboxes.create({});
    const state = async (method: string, route: string) => {
      const res = await fetch(`${server.url}${route}`, { method, headers: auth });
      expect([route, res.status]).toEqual([route, 200]);
      return server.sandboxes.record(id).state;
    };
    expect(await state('POST', `/v1/sandboxes/${id}/hibernate`)).toBe('hibernated');
    expect(await state('GET', `/v1/sandboxes/${id}`)).toBe('hibernated');
    expect(await state('POST', `/v1/sandboxes/${id}/keepalive`)).toBe('hibernated');
    expect(await state('GET', `/v1/sandboxes/${id}/network`)).toBe('running');
  });

  it('tags every route with a resource the document lists, in the order of ROUTE_TAGS', () => {
    const document = openApiDocument(ROUTES) as { tags: { name: string }[]; paths: Record<string, Record<string, { tags: string[] }>> };
    expect(document.tags.map((tag) => tag.name)).toEqual(Object.keys(ROUTE_TAGS));
    for (const route of ROUTES) {
      expect([route.operationId, document.paths[route.path]![route.method.toLowerCase()]!.tags]).toEqual([route.operationId, [route.tag]]);
    }
    // Each tag's routes sit together, so the table reads (and the document lists) one resource at a time.
    const order = ROUTES.map((route) => route.tag).filter((tag, i, all) => all[i - 1] !== tag);
    expect(order).toEqual([...new Set(order)]);
  });
});
