import { keyNotFound, TenantName } from '../tenancy/principals.js';
import type { Scope } from '../tenancy/principals.js';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { CodedError, SnapshotName, VolumeName, issueText } from '@warren/protocol';
import { z } from 'zod';
import type { Access, Caller } from '../grants.js';
import type { HttpServerDeps } from '../server-context.js';
import { badSnapshotRef } from '../snapshot-store.js';
import { badVolumeName } from '../volumes.js';
import { noWebhook, WebhookId } from '../events/webhooks.js';
import { readJson } from './io.js';

/** The HTTP methods Warren's routes use. */
export type HttpMethod = 'GET' | 'POST' | 'DELETE';

/**
 * Who may use a route: `public` needs no credential; any other value is a kind of access that the
 * rule table in grants.ts decides for the caller (`operator` is the API key only; the rest are
 * decided on the sandbox the path names).
 */
export type RouteAccess = 'public' | Access;

/** The groups of the OpenAPI document, one per resource, in the order it lists them; each route names one. */
export const ROUTE_TAGS = {
  system: 'Health, readiness, metrics and this document.',
  sandboxes: 'Create, find, describe and end sandboxes, and their power: pause, resume, hibernate, expiry.',
  access: 'Tokens derived from a credential, and the audit log of the calls a sandbox served.',
  network: "A sandbox's egress policy and the egress gateway's log.",
  ports: "A sandbox's ports: signed URLs and public ports.",
  snapshots: "Snapshots of a sandbox's files, and forks from its current state.",
  volumes: 'Named volumes: storage that outlives sandboxes.',
  images: 'Images Warren pulls and builds.',
  tenancy: "API keys, tenants' usage and limits, and token revocation.",
  events: 'Sandbox lifecycle events: the log, read by cursor, and webhooks that receive them (docs/events.md).',
} as const;

/** The resource a route belongs to (its OpenAPI tag). */
export type RouteTag = keyof typeof ROUTE_TAGS;

/**
 * The names a path template may hold, each with the schema its value must match once
 * percent-decoded, the refusal for one that does not, and its description in the OpenAPI document.
 */
export const PATH_PARAMETERS = {
  id: {
    description: 'The sandbox id.',
    // The router's pattern only matches these characters, so the refusal is never reached from a request.
    schema: z.string().regex(/^[A-Za-z0-9]+$/),
    pattern: '[A-Za-z0-9]+',
    invalid: (value: string) => new CodedError('SANDBOX_NOT_FOUND', `No sandbox '${value.slice(0, 80)}'.`, { sandboxId: value.slice(0, 80) }),
  },
  snapshot: {
    description: "The snapshot's id or name (one of the caller's tenant).",
    schema: SnapshotName,
    pattern: '[^/]+',
    invalid: badSnapshotRef,
  },
  volume: {
    description: "The volume's name (one of the caller's tenant).",
    schema: VolumeName,
    pattern: '[^/]+',
    invalid: badVolumeName,
  },
  key: {
    description: "An API key's id (16 hex digits; never its secret).",
    schema: z.string().regex(/^[0-9a-f]{16}$/),
    pattern: '[^/]+',
    invalid: keyNotFound,
  },
  tenant: {
    description: "A tenant's name (lowercase letters, digits and -).",
    schema: TenantName,
    pattern: '[^/]+',
    invalid: (value: string) =>
      new CodedError('INVALID_PARAMS', `'${value.slice(0, 64)}' is not a tenant name: lowercase letters, digits and -, at most 63.`, { field: 'tenant' }),
  },
  webhook: {
    description: "The webhook's id (one of the caller's tenant).",
    schema: WebhookId,
    pattern: '[^/]+',
    invalid: noWebhook,
  },
} as const;

type ParamName = keyof typeof PATH_PARAMETERS;

/** The parameter names of a path template: `'/v1/snapshots/{snapshot}'` gives `'snapshot'`. */
type ParamNames<P extends string> = P extends `${string}{${infer N}}${infer Rest}` ? N | ParamNames<Rest> : never;

/** A route's path parameters, decoded and checked. */
export type PathParams<P extends string> = { readonly [K in ParamNames<P>]: string };

/**
 * A route's JSON body: the schema it is parsed with (the one the OpenAPI document shows), and how a
 * refusal names it: `Invalid <what>: <issues>. <hint>` (INVALID_PARAMS, `details.field` the first
 * issue's path). An empty body or JSON `null` is read as `{}`.
 */
export interface BodyInput<S extends z.ZodType> {
  schema: S;
  what: string;
  /** What to send instead, said after the issues (from the server's settings where it names a limit). */
  hint?: string | ((deps: HttpServerDeps) => string);
  /** Checks that run on the raw body before the schema and throw their own refusal (a hostile field is FORBIDDEN, not a schema error). */
  before?: (raw: unknown) => void;
}

