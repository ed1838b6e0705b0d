import { randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { CodedError, MAX_PORT_TUNNELS } from '@warren/protocol';
import type { Handler } from '../dispatch.js';

/** One open tunnel: the daemon's TCP connection to a server inside the sandbox. */
interface Tunnel {
  socket: Socket;
  bytesIn: number;
}

// Tunnels of every connection of this daemon, by handle: writes may come over another connection.
const tunnels = new Map<string, Tunnel>();

/** How many tunnels are open now (for tests and the daemon's own report). */
export function openTunnels(): number {
  return tunnels.size;
}

/**
 * The port methods: `port.open` dials a port on the sandbox's own loopback (the host is one of
 * `127.0.0.1` and `::1` by schema, so a tunnel never reaches another address, the host, or another
 * sandbox) and streams what the server sends as `data` events; `port.write` sends bytes to it.
 * What the server sends is read only while the client keeps up (the connection's send buffer
 * below its high-water mark), so a server that floods costs a bounded buffer, not memory.
 *
 * @example
 * const handlers = portHandlers();
 */
export function portHandlers(): { 'port.open': Handler<'port.open'>; 'port.write': Handler<'port.write'> } {
  return {
    async 'port.open'(params, ctx) {
      if (tunnels.size >= MAX_PORT_TUNNELS) {
        throw new CodedError('RESOURCE_EXHAUSTED', `This sandbox already has ${MAX_PORT_TUNNELS} port tunnels open; close some before opening more.`, {
          limit: MAX_PORT_TUNNELS,
        });
      }
      const socket = await dial(params.host, params.port, params.connectTimeoutMs, ctx.signal);
      const handle = `t_${randomBytes(16).toString('base64url')}`;
      const tunnel: Tunnel = { socket, bytesIn: 0 };
      tunnels.set(handle, tunnel);
      let bytesOut = 0;
      try {
        ctx.emit('connected', { handle });
        await new Promise<void>((resolve, reject) => {
          const onAbort = () => {
            socket.destroy();
            reject(new CodedError('CANCELLED', `The tunnel to port ${params.port} was closed by the client.`));
          };
          if (ctx.signal.aborted) return onAbort();
          ctx.signal.addEventListener('abort', onAbort, { once: true });
          socket.on('data', (chunk: Buffer) => {
            bytesOut += chunk.length;
            ctx.emit('data', {}, chunk);
            if (ctx.congested()) {
              socket.pause();
              void ctx.drained().then(() => socket.resume());
            }
          });
          socket.once('close', () => {
            ctx.signal.removeEventListener('abort', onAbort);
            resolve();
          });
          socket.on('error', () => undefined); // 'close' follows and ends the call
        });
        return { result: { bytesIn: tunnel.bytesIn, bytesOut } };
      } finally {
        tunnels.delete(handle);
        socket.destroy();
      }
    },

    async 'port.write'(params, ctx) {
      const tunnel = tunnels.get(params.handle);
      if (!tunnel) throw new CodedError('NOT_FOUND', `No open tunnel '${params.handle}': it was closed, or the server hung up.`, { handle: params.handle });
      const bytes = ctx.payload ?? Buffer.alloc(0);
      if (tunnel.socket.destroyed || tunnel.socket.writableEnded) {
        throw new CodedError('PORT_UNREACHABLE', `The tunnel '${params.handle}' no longer takes bytes: its write side was ended or the server hung up.`);
      }
      // Answered once the kernel took the bytes, so a client that awaits each write cannot fill the daemon's memory.
      await new Promise<void>((resolve, reject) => {
        const done = (err?: Error | null) =>
          err ? reject(new CodedError('PORT_UNREACHABLE', `The server closed the connection: ${err.message}.`)) : resolve();
        if (params.end) tunnel.socket.end(bytes, () => done());
        else if (bytes.length > 0) tunnel.socket.write(bytes, done);
        else resolve();
      });
      tunnel.bytesIn += bytes.length;
      return { result: { bytesWritten: bytes.length } };
    },
  };
}

function dial(host: string, port: number, timeoutMs: number, signal: AbortSignal): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port, noDelay: true });
    const fail = (err: CodedError) => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      socket.destroy();
      reject(err);
    };
    const onAbort = () => fail(new CodedError('CANCELLED', `Connecting to port ${port} was cancelled.`));
    const timer = setTimeout(
      () => fail(new CodedError('PORT_UNREACHABLE', `Port ${port} on ${host} did not accept a connection within ${timeoutMs} ms.`)),
      timeoutMs,
    );
    signal.addEventListener('abort', onAbort, { once: true });
    socket.once('connect', () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      socket.removeAllListeners('error');
      resolve(socket);
    });
    socket.once('error', (err: NodeJS.ErrnoException) =>
      fail(
        new CodedError(
          'PORT_UNREACHABLE',
          err.code === 'ECONNREFUSED'
            ? `Nothing listens on port ${port} (${host}) inside the sandbox. Start the server, listening on ${host} or on all addresses, then retry.`
            : `Could not connect to port ${port} (${host}) inside the sandbox: ${err.code ?? err.message}.`,
          { port },
        ),
      ),
    );
  });
}
