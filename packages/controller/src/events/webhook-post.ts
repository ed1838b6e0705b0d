import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import type { CheckedAddress } from './webhook-target.js';
import { hostOf, portOf } from './webhook-target.js';

/** One delivery attempt: POST `body` to `url`, connected to `address` (the one the guard checked). */
export type WebhookSender = (request: { url: URL; address: CheckedAddress; body: string; headers: Record<string, string>; timeoutMs: number }) => Promise<void>;

/**
 * POSTs a delivery to the address the guard checked (never a second lookup of the URL's host), with
 * the URL's host in `Host` and, for `https:`, in the TLS server name so the certificate is checked
 * against it. Resolves on a 2xx answer; rejects with why otherwise: another status (a redirect is
 * not followed), a connection error, or no answer within `timeoutMs`.
 *
 * @example
 * await postWebhook({ url, address: await guard.resolve(url), body, headers, timeoutMs: 10_000 });
 */
export const postWebhook: WebhookSender = ({ url, address, body, headers, timeoutMs }) =>
  new Promise((resolve, reject) => {
    const host = hostOf(url);
    const options: https.RequestOptions = {
      method: 'POST',
      host: address.address,
      family: address.family,
      port: portOf(url),
      path: `${url.pathname}${url.search}`,
      agent: false,
      setHost: false,
      headers: {
        host: url.host,
        'content-type': 'application/json',
        'content-length': String(Buffer.byteLength(body)),
        'user-agent': 'Warren-Webhooks/1',
        ...headers,
      },
    };
    if (url.protocol === 'https:' && net.isIP(host) === 0) options.servername = host;
    const request = (url.protocol === 'https:' ? https : http).request(options, (response) => {
      const status = response.statusCode ?? 0;
      // The answer's body is not read: only its status counts.
      response.resume();
      response.on('error', () => undefined);
      if (status >= 200 && status < 300) resolve();
      else if (status >= 300 && status < 400) reject(new Error(`HTTP ${status}: redirects are not followed; register the final URL`));
      else reject(new Error(`HTTP ${status}`));
      request.destroy();
    });
    const timer = setTimeout(() => request.destroy(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    timer.unref();
    request.on('close', () => clearTimeout(timer));
    request.on('error', (err) => reject(err));
    request.end(body);
  });
