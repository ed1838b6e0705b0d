import { CodedError } from '@warren/protocol';
import { z } from 'zod';
import { sendJson } from './io.js';
import { defineRoute, type Route } from './route.js';

/** `GET /healthz`: the process answers. */
export const HealthResponse = z.strictObject({ status: z.literal('ok') });
/** `GET /readyz`: the engine answers and the default image is there, with what the controller knows of the host. */
export const ReadyResponse = z.looseObject({ status: z.literal('ready'), provider: z.string(), defaultImage: z.string() });

/** The controller's own routes: liveness, readiness and metrics (the OpenAPI document's route is in the table, which it describes). */
export const SYSTEM_ROUTES: readonly Route[] = [
  defineRoute({
    method: 'GET',
    path: '/healthz',
    operationId: 'health',
    summary: 'Liveness: the controller process answers.',
    tag: 'system',
    access: 'public',
    responses: { 200: { description: 'The process is up.', schema: HealthResponse } },
    handle: async ({ res }) => sendJson(res, 200, { status: 'ok' }),
  }),
  defineRoute({
    method: 'GET',
    path: '/readyz',
    operationId: 'ready',
    summary: 'Readiness: the Docker engine answers and the default image is present (503 SANDBOX_NOT_READY otherwise).',
    tag: 'system',
    access: 'public',
    responses: { 200: { description: 'Ready, with the engine isolation report and the default sandbox hardening.', schema: ReadyResponse } },
    handle: async ({ deps, res }) => {
      const checks = await deps.readiness().catch((err: unknown) => {
        throw new CodedError('SANDBOX_NOT_READY', `Not ready: ${(err as Error).message}`);
      });
      sendJson(res, 200, { status: 'ready', ...checks });
    },
  }),
  defineRoute({
    method: 'GET',
    path: '/metrics',
    operationId: 'metrics',
    summary: "Prometheus metrics: Warren's own and the process's (CPU, memory, event loop, file descriptors).",
    tag: 'system',
    access: 'admin',
    responses: { 200: { description: 'The Prometheus text exposition format.', contentType: 'text/plain; version=0.0.4' } },
    handle: async ({ deps, res }) => {
      const text = await deps.metrics.registry.metrics();
      res.writeHead(200, { 'content-type': deps.metrics.registry.contentType }).end(text);
    },
  }),
];
