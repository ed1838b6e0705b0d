import { createHash, timingSafeEqual } from 'node:crypto';
import { chmod, unlink } from 'node:fs/promises';
import { createServer, type IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { PROTOCOL_VERSION, WS_MAX_PAYLOAD_BYTES } from '@warren/protocol';
import { WebSocketServer } from 'ws';
import { AGENT_VERSION, serveConnection } from './connection.js';
import type { Handlers } from './dispatch.js';
import { DEFAULT_POLICY, type FilePolicy } from './policy.js';
import { ProcessRuntime } from './services/processes.js';
import { fsHandlers } from './services/fs.js';

export interface AgentServerOptions {
  /** Where to listen: a unix socket path, in a folder the controller can reach. */
  socketPath: string;
  /** The per-session secret the controller presents as `Authorization: Bearer <secret>`. */
  secret: string;
  policy?: FilePolicy;
  /** HOME for commands the agent starts. */
  home?: string;
  /** The cap on processes Warren runs at once in this sandbox. */
  maxProcesses?: number;
}

/** A running agent; dispose it to stop listening and drop its connections. */
export interface AgentServer extends AsyncDisposable {
  socketPath: string;
  close(): Promise<void>;
}

/** Builds the handler table for one sandbox. */
export function createHandlers(policy: FilePolicy, home: string, processes = new ProcessRuntime({ policy, home })): Handlers {
  const started = performance.now();
  return {
    async 'system.info'() {
      return {
        result: {
          agentVersion: AGENT_VERSION,
          protocolVersion: PROTOCOL_VERSION,
          pid: process.pid,
          uid: process.getuid?.() ?? -1,
          rssBytes: process.memoryUsage.rss(),
          uptimeMs: performance.now() - started,
        },
      };
    },
    ...fsHandlers(policy),
    ...processes.handlers(policy),
  };
}

/**
 * Starts the agent: a WebSocket server on a unix socket that accepts only connections bearing the
 * session secret (compared in constant time).
 *
 * @example
 * await using agent = await startAgentServer({ socketPath: '/run/warren/agent.sock', secret });
 */
export async function startAgentServer(options: AgentServerOptions): Promise<AgentServer> {
  const policy = options.policy ?? DEFAULT_POLICY;
  const home = options.home ?? '/tmp';
  const processes = new ProcessRuntime({ policy, home, maxProcesses: options.maxProcesses });
  const handlers = createHandlers(policy, home, processes);
  const expected = digest(options.secret);
  const wss = new WebSocketServer({ noServer: true, maxPayload: WS_MAX_PAYLOAD_BYTES });
  const http = createServer((_req, res) => {
    res.writeHead(426, { 'content-type': 'text/plain' }).end('WebSocket upgrade required\n');
  });
  http.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const presented = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1] ?? '';
    if (!timingSafeEqual(digest(presented), expected)) {
      socket.end('HTTP/1.1 401 Unauthorized\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => serveConnection(ws, handlers));
  });

  await unlink(options.socketPath).catch(() => undefined);
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(options.socketPath, () => resolve());
  });
  await chmod(options.socketPath, 0o600);

  const close = async () => {
    for (const ws of wss.clients) ws.terminate();
    await processes.close();
    await new Promise<void>((resolve) => http.close(() => resolve()));
    await unlink(options.socketPath).catch(() => undefined);
  };
  return { socketPath: options.socketPath, close, [Symbol.asyncDispose]: close };
}

// Hashing both sides first gives equal-length inputs, so timingSafeEqual never throws and the
// comparison time does not depend on where the strings differ or on their lengths.
function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}
