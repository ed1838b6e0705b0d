import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { apiDocumentFiles, ROUTES } from '../src/routes/table.js';
import { openApiDocument } from '../src/routes/openapi.js';
import { DEFAULT_ADMIN } from '../src/tenancy/principals.js';
import { API_KEY, startFakeHttpServer } from './http-server.js';

const repo = path.resolve(import.meta.dirname, '..', '..', '..');
const HTTP_METHODS = ['GET', 'POST', 'DELETE', 'PUT', 'PATCH'];

type Operation = { operationId: string; security: unknown[]; 'x-warren-access': string };
type Document = { openapi: string; paths: Record<string, Record<string, Operation>>; components: { schemas: Record<string, unknown> } };
const document = openApiDocument(ROUTES) as unknown as Document;

/** Every `METHOD path` the document lists. */
function documented(doc: Document): string[] {
  return Object.entries(doc.paths).flatMap(([p, operations]) => Object.keys(operations).map((method) => `${method.toUpperCase()} ${p}`));
}

describe('the generated API documents', () => {
  it('are checked in as generated (run pnpm openapi after changing a route or a schema)', () => {
    for (const [file, text] of Object.entries(apiDocumentFiles())) {
      expect([file, readFileSync(path.join(repo, file), 'utf8') === text]).toEqual([file, true]);
    }
  });

  it('list every route of the route table with its method, and nothing else', () => {
    expect(documented(document).sort()).toEqual(ROUTES.map((route) => `${route.method} ${route.path}`).sort());
    expect(new Set(ROUTES.map((route) => route.operationId)).size).toBe(ROUTES.length);
    expect(document.openapi).toBe('3.1.0');
  });

  it('mark public routes as needing no credential, and the rest as needing a bearer token', () => {
    for (const route of ROUTES) {
      const operation = document.paths[route.path]![route.method.toLowerCase()]!;
      expect([route.path, operation.security]).toEqual([route.path, route.access === 'public' ? [] : [{ bearer: [] }]]);
      expect(operation['x-warren-access']).toBe(route.access);
    }
  });

  it('hold schemas a JSON Schema 2020-12 validator compiles, with every $ref resolvable', () => {
    const ajv = new Ajv2020({ strict: false });
    ajv.addSchema({ $id: 'openapi', components: document.components }, 'openapi');
    for (const name of Object.keys(document.components.schemas)) {
      expect(() => ajv.getSchema(`openapi#/components/schemas/${name}`)).not.toThrow();
    }
    const text = JSON.stringify(document);
    for (const [, name] of text.matchAll(/"#\/components\/schemas\/([A-Za-z]+)"/g)) expect(document.components.schemas).toHaveProperty(name!);
    const create = ajv.getSchema('openapi#/components/schemas/CreateSandboxRequest')!;
    expect(create({ image: 'warren/sandbox:latest', ttlSeconds: 600, labels: { task: 't-42' } })).toBe(true);
    expect(create({ privileged: true })).toBe(false);
    expect(create({ memoryMb: 1 })).toBe(false);
  });
});

describe('the HTTP server and its OpenAPI document agree', () => {
  it('answers every documented METHOD path (never 404 NOT_FOUND or 405), and 405 for every other method on those paths', async () => {
    await using server = await startFakeHttpServer();
    const auth = { authorization: `Bearer ${API_KEY}` };
    for (const [template, operations] of Object.entries(document.paths)) {
      for (const method of HTTP_METHODS) {
        // A fresh sandbox for each request, so a DELETE or a pause does not change the next one.
        const { id } = await server.sandboxes.create({});
        // Likewise a fresh webhook (its deliveries are dropped by the fake server, never sent).
        const webhook = template.includes('{webhook}')
          ? (await server.events.webhooks.register(DEFAULT_ADMIN, { url: 'http://127.0.0.1:9/hook' })).webhook.id
          : '';
        const res = await fetch(`${server.url}${template.replace('{id}', id).replace('{webhook}', webhook)}`, { method, headers: auth });
        const json = res.headers.get('content-type') === 'application/json';
        const code = json ? (((await res.json()) as { error?: { code: string } }).error?.code ?? 'ok') : (await res.text(), 'ok');
        if (Object.hasOwn(operations, method.toLowerCase())) {
          expect([method, template, code]).not.toEqual([method, template, 'NOT_FOUND']);
          expect([method, template, res.status]).not.toEqual([method, template, 405]);
          expect([method, template, res.status < 500]).toEqual([method, template, true]);
        } else {
          expect([method, template, res.status, code]).toEqual([method, template, 405, 'METHOD_NOT_ALLOWED']);
        }
        if (server.sandboxes.has(id)) await server.sandboxes.kill(id); // stay under maxSandboxes however many routes there are
      }
    }
  });

  it('answers 404 NOT_FOUND for paths the document does not have', async () => {
    await using server = await startFakeHttpServer();
    for (const route of ['/', '/v1', '/v1/openapi', '/v2/sandboxes', '/v1/sandboxes/abc/nope', '/v1/sandboxes/abc/audit/x', '/healthz/x']) {
      const res = await fetch(`${server.url}${route}`, { headers: { authorization: `Bearer ${API_KEY}` } });
      expect([route, res.status, ((await res.json()) as { error: { code: string } }).error.code]).toEqual([route, 404, 'NOT_FOUND']);
    }
  });

  it('serves the document at GET /v1/openapi.json without a credential', async () => {
    await using server = await startFakeHttpServer();
    const res = await fetch(`${server.url}/v1/openapi.json`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual(JSON.parse(apiDocumentFiles()['docs/openapi.json']!));
  });
});
