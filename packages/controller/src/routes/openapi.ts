import * as protocol from '@warren/protocol';
import { PROTOCOL_MINOR, PROTOCOL_VERSION, RestErrorBody, jsonSchemaOptions } from '@warren/protocol';
import { z } from 'zod';
import { isArrayField, PATH_PARAMETERS, ROUTE_TAGS, type Route } from './route.js';

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
    // A schema the route table derives from a protocol schema (to give it its own refusal) names the one it is made from.
    const name = PROTOCOL_SCHEMAS.get(schema) ?? z.globalRegistry.get(schema)?.id;
    if (name === undefined) return withoutDialect(z.toJSONSchema(schema, jsonSchemaOptions(io)));
    const ref: JsonSchema = {};
    this.uses.push({ schema, name, io, ref });
    return ref;
  }

  /** The schema inline, never a `$ref` (a path parameter's pattern reads best where it is used). */
  inline(schema: z.ZodType, io: 'input' | 'output'): JsonSchema {
    return withoutDialect(z.toJSONSchema(schema, jsonSchemaOptions(io)));
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
    for (const [, name] of route.path.matchAll(/\{([^}]+)\}/g)) {
      const parameter = PATH_PARAMETERS[name as keyof typeof PATH_PARAMETERS];
      parameters.push({ name, in: 'path', required: true, description: parameter.description, schema: components.inline(parameter.schema, 'input') });
    }
    for (const [name, field] of Object.entries(route.query?.schema.shape ?? {}) as [string, z.ZodType][]) {
      const repeated = isArrayField(field);
      const inner = field instanceof z.ZodOptional ? (field.unwrap() as z.ZodType) : field;
      const schema =
        inner instanceof z.ZodArray ? { type: 'array', items: components.ref(inner.element as z.ZodType, 'input') } : components.ref(inner, 'input');
      parameters.push({
        name,
        in: 'query',
        // A repeated parameter may be left out (it is then no value); any other is required when its schema says so.
        required: !repeated && !field.isOptional(),
        description: route.query!.parameters[name],
        schema,
        ...(repeated ? { style: 'form', explode: true } : {}),
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
      tags: [route.tag],
      operationId: route.operationId,
      summary: route.summary,
      ...(parameters.length > 0 ? { parameters } : {}),
      ...(route.body ? { requestBody: { required: false, content: { 'application/json': { schema: components.ref(route.body.schema, 'input') } } } } : {}),
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
      ...(route.scope ? { 'x-warren-scope': route.scope } : {}),
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
        '`x-warren-access` names the kind of access a route needs: `operator` is any API key (a member key sees its own tenant only), ' +
        '`admin` an admin key; `info`, `lifecycle`, `derive` ' +
        "and `audit` are decided per sandbox by Warren's rule table (docs/security-authorization.md). `x-warren-scope` names the " +
        'scope a key needs besides (docs/tenancy.md).',
    },
    servers: [{ url: 'http://127.0.0.1:7420', description: 'The default address of `warren serve`.' }],
    tags: Object.entries(ROUTE_TAGS).map(([name, description]) => ({ name, description })),
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