/**
 * A route's query: an object schema whose fields are its parameters (a field that is an array
 * takes the parameter each time it is given), with each one's description for the document. Without
 * `what`, a refusal is the first issue's own message (written in the field's schema); with it, as
 * for a body.
 */
export interface QueryInput<S extends z.ZodObject> {
  schema: S;
  parameters: { readonly [K in keyof S['shape'] & string]: string };
  what?: string;
  hint?: string;
}

/** What a route's handler gets: the request, the answer, its inputs already parsed, and who is calling. */
export interface RouteContext<P, Q, B> {
  deps: HttpServerDeps;
  req: IncomingMessage;
  res: ServerResponse;
  /** The path's parameters, percent-decoded and checked (`params.id` is the sandbox's id). */
  params: P;
  /** The query, parsed by the route's query schema (`{}` on a route without one). */
  query: Q;
  /** The JSON body, parsed by the route's body schema (undefined on a route without one; its body is not read). */
  body: B;
  /** Who is calling; undefined on public routes. */
  caller: Caller | undefined;
}

/** One answer a route gives: JSON with a schema, another content type, or no body. */
export interface RouteResponse {
  description: string;
  schema?: z.ZodType;
  /** A content type other than JSON (with a schema: of each line or part; without one the body is described in words only). */
  contentType?: string;
}

/** What the router hands a route once it has matched, authenticated and authorised the request. */
export interface RouteRequest {
  deps: HttpServerDeps;
  req: IncomingMessage;
  res: ServerResponse;
  url: URL;
  /** The path's parameters as the path spells them (percent-encoded). */
  params: Readonly<Record<string, string>>;
  caller: Caller | undefined;
}

/** What a route says of itself, for the router and the OpenAPI document. */
interface RouteInfo {
  method: HttpMethod;
  operationId: string;
  summary: string;
  tag: RouteTag;
  access: RouteAccess;
  /** A body that is not JSON (a tar archive), described in words; the handler reads it. */
  rawBody?: { contentType: string; description: string };
  /** The answers on success, by status; every route may also answer an error (`RestErrorBody`). */
  responses: Readonly<Record<number, RouteResponse>>;
  /** A WebSocket upgrade: the upgrade handler serves it; a plain request gets a typed refusal. */
  websocket?: boolean;
  /** A hibernated sandbox the path names stays asleep for this route; any other route wakes it first. */
  staysAsleep?: boolean;
  /** The scope a key needs for this route beyond its access (tenancy/principals.ts `SCOPES`). */
  scope?: Scope;
}

/** A route as {@link defineRoute} takes it: its handler is typed by its path, query and body schemas. */
export interface RouteSpec<P extends string, Q extends z.ZodObject, B extends z.ZodType> extends RouteInfo {
  /** The path, with `{id}`, `{snapshot}` or `{volume}` where a parameter goes (OpenAPI's template syntax). */
  path: P;
  query?: QueryInput<Q>;
  body?: BodyInput<B>;
  handle: (ctx: RouteContext<PathParams<P>, z.output<Q>, z.output<B>>) => Promise<void>;
}

/**
 * One route of the controller's HTTP server. The router dispatches on the table of them, and the
 * OpenAPI document (`GET /v1/openapi.json`, docs/openapi.json) is made from it, so a route cannot
 * exist without being documented, and its inputs are checked by the schemas the document shows.
 */
export interface Route extends RouteInfo {
  path: string;
  /** The path as a pattern, with one named group per parameter. */
  pattern: RegExp;
  query?: QueryInput<z.ZodObject>;
  body?: BodyInput<z.ZodType>;
  /** Parses the request's path parameters, query and body, then runs the handler. */
  serve(request: RouteRequest): Promise<void>;
}

/**
 * A route of the table, its handler typed by its own schemas: the router parses the path
 * parameters, the query and the JSON body before the handler runs, so no handler parses by hand.
 *
 * @example
 * defineRoute({
 *   method: 'POST', path: '/v1/sandboxes/{id}/timeout', operationId: 'setTimeout', tag: 'sandboxes',
 *   summary: 'Set the expiry.', access: 'lifecycle', responses: { 200: { description: 'The sandbox.' } },
 *   body: { schema: SetTimeoutRequest, what: 'timeout request' },
 *   handle: async ({ deps, res, params, body }) => sendJson(res, 200, await deps.sandboxes.setTimeout(params.id, body.ttlSeconds)),
 * });
 */
