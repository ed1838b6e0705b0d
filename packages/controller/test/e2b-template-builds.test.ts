import { Readable } from 'node:stream';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, expect, it } from '@jest/globals';
import type { ImageInfo } from '@warren/protocol';
import { loadConfig } from '../src/config.js';
import { Credentials } from '../src/credentials.js';
import { TemplateBuilds } from '../src/e2b/template-builds/builds.js';
import { toE2bHttpError } from '../src/e2b/errors.js';
import { silentLogger } from '../src/logger.js';
import type { HttpServerDeps } from '../src/server-context.js';

const KEY = 'wk_template_unit_key_0123456789abcdef';

/** The template routes over a fake image service: no engine, an injected clock. */
async function setup() {
  const credentials = Credentials.inMemory(KEY);
  const builds: { tag: string; tenant: string; context: Buffer }[] = [];
  const images: ImageInfo[] = [];
  const fakeImages = {
    list: async () => images,
    withBuildSlot: async <T>(work: () => Promise<T>) => work(),
    build: async (context: Buffer, request: { tag: string }, watch: { onOutput?: (text: string) => void }, tenant: string) => {
      builds.push({ tag: request.tag, tenant, context });
      watch.onOutput?.('Step 1/3 : FROM warren/e2b-base:latest\nStep 3/3 : RUN ["/bin/sh","-c","true"]\nran\n');
      images.push({ id: `sha256:${'c'.repeat(64)}`, tags: [request.tag], createdAt: new Date(0).toISOString(), sizeBytes: 1 });
      return { image: request.tag, id: `sha256:${'c'.repeat(64)}` };
    },
    remove: async () => undefined,
  };
  const deps = {
    credentials,
    config: loadConfig({}),
    logger: silentLogger(),
    sandboxes: { images: fakeImages },
  } as unknown as HttpServerDeps;
  let now = 1_000_000;
  const templates = new TemplateBuilds(deps, () => now);
  /** One request through the template routes: its status and JSON body (undefined when another service answers). */
  const send = async (method: string, route: string, body?: unknown, headers: Record<string, string> = { 'x-api-key': KEY }) => {
    const url = new URL(route, 'http://controller');
    const data = body === undefined ? [] : [Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body))];
    const req = Object.assign(Readable.from(data), {
      method,
      url: `/e2b${url.pathname}${url.search}`,
      headers: { host: 'controller', ...headers },
    }) as unknown as IncomingMessage;
    let status = 0;
    let text = '';
    const res = {
      writeHead(code: number) {
        status = code;
        return res;
      },
      end(chunk?: string) {
        text = chunk ?? '';
      },
    } as unknown as ServerResponse;
    try {
      const served = await templates.serve(req, res, url.pathname, url.searchParams);
      if (!served) return { status: 0, body: undefined };
    } catch (err) {
      const e = toE2bHttpError(err);
      return { status: e.status, body: { message: e.message } as Record<string, unknown> };
    }
    return { status, body: text === '' ? undefined : (JSON.parse(text) as Record<string, unknown>) };
  };
  return { send, builds, advance: (ms: number) => (now += ms) };
}

