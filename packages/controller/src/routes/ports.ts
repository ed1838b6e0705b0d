import { PortUrlRequest, PortUrlResponse, PublicPortRequest, PublicPortsResponse } from '@warren/protocol';
import { mintPortUrl } from '../ports/port-links.js';
import { sendJson } from './io.js';
import { defineRoute, type Route } from './route.js';

/** A sandbox's ports as a browser reaches them: signed expiring URLs, and ports opened to anyone (ports/proxy.ts serves both). */
export const PORT_ROUTES: readonly Route[] = [
  defineRoute({
    method: 'POST',
    path: '/v1/sandboxes/{id}/port-urls',
    operationId: 'signPortUrl',
    summary: 'A signed, expiring URL that opens one port of the sandbox in a browser (see /v1/sandboxes/{id}/ports/{port}/).',
    tag: 'ports',
    access: 'exec',
    body: { schema: PortUrlRequest, what: 'port URL request' },
    responses: { 201: { description: 'The URL path and when it stops working.', schema: PortUrlResponse } },
    // Never past the end of the credential that asks (a derived token's lifetime, its revocation): mintPortUrl bounds it.
    handle: async ({ deps, res, params, body, caller }) =>
      sendJson(res, 201, mintPortUrl(deps, caller!, deps.sandboxes.record(params.id), body.port, body.ttlSeconds)),
  }),
  defineRoute({
    method: 'POST',
    path: '/v1/sandboxes/{id}/public-ports',
    operationId: 'setPortPublic',
    summary: "Open one of the sandbox's ports to anyone without a credential (public: true), or close it again.",
    tag: 'ports',
    access: 'lifecycle',
    scope: 'ports:public',
    body: { schema: PublicPortRequest, what: 'public port request' },
    responses: { 200: { description: "The sandbox's public ports after the change.", schema: PublicPortsResponse } },
    handle: async ({ deps, res, params, body }) => sendJson(res, 200, { publicPorts: await deps.sandboxes.setPortPublic(params.id, body.port, body.public) }),
  }),
];
