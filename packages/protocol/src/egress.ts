import { z } from 'zod';

/**
 * A host pattern of an egress rule: an exact DNS name (`registry.npmjs.org`) or a wildcard over
 * its subdomains (`*.pythonhosted.org`, which does not match `pythonhosted.org` itself). Letters,
 * digits, `-` and `.` only, so Unicode names are written in their punycode form (`xn--...`); IP
 * literals are refused (the gateway never lets a sandbox pick an address).
 */
export const EgressHostPattern = z
  .string()
  .min(1)
  .max(253)
  .transform((s) => s.toLowerCase().replace(/\.$/, ''))
  .pipe(
    z
      .string()
      .regex(
        /^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/,
        "a DNS name such as 'api.example.com' or '*.example.com' (punycode for non-ASCII names)",
      )
      .refine((s) => !/^(\*\.)?[0-9.]+$/.test(s), 'an IP address is not a host name; egress rules name hosts'),
  );

/** An HTTP method a rule may be limited to. */
export const EgressMethod = z.enum(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);
export type EgressMethod = z.infer<typeof EgressMethod>;

/**
 * One allow rule. With no `ports` it allows 443 (HTTPS) only; list 80 to allow plain HTTP.
 * `methods` and `pathPrefix` are checked where the gateway sees the request (plain HTTP today);
 * a rule with either never matches an HTTPS tunnel, which it cannot look into.
 *
 * @example
 * { host: '*.github.com', ports: [443] }
 * { host: 'api.example.com', ports: [80], methods: ['GET'], pathPrefix: '/v1/' }
 */
export const EgressRule = z.strictObject({
  host: EgressHostPattern,
  ports: z.array(z.number().int().min(1).max(65535)).min(1).max(16).optional(),
  methods: z.array(EgressMethod).min(1).max(7).optional(),
  /** A path prefix such as `/v1/`; the request path is normalised (no `..`, no `%2e`) before it is compared. */
  pathPrefix: z.string().min(1).max(1024).startsWith('/').optional(),
});
export type EgressRule = z.infer<typeof EgressRule>;

/**
 * A sandbox's egress policy. `none` (the default): no way out. `allow`: only what a rule allows.
 * `open`: any public address, where the operator permits it. Whatever the policy, private,
 * loopback, link-local and metadata addresses stay unreachable, and the operator's deny list wins.
 *
 * @example
 * { mode: 'allow', rules: [{ host: 'registry.npmjs.org' }, { host: '*.pythonhosted.org' }] }
 */
export const EgressPolicy = z.discriminatedUnion('mode', [
  z.strictObject({ mode: z.literal('none') }),
  z.strictObject({ mode: z.literal('allow'), rules: z.array(EgressRule).min(1).max(256) }),
  z.strictObject({ mode: z.literal('open') }),
]);
export type EgressPolicy = z.infer<typeof EgressPolicy>;
/** The policy modes, least open first. */
export const EGRESS_MODES = ['none', 'allow', 'open'] as const;
export type EgressMode = (typeof EGRESS_MODES)[number];

/** Where the gateway puts a brokered secret: a header built from a template, or a query parameter. */
export const SecretTarget = z.union([
  z.strictObject({
    /** Header name, e.g. `Authorization`. */
    header: z
      .string()
      .min(1)
      .max(128)
      .regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, 'an HTTP header name'),
    /** The header's value with `{secret}` where the value goes, e.g. `Bearer {secret}`. */
    template: z
      .string()
      .max(1024)
      .refine((t) => t.includes('{secret}'), 'the template must contain {secret}')
      .refine((t) => !/[\r\n\0]/.test(t), 'no line breaks or NUL in a header template')
      .default('{secret}'),
  }),
  z.strictObject({
    /** Query parameter name, e.g. `api_key`. */
    query: z.string().min(1).max(128),
  }),
]);
export type SecretTarget = z.infer<typeof SecretTarget>;

/**
 * A credential the sandbox may use but never hold. The sandbox's environment gets `name` set to a
 * placeholder; the gateway puts the real value into the target header or query parameter, only
 * on requests to `hosts`. The value is given here or named (`ref`) from the operator's secrets.
 *
 * @example
 * { name: 'OPENAI_API_KEY', ref: 'openai', hosts: ['api.openai.com'], target: { header: 'Authorization', template: 'Bearer {secret}' } }
 */
export const SecretBinding = z
  .strictObject({
    /** The environment variable that holds the placeholder inside the sandbox. */
    name: z
      .string()
      .min(1)
      .max(128)
      .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'env names are letters, digits and _'),
    /** The real value (never stored in the sandbox, never logged). */
    value: z
      .string()
      .min(1)
      .max(16 * 1024)
      .optional(),
    /** The name of a secret in the operator's configuration (`egress.secrets`). */
    ref: z.string().min(1).max(128).optional(),
    /** Hosts the value may go to: exact names or `*.` wildcards. */
    hosts: z.array(EgressHostPattern).min(1).max(32),
    target: SecretTarget,
  })
  .refine((b) => (b.value === undefined) !== (b.ref === undefined), 'give exactly one of value or ref');
export type SecretBinding = z.infer<typeof SecretBinding>;