describe('E2B template builds, without an engine', () => {
  it('runs a build from request to ready: upload link, upload, start, status with logs by offset, then list and describe', async () => {
    const { send, builds } = await setup();
    const made = await send('POST', '/v3/templates', { name: 'app:v1' });
    expect(made).toMatchObject({ status: 202, body: { templateID: 'app', tags: ['v1'] } });
    const buildID = made.body!.buildID as string;
    const hash = 'd'.repeat(64);
    const link = await send('GET', `/templates/app/files/${hash}`);
    expect(link).toMatchObject({
      status: 201,
      body: { present: false, url: expect.stringMatching(/^http:\/\/controller\/e2b\/templates\/app\/files\/d{64}\?build=.+&token=.+$/) },
    });
    const upload = new URL(link.body!.url as string);
    // Without its token the link is refused; with it, the files are kept, and the link then says present.
    expect((await send('PUT', `/templates/app/files/${hash}?build=${buildID}&token=nope`, Buffer.from('x'), {})).status).toBe(403);
    const tar = Buffer.alloc(1024); // an empty tar archive
    expect((await send('PUT', `${upload.pathname.replace('/e2b', '')}${upload.search}`, tar, {})).status).toBe(200);
    expect((await send('GET', `/templates/app/files/${hash}`)).body).toEqual({ present: true });

    const started = await send('POST', `/v2/templates/app/builds/${buildID}`, {
      fromImage: 'e2bdev/base',
      steps: [{ type: 'COPY', args: ['.', '/opt/app/'], filesHash: hash }],
    });
    expect(started.status).toBe(202);
    await new Promise((resolve) => setImmediate(resolve));
    expect(builds).toEqual([expect.objectContaining({ tag: 'e2b/default/app:v1', tenant: 'default' })]);
    const status = await send('GET', `/templates/app/builds/${buildID}/status?logsOffset=1`);
    expect(status.body).toMatchObject({ status: 'ready', templateID: 'app', buildID });
    const entries = status.body!.logEntries as { message: string; step?: string }[];
    // Offset 1 skips the first entry; each line carries the E2B step the engine was on.
    expect(entries.map((e) => [e.message, e.step])).toEqual([
      ['Step 1/3 : FROM warren/e2b-base:latest', 'base'],
      ['Step 3/3 : RUN ["/bin/sh","-c","true"]', '1'],
      ['ran', '1'],
      [expect.stringMatching(/^Built e2b\/default\/app:v1/), undefined],
    ]);
    // Its link dies with the start.
    expect((await send('PUT', `${upload.pathname.replace('/e2b', '')}${upload.search}`, tar, {})).status).toBe(403);

    const listed = (await send('GET', '/templates')).body as unknown as { templateID: string; public: boolean }[];
    expect(listed.map((t) => [t.templateID, t.public])).toEqual([
      ['base', true],
      ['code-interpreter-v1', true],
      ['app', false],
    ]);
    expect((await send('GET', '/templates/app')).body).toMatchObject({ templateID: 'app', builds: [{ status: 'ready' }] });
    expect((await send('GET', '/templates/aliases/app')).status).toBe(200);
    expect((await send('GET', '/templates/aliases/nope')).status).toBe(404);
    // A delete of something that is not a built template goes on to the snapshot route.
    expect((await send('DELETE', '/templates/snap-123')).status).toBe(0);
  });

  it('holds at most 4 waiting builds per tenant, lets a new request of a name replace its waiting build, and forgets builds after an hour', async () => {
    const { send, advance } = await setup();
    const first = await send('POST', '/v3/templates', { name: 'a' });
    const again = await send('POST', '/v3/templates', { name: 'a' });
    expect((await send('GET', `/templates/a/builds/${first.body!.buildID as string}/status`)).status).toBe(404);
    for (const name of ['b', 'c', 'd']) expect((await send('POST', '/v3/templates', { name })).status).toBe(202);
    expect(await send('POST', '/v3/templates', { name: 'e' })).toMatchObject({ status: 429, body: { message: expect.stringMatching(/at most 4/) } });
    advance(60 * 60 * 1000 + 1);
    expect((await send('GET', `/templates/a/builds/${again.body!.buildID as string}/status`)).status).toBe(404);
    expect((await send('POST', '/v3/templates', { name: 'e' })).status).toBe(202);
  });

  it('refuses what it cannot build with the reason, and ends a build whose start is refused', async () => {
    const { send } = await setup();
    expect((await send('POST', '/v3/templates', { name: 'x', tags: ['a', 'b'] })).status).toBe(501);
    expect(await send('POST', '/v3/templates', {})).toMatchObject({ status: 400, body: { message: expect.stringMatching(/Name the template/) } });
    expect((await send('POST', '/v3/templates', { name: 'x' }, {})).status).toBe(401);
    const made = await send('POST', '/v3/templates', { name: 'x' });
    const buildID = made.body!.buildID as string;
    const start = await send('POST', `/v2/templates/x/builds/${buildID}`, { steps: [{ type: 'COPY', args: ['a', '/b'], filesHash: 'e'.repeat(64) }] });
    expect(start).toMatchObject({ status: 400, body: { message: expect.stringMatching(/were not uploaded/) } });
    expect((await send('GET', `/templates/x/builds/${buildID}/status`)).body).toMatchObject({
      status: 'error',
      reason: { message: expect.stringMatching(/were not uploaded/) },
    });
    expect((await send('POST', `/v2/templates/x/builds/${buildID}`, { steps: [] })).status).toBe(409);
    const second = (await send('POST', '/v3/templates', { name: 'x' })).body!.buildID as string;
    expect((await send('POST', `/v2/templates/x/builds/${second}`, { startCmd: 'sleep 1' })).status).toBe(501);
    const third = (await send('POST', '/v3/templates', { name: 'x' })).body!.buildID as string;
    expect((await send('POST', `/v2/templates/x/builds/${third}`, { fromImageRegistry: { type: 'registry', username: 'u', password: 'p' } })).status).toBe(501);
  });
});
