/**
 * `@warren/protocol/node`: the parts of the protocol that need Node's own modules (`node:crypto`,
 * `node:tls`), kept off the package root so the root loads in a browser (the console) as well.
 */
export { lineAnchor, lineHash } from './line-hash.js';
export { DAEMON_TLS_IDENTITY, DAEMON_TLS_PORT, daemonTlsClientOptions, daemonTlsKey, daemonTlsServerOptions } from './daemon-tls.js';
export { wsSocket, type NodeWebSocket, type WsSocketOptions } from './ws-socket.js';
