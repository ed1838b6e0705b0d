import * as protocol from '@warren/protocol';
import { PROTOCOL_MINOR, PROTOCOL_VERSION, RestErrorBody, jsonSchemaOptions, protocolJsonSchema } from '@warren/protocol';
import { z } from 'zod';
import { ROUTES, type Route } from './routes.js';

/** The version the OpenAPI document states for the REST API. */
export const REST_API_VERSION = '1.0.0';

/** The protocol package's schemas by their exported names, so the document calls them what the code does. */
const PROTOCOL_SCHEMAS = new Map<unknown, string>(
  Object.entries(protocol)
    .filter(([, value]) => value instanceof z.ZodType)
    .map(([name, value]) => [value, name]),
);

type JsonSchema = Record<string, unknown>;

/**
 * Named schemas in `components.schemas`, called by their names in the protocol package. A request
 * body is described as a caller writes it (fields with defaults may be left out), an answer as the
 * server sends it, open to fields a newer server may add; a schema used both ways gets two
 * entries, the request's named `...Input`.
 */
class Components {
  private readonly uses: { schema: z.ZodType; name: string; io: 'input' | 'output'; ref: JsonSchema }[] = [];

  /** A `$ref` to `schema` when it has a name (filled in by {@link Components.finish}), else the schema inline. */
  ref(schema: z.ZodType, io: 'input' | 'output'): JsonSchema {
    const name = PROTOCOL_SCHEMAS.get(schema);
    if (name === undefined) return withoutDialect(z.toJSONSchema(schema, jsonSchemaOptions(io)));
    const ref: JsonSchema = {};
    this.uses.push({ schema, name, io, ref });
    return ref;
  }

  /** Points every `$ref` handed out at its entry, and returns the entries, sorted by name. */
  finish(): Record<string, JsonSchema> {
    const usedAs = (io: 'input' | 'output') => new Set(this.uses.filter((use) => use.io === io).map((use) => use.schema));
    const [inputs, outputs] = [usedAs('input'), usedAs('output')];
    const registries = { input: z.registry<{ id: string }>(), output: z.registry<{ id: string }>() };
    for (const use of this.uses) {
      const id = use.io === 'input' && outputs.has(use.schema) && inputs.has(use.schema) ? `${use.name}Input` : use.name;
      use.ref.$ref = `#/components/schemas/${id}`;
      if (!registries[use.io].has(use.schema)) registries[use.io].add(use.schema, { id });
    }
    const all: Record<string, JsonSchema> = {};
    for (const io of ['input', 'output'] as const) {
      const { schemas } = z.toJSONSchema(registries[io], { ...jsonSchemaOptions(io), uri: (id) => `#/components/schemas/${id}` }) as {
        schemas: Record<string, JsonSchema>;
      };
      for (const [id, schema] of Object.entries(schemas)) {
        const { $id: _id, ...rest } = withoutDialect(schema);
        all[id] = rest;
      }
    }
    return Object.fromEntries(Object.entries(all).sort(([a], [b]) => a.localeCompare(b)));
  }
}

/** OpenAPI 3.1's dialect is JSON Schema 2020-12 already; a `$schema` per schema only adds noise. */
function withoutDialect(schema: JsonSchema): JsonSchema {
  const { $schema: _dialect, ...rest } = schema;
  return rest;
}

/**
 * The OpenAPI 3.1 document of the controller's REST API, made from its route table: each route's
 * method, path, access, query parameters, body schema and answers, the schemas converted from the
 * zod schemas the server checks with (`z.toJSONSchema`). Served at `GET /v1/openapi.json` and
 * checked in as docs/openapi.json (`pnpm openapi` writes it).
 *
 * @example
 * const document = openApiDocument(ROUTES);
 * document.paths['/v1/sandboxes'].post.requestBody; // the CreateSandboxRequest schema
 */
export function openApiDocument(routes: readonly Route[]): Record<string, unknown> {
  const components = new Components();
  const error = components.ref(RestErrorBody, 'output');
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of routes) {
    const parameters: JsonSchema[] = [];
    if (route.path.includes('{id}'))
      parameters.push({ name: 'id', in: 'path', required: true, description: 'The sandbox id.', schema: { type: 'string', pattern: '^[A-Za-z0-9]+$' } });
    if (route.path.includes('{volume}'))
      parameters.push({
        name: 'volume',
        in: 'path',
        required: true,
        description: "The volume's name (one of the caller's API key).",
        schema: { type: 'string', pattern: '^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$' },
      });
    if (route.path.includes('{snapshot}'))
      parameters.push({
        name: 'snapshot',
        in: 'path',
        required: true,
        description: "The snapshot's id or name (one of the caller's API key).",
        schema: { type: 'string', pattern: '^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$' },
      });
    for (const q of route.query ?? []) {
      const schema = components.ref(q.schema, 'input');
      parameters.push({
        name: q.name,
        in: 'query',
        required: false,
        description: q.description,
        schema: q.repeated ? { type: 'array', items: schema } : schema,
        ...(q.repeated ? { style: 'form', explode: true } : {}),
      });
    }
    const responses: Record<string, unknown> = {};
    for (const [status, answer] of Object.entries(route.responses)) {
      const content = answer.schema
        ? { [answer.contentType ?? 'application/json']: { schema: components.ref(answer.schema, 'output') } }
        : answer.contentType
          ? { [answer.contentType]: { schema: { type: 'string' } } }
          : undefined;
      responses[status] = { description: answer.description, ...(content ? { content } : {}) };
    }
    responses.default = {
      description: 'An error: its code, a message that says what is allowed, and a suggestion (the status follows the code).',
      content: { 'application/json': { schema: error } },
    };
    (paths[route.path] ??= {})[route.method.toLowerCase()] = {
      operationId: route.operationId,
      summary: route.summary,
      ...(parameters.length > 0 ? { parameters } : {}),
      ...(route.body ? { requestBody: { required: false, content: { 'application/json': { schema: components.ref(route.body, 'input') } } } } : {}),
      ...(route.rawBody
        ? {
            requestBody: {
              required: true,
              description: route.rawBody.description,
              content: { [route.rawBody.contentType]: { schema: { type: 'string', format: 'binary' } } },
            },
          }
        : {}),
      responses,
      security: route.access === 'public' ? [] : [{ bearer: [] }],
      'x-warren-access': route.access,
      ...(route.websocket ? { 'x-warren-websocket': true } : {}),
    };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Warren controller',
      version: REST_API_VERSION,
      description:
        `The REST API of a Warren controller (sandbox lifecycle, tokens, audit, health), and the WebSocket route that carries ` +
        `protocol ${PROTOCOL_VERSION}.${PROTOCOL_MINOR} (its methods are described in docs/protocol.schema.json). ` +
        '`x-warren-access` names the kind of access a route needs: `operator` is the API key only; `info`, `lifecycle`, `derive` ' +
        "and `audit` are decided per sandbox by Warren's rule table (docs/security-authorization.md).",
    },
    servers: [{ url: 'http://127.0.0.1:7420', description: 'The default address of `warren serve`.' }],
    paths,
    components: {
      schemas: components.finish(),
      securitySchemes: {
        bearer: {
          type: 'http',
          scheme: 'bearer',
          description: "The API key, a sandbox's token (that sandbox only) or a token derived from it.",
        },
      },
    },
  };
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