export function defineRoute<const P extends string, Q extends z.ZodObject = z.ZodObject<Record<never, never>>, B extends z.ZodType = z.ZodUndefined>(
  spec: RouteSpec<P, Q, B>,
): Route {
  const { handle: _handle, ...info } = spec;
  const names = [...spec.path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1] as string);
  for (const name of names) if (!Object.hasOwn(PATH_PARAMETERS, name)) throw new Error(`Route ${spec.path}: no path parameter '${name}' in PATH_PARAMETERS.`);
  const pattern = new RegExp(`^${spec.path.replace(/\{([^}]+)\}/g, (_, name: ParamName) => `(?<${name}>${PATH_PARAMETERS[name].pattern})`)}$`);
  return {
    ...info,
    pattern,
    query: spec.query,
    body: spec.body,
    async serve({ deps, req, res, url, params, caller }) {
      const decoded = decodeParams(names as ParamNames<P>[], params);
      const query = spec.query ? parseQuery(spec.query, url.searchParams) : ({} as z.output<Q>);
      const body = spec.body ? parseBody(spec.body, await readJson(req), deps) : (undefined as z.output<B>);
      await spec.handle({ deps, req, res, params: decoded, query, body, caller });
    },
  };
}

/** Decodes and checks each path parameter; a value its schema refuses gets that parameter's own refusal. */
function decodeParams<N extends string>(names: readonly N[], raw: Readonly<Record<string, string>>): { readonly [K in N]: string } {
  const out: Record<string, string> = {};
  for (const name of names) {
    const segment = raw[name] ?? '';
    let value: string;
    try {
      value = decodeURIComponent(segment);
    } catch {
      throw new CodedError('INVALID_PARAMS', `The ${name} in the path is not valid percent-encoding; name it by its id or name.`, { field: name });
    }
    const parameter = PATH_PARAMETERS[name as unknown as ParamName];
    if (!parameter.schema.safeParse(value).success) throw parameter.invalid(value);
    out[name] = value;
  }
  return out as { readonly [K in N]: string };
}

/** A query's parameters as its schema's fields: an array field takes every value given, any other field the first. */
function parseQuery<S extends z.ZodObject>(input: QueryInput<S>, search: URLSearchParams): z.output<S> {
  const raw: Record<string, unknown> = {};
  for (const [name, field] of Object.entries(input.schema.shape)) {
    if (isArrayField(field as z.ZodType)) raw[name] = search.getAll(name);
    else if (search.has(name)) raw[name] = search.get(name);
  }
  const parsed = input.schema.safeParse(raw);
  if (parsed.success) return parsed.data;
  throw refusal(parsed.error.issues, input.what, input.hint);
}

/** Parses a JSON body (already read); the route's `before` checks run first. */
function parseBody<S extends z.ZodType>(input: BodyInput<S>, raw: unknown, deps: HttpServerDeps): z.output<S> {
  input.before?.(raw);
  const parsed = input.schema.safeParse(raw ?? {});
  if (parsed.success) return parsed.data;
  throw refusal(parsed.error.issues, input.what, typeof input.hint === 'function' ? input.hint(deps) : input.hint);
}

/** INVALID_PARAMS for a query or body: `Invalid <what>: <issues>. <hint>`, or, without `what`, the first issue's own message. */
function refusal(issues: readonly z.core.$ZodIssue[], what: string | undefined, hint: string | undefined): CodedError {
  const field = issues[0]?.path.map(String).join('.') || 'body';
  const message =
    what === undefined ? (issues[0]?.message ?? 'Invalid request.') : `Invalid ${what}: ${issues.map(issueText).join('; ')}.${hint ? ` ${hint}` : ''}`;
  return new CodedError('INVALID_PARAMS', message, { field });
}

/** Whether a query field takes every value of its parameter (an array, optional or not). */
export function isArrayField(field: z.ZodType): boolean {
  const inner = field instanceof z.ZodOptional ? (field.unwrap() as z.ZodType) : field;
  return inner instanceof z.ZodArray;
}

/** The router's match of `pathname` against `route`: its raw path parameters, or undefined. */
export function matchRoute(route: Route, pathname: string): Record<string, string> | undefined {
  const match = route.pattern.exec(pathname);
  return match ? { ...match.groups } : undefined;
}

/** A query parameter that is a whole number (`?since=12`); documented as the integer it is. */
export function wholeNumber(name: string) {
  return z
    .string()
    .transform((raw, ctx) => {
      const value = Number(raw);
      if (Number.isInteger(value) && value >= 0) return value;
      ctx.addIssue({ code: 'custom', message: `?${name}= must be a whole number, got '${raw}'.` });
      return z.NEVER;
    })
    .meta({ type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER });
}

/** The query of a route that answers a log in pages: entries after `since`, at most `limit` of them. */
export const PageQuery = z.object({ since: wholeNumber('since').optional(), limit: wholeNumber('limit').optional() });

/** The descriptions of {@link PageQuery}'s parameters. */
export const PAGE_PARAMETERS = { since: 'Entries after this sequence number.', limit: 'At most this many entries.' } as const;
