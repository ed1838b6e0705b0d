import { protocolJsonSchema } from '@warren/protocol';
import { z } from 'zod';
import { ACCESS_ROUTES } from './access.js';
import { EVENT_ROUTES } from './events.js';
import { IMAGE_ROUTES } from './images.js';
import { sendJson } from './io.js';
import { NETWORK_ROUTES } from './network.js';
import { openApiDocument } from './openapi.js';
import { PORT_ROUTES } from './ports.js';
import { defineRoute, matchRoute, type Route } from './route.js';
import { SANDBOX_ROUTES } from './sandboxes.js';
import { SNAPSHOT_ROUTES } from './snapshots.js';
import { SYSTEM_ROUTES } from './system.js';
import { TENANCY_ROUTES } from './tenancy.js';
import { VOLUME_ROUTES } from './volumes.js';

let document: Record<string, unknown> | undefined;

/** `GET /v1/openapi.json`: the document made from this table (so it lives here, beside what it describes). */
const OPENAPI_ROUTE = defineRoute({
  method: 'GET',
  path: '/v1/openapi.json',
  operationId: 'openapi',
  summary: 'This OpenAPI document. Public: it describes the API and holds no secret.',
  tag: 'system',
  access: 'public',
  responses: { 200: { description: 'An OpenAPI 3.1 document.', schema: z.looseObject({ openapi: z.string() }) } },
  handle: async ({ res }) => sendJson(res, 200, (document ??= openApiDocument(ROUTES))),
});

/**
 * Every route the controller's HTTP server answers, the one place a route is declared, grouped by
 * resource (its tag) in the order the OpenAPI document lists them. Each route names its kind of
 * access; the rule table in grants.ts decides, as it does for the WebSocket methods that do the
 * same things (audit.list, system.info).
 */
export const ROUTES: readonly Route[] = [
  ...SYSTEM_ROUTES,
  OPENAPI_ROUTE,
  ...SANDBOX_ROUTES,
  ...ACCESS_ROUTES,
  ...NETWORK_ROUTES,
  ...PORT_ROUTES,
  ...SNAPSHOT_ROUTES,
  ...VOLUME_ROUTES,
  ...IMAGE_ROUTES,
  ...TENANCY_ROUTES,
  ...EVENT_ROUTES,
];

/**
 * The routes whose path matches `pathname`, with the sandbox id it names (empty when none) and
 * every path parameter as the path spells it.
 *
 * @example
 * routesAt('/v1/sandboxes/abc/pause'); // { routes: [pause], id: 'abc', params: { id: 'abc' } }
 */
export function routesAt(pathname: string): { routes: Route[]; id: string; params: Record<string, string> } {
  const found: { route: Route; params: Record<string, string> }[] = [];
  for (const route of ROUTES) {
    const params = matchRoute(route, pathname);
    if (params) found.push({ route, params });
  }
  // A path of its own (`/v1/snapshots/prune`) is never also a snapshot's name.
  const literal = found.filter(({ route }) => !route.path.includes('{snapshot}') && !route.path.includes('{volume}'));
  const chosen = literal.length > 0 ? literal : found;
  const params = chosen[0]?.params ?? {};
  return { routes: chosen.map(({ route }) => route), id: params.id ?? '', params };
}

/** Every route, as `METHOD path` lines for a NOT_FOUND message. */
export function routeList(): string {
  return ROUTES.map((route) => `${route.method} ${route.path}`).join(', ');
}

/**
 * The methods a path answers, for the `Allow` header of a 405 (RFC 9110: a 405 must carry one).
 *
 * @example
 * allowedMethods(routesAt('/v1/sandboxes').routes); // 'POST, GET'
 */
export function allowedMethods(routes: readonly Route[]): string {
  return [...new Set(routes.map((route) => route.method))].join(', ');
}

/**
 * The generated API documents as the repository keeps them, by path from the repository's root:
 * docs/openapi.json (the REST API) and docs/protocol.schema.json (the WebSocket methods).
 * `pnpm openapi` writes them; a unit test fails when the checked-in ones differ.
 *
 * @example
 * for (const [file, text] of Object.entries(apiDocumentFiles())) writeFileSync(file, text);
 */
export function apiDocumentFiles(): Record<string, string> {
  const text = (document: unknown) => `${JSON.stringify(document, null, 2)}\n`;
  return { 'docs/openapi.json': text(openApiDocument(ROUTES)), 'docs/protocol.schema.json': text(protocolJsonSchema()) };
}
