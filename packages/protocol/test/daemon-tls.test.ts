import { describe, expect, it } from '@jest/globals';
import { daemonTlsClientOptions, daemonTlsKey, daemonTlsServerOptions, DAEMON_TLS_IDENTITY } from '../src/node.js';

describe('the daemon TLS key', () => {
  it('is the same for the same secret (any controller replica computes it) and differs per secret', () => {
    expect(daemonTlsKey('a'.repeat(48)).equals(daemonTlsKey('a'.repeat(48)))).toBe(true);
    expect(daemonTlsKey('a'.repeat(48)).equals(daemonTlsKey('b'.repeat(48)))).toBe(false);
    expect(daemonTlsKey('a'.repeat(48)).toString('utf8')).not.toContain('a'.repeat(48));
    expect(daemonTlsKey('a'.repeat(48))).toHaveLength(32);
  });

  it('is offered by the client under the identity the server accepts, and no other identity gets a key', () => {
    const secret = 'c'.repeat(48);
    const client = daemonTlsClientOptions(secret).pskCallback!('hint') as { psk: Buffer; identity: string };
    expect(client.identity).toBe(DAEMON_TLS_IDENTITY);
    const server = daemonTlsServerOptions(secret);
    expect((server.pskCallback!(undefined as never, DAEMON_TLS_IDENTITY) as Buffer).equals(client.psk)).toBe(true);
    expect(server.pskCallback!(undefined as never, 'someone-else')).toBeNull();
    expect(server.ciphers).not.toMatch(/(^|:)PSK-/);
    expect(server.minVersion).toBe('TLSv1.2');
  });
});
