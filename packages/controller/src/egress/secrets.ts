import { randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';
import { Transform, type TransformCallback } from 'node:stream';
import { CodedError, type SecretBinding, type SecretTarget } from '@warren/protocol';
import { hostMatches } from './host-name.js';

/** A secret the gateway holds for one sandbox: the real value stays here, the sandbox sees `placeholder`. */
export interface BrokeredSecret {
  name: string;
  placeholder: string;
  hosts: readonly string[];
  target: SecretTarget;
  /** Never logged, never in an event; only written into requests to `hosts`. */
  readonly value: string;
}

/**
 * Turns a create's secret bindings into brokered secrets: values named by `ref` are looked up in
 * the operator's secrets (an unknown name is an INVALID_PARAMS error that names the binding, not
 * the value), and each secret gets a fresh random placeholder for the sandbox's environment.
 *
 * @example
 * const [secret] = brokerSecrets([{ name: 'API_KEY', ref: 'openai', hosts: ['api.openai.com'], target: { header: 'Authorization', template: 'Bearer {secret}' } }], { openai: 'sk-...' });
 * env.API_KEY = secret.placeholder;
 */
export function brokerSecrets(bindings: readonly SecretBinding[], operatorSecrets: Readonly<Record<string, string>>): BrokeredSecret[] {
  const names = new Set<string>();
  return bindings.map((binding) => {
    if (names.has(binding.name)) throw new CodedError('INVALID_PARAMS', `Secret '${binding.name}' is bound twice; give each binding its own name.`);
    names.add(binding.name);
    const value = binding.value ?? (binding.ref !== undefined && Object.hasOwn(operatorSecrets, binding.ref) ? operatorSecrets[binding.ref] : undefined);
    if (value === undefined) {
      throw new CodedError('INVALID_PARAMS', `Secret '${binding.name}' names the operator secret '${binding.ref}', which this controller does not have.`, {
        secret: binding.name,
      });
    }
    const placeholder = `WARREN_SECRET_${randomBytes(16).toString('hex')}`;
    return { name: binding.name, placeholder, hosts: binding.hosts, target: binding.target, value };
  });
}

/**
 * Writes the secrets bound to `host` into an outgoing request: in the target header (the
 * placeholder replaced, or the header built from its template when absent) or the target query
 * parameter. Secrets bound to other hosts are left as placeholders. Returns the names used.
 *
 * @example
 * const used = applySecrets(secrets, 'api.example.com', headers, url);
 */
export function applySecrets(secrets: readonly BrokeredSecret[], host: string, headers: OutgoingHttpHeaders, url: URL): string[] {
  const used: string[] = [];
  for (const secret of secrets) {
    if (!secret.hosts.some((pattern) => hostMatches(pattern, host))) continue;
    if ('header' in secret.target) {
      const key = secret.target.header.toLowerCase();
      const current = headers[key];
      if (current === undefined) headers[key] = secret.target.template.replaceAll('{secret}', secret.value);
      else if (String(current).includes(secret.placeholder)) headers[key] = String(current).replaceAll(secret.placeholder, secret.value);
      else continue;
    } else {
      const current = url.searchParams.get(secret.target.query);
      if (current === null) url.searchParams.set(secret.target.query, secret.value);
      else if (current.includes(secret.placeholder)) url.searchParams.set(secret.target.query, current.replaceAll(secret.placeholder, secret.value));
      else continue;
    }
    used.push(secret.name);
  }
  return used;
}

/** Response headers with every real secret value replaced by its placeholder (an upstream may echo a credential back). */
export function redactHeaders(secrets: readonly BrokeredSecret[], headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [key, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    out[key] = Array.isArray(value) ? value.map((v) => redactText(secrets, v)) : redactText(secrets, value);
  }
  return out;
}

function redactText(secrets: readonly BrokeredSecret[], text: string): string {
  let out = text;
  for (const secret of secrets) out = out.replaceAll(secret.value, secret.placeholder);
  return out;
}

/**
 * A stream that replaces every real secret value with its placeholder, also when a value is split
 * across chunks (it holds back the last `longest value - 1` bytes until more arrive).
 *
 * @example
 * upstreamResponse.pipe(new RedactStream(secrets)).pipe(res);
 */
export class RedactStream extends Transform {
  readonly #pairs: [Buffer, Buffer][];
  readonly #keep: number;
  #tail: Buffer = Buffer.alloc(0);

  constructor(secrets: readonly BrokeredSecret[]) {
    super();
    this.#pairs = secrets.map((s) => [Buffer.from(s.value), Buffer.from(s.placeholder)]);
    this.#keep = Math.max(0, ...this.#pairs.map(([value]) => value.length - 1));
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    const data = this.#replace(Buffer.concat([this.#tail, chunk]));
    const cut = Math.max(0, data.length - this.#keep);
    this.#tail = data.subarray(cut);
    done(null, data.subarray(0, cut));
  }

  override _flush(done: TransformCallback): void {
    done(null, this.#replace(this.#tail));
  }

  #replace(data: Buffer): Buffer {
    let out: Buffer = data;
    for (const [value, placeholder] of this.#pairs) {
      let at = out.indexOf(value);
      if (at < 0) continue;
      const parts: Buffer[] = [];
      let from = 0;
      while (at >= 0) {
        parts.push(out.subarray(from, at), placeholder);
        from = at + value.length;
        at = out.indexOf(value, from);
      }
      parts.push(out.subarray(from));
      out = Buffer.concat(parts);
    }
    return out;
  }
}
