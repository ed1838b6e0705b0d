import { createHmac } from 'node:crypto';
import type { ConnectionOptions, TlsOptions } from 'node:tls';

/** The TCP port a sandbox's daemon serves TLS on where the controller reaches it over the network (Kubernetes). */
export const DAEMON_TLS_PORT = 907;
/** The PSK identity both sides name; the key, not the identity, is the secret. */
export const DAEMON_TLS_IDENTITY = 'warren-daemon';
/**
 * TLS 1.2 with an ephemeral ECDH exchange authenticated by a pre-shared key (RFC 5489): forward
 * secrecy, and each side proves it holds the key, so there is no certificate to make, pin or rotate.
 * Node supports PSK only up to TLS 1.2 (its TLS 1.3 has no external PSK), hence the pinned version.
 */
const DAEMON_TLS_CIPHERS = 'ECDHE-PSK-CHACHA20-POLY1305:ECDHE-PSK-AES256-CBC-SHA384';

/**
 * The pre-shared key of a daemon's TLS listener, derived from the sandbox's daemon secret (which
 * the controller derives from its master key, so every replica computes the same one). A key of
 * its own, not the secret itself, so the TLS layer never handles the bearer token the daemon also
 * checks inside the channel.
 *
 * @example
 * daemonTlsKey(secret).length; // 32
 */
export function daemonTlsKey(secret: string): Buffer {
  return createHmac('sha256', secret).update('warren daemon tls psk v1').digest();
}

/**
 * The daemon's side: options for `tls.createServer`. A client that does not hold the key (no PSK,
 * a certificate-only client, a wrong key) fails the handshake before a byte of HTTP is read.
 *
 * @example
 * const server = tls.createServer(daemonTlsServerOptions(secret), onConnection);
 */
export function daemonTlsServerOptions(secret: string): TlsOptions {
  const key = daemonTlsKey(secret);
  return {
    ciphers: DAEMON_TLS_CIPHERS,
    minVersion: 'TLSv1.2',
    maxVersion: 'TLSv1.2',
    pskIdentityHint: DAEMON_TLS_IDENTITY,
    pskCallback: (_socket, identity) => (identity === DAEMON_TLS_IDENTITY ? key : null),
  };
}

/**
 * The controller's side: options for `tls.connect` (add `host`/`port` or `socket`). No
 * certificate is involved, so the server's identity is the key alone and no host name is checked.
 *
 * @example
 * const socket = tls.connect({ ...daemonTlsClientOptions(secret), host: podIp, port: DAEMON_TLS_PORT });
 */
export function daemonTlsClientOptions(secret: string): ConnectionOptions {
  const key = daemonTlsKey(secret);
  return {
    ciphers: DAEMON_TLS_CIPHERS,
    minVersion: 'TLSv1.2',
    maxVersion: 'TLSv1.2',
    checkServerIdentity: () => undefined,
    pskCallback: () => ({ psk: key, identity: DAEMON_TLS_IDENTITY }),
  };
}
