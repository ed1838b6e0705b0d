import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** The header that carries a delivery's signature: `t=<unix seconds>,v1=<hex HMAC-SHA256>`. */
export const SIGNATURE_HEADER = 'Warren-Signature';

/** The header that carries the delivered event's id (its cursor), so a receiver can drop a repeat. */
export const EVENT_ID_HEADER = 'Warren-Event-Id';

/** A new webhook secret: `whsec_` and 32 random bytes, base64url. */
export function newWebhookSecret(): string {
  return `whsec_${randomBytes(32).toString('base64url')}`;
}

/**
 * The signature header of one delivery: HMAC-SHA256, keyed by the webhook's secret, of
 * `<t>.<body>`, where `t` is the time of this attempt in Unix seconds. A receiver recomputes it
 * and refuses a `t` too far from its own clock (a replay).
 *
 * @example
 * signatureHeader('whsec_...', '{"id":1}', 1767225600); // 't=1767225600,v1=5f0c...'
 */
export function signatureHeader(secret: string, body: string, unixSeconds: number): string {
  return `t=${unixSeconds},v1=${createHmac('sha256', secret).update(`${unixSeconds}.${body}`).digest('hex')}`;
}

/**
 * Whether `header` signs `body` with `secret` at a time within `toleranceSeconds` of `nowSeconds`:
 * what a receiver checks (docs/events.md shows the same in a receiver of its own). Compared in
 * constant time.
 *
 * @example
 * verifySignature(secret, rawBody, req.headers['warren-signature'], Math.floor(Date.now() / 1000));
 */
export function verifySignature(secret: string, body: string, header: string | undefined, nowSeconds: number, toleranceSeconds = 300): boolean {
  const parts = new Map((header ?? '').split(',').map((part) => part.split('=', 2) as [string, string]));
  const t = Number(parts.get('t'));
  const given = parts.get('v1');
  if (!Number.isInteger(t) || given === undefined || !/^[0-9a-f]{64}$/.test(given)) return false;
  if (Math.abs(nowSeconds - t) > toleranceSeconds) return false;
  const expected = createHmac('sha256', secret).update(`${t}.${body}`).digest();
  return timingSafeEqual(expected, Buffer.from(given, 'hex'));
}
