import { describe, expect, it } from '@jest/globals';
import { EgressLog } from '../src/egress/egress-log.js';
import type { EgressEvent } from '../src/egress/events.js';
import { egressEnvironment } from '../src/egress/sandbox-egress.js';

const event = (sandboxId: string, host: string): EgressEvent => ({
  sandboxId,
  kind: 'http',
  host,
  port: 80,
  decision: 'denied',
  rule: 'no-matching-rule',
  bytesIn: 0,
  bytesOut: 0,
  durationMs: 1,
  policyVersion: 1,
});

describe('the environment of a sandbox with egress', () => {
  it('points every proxy variable at the relay, exempts loopback, and names the trust files only when the gateway can intercept', () => {
    const env = egressEnvironment(3128, true, { API_KEY: 'WARREN_SECRET_0123' });
    for (const name of ['HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY', 'http_proxy', 'https_proxy', 'all_proxy']) expect(env[name]).toBe('http://127.0.0.1:3128');
    expect(env.NO_PROXY).toBe('localhost,127.0.0.1,::1');
    expect(env.NODE_EXTRA_CA_CERTS).toBe('/run/warren-egress/ca.pem');
    for (const name of ['SSL_CERT_FILE', 'REQUESTS_CA_BUNDLE', 'CURL_CA_BUNDLE', 'GIT_SSL_CAINFO', 'PIP_CERT'])
      expect(env[name]).toBe('/run/warren-egress/bundle.pem');
    expect(env.API_KEY).toBe('WARREN_SECRET_0123');
    const plain = egressEnvironment(3128, false, {});
    expect(plain.SSL_CERT_FILE).toBeUndefined();
    expect(plain.HTTPS_PROXY).toBe('http://127.0.0.1:3128');
  });
});

describe('the egress log', () => {
  it('keeps each sandbox its own bounded ring, numbered, read after a sequence number', () => {
    const log = new EgressLog(3, () => 0);
    for (const host of ['a', 'b', 'c', 'd']) log.add(event('s1', host));
    log.add(event('s2', 'x'));
    const s1 = log.list('s1');
    expect(s1.entries.map((e) => e.host)).toEqual(['b', 'c', 'd']);
    expect(log.list('s1', { since: s1.entries[1]!.seq }).entries.map((e) => e.host)).toEqual(['d']);
    expect(log.list('s2').entries.map((e) => [e.host, e.time])).toEqual([['x', '1970-01-01T00:00:00.000Z']]);
    log.forget('s1');
    expect(log.list('s1')).toEqual({ entries: [], lastSeq: -1 });
  });
});
