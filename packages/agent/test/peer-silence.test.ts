import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { WebSocket, WebSocketServer } from 'ws';
import { serveConnection } from '../src/connection.js';
import type { Handlers } from '../src/dispatch.js';

/**
 * A peer that pings (the controller's egress tunnel) and then falls silent is gone without a word:
 * the daemon closes its connection, so the egress relay it held is free for a replica that lives.
 */
describe('a silent peer', () => {
  let server: WebSocketServer;
  let url: string;

  beforeAll(async () => {
    server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await new Promise<void>((resolve) => server.once('listening', () => resolve()));
    server.on('connection', (ws) => serveConnection(ws, {} as Handlers, { peerSilenceMs: 300 }));
    url = `ws://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    for (const client of server.clients) client.terminate();
    await new Promise((resolve) => server.close(resolve));
  });

  const connect = async () => {
    const ws = new WebSocket(url);
    await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
    const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
    return { ws, closed };
  };

  it('is closed once it stops pinging, and kept while it pings', async () => {
    const { ws, closed } = await connect();
    const pinging = setInterval(() => ws.ping(), 100);
    await new Promise((r) => setTimeout(r, 900));
    expect(ws.readyState).toBe(WebSocket.OPEN);
    clearInterval(pinging);
    const started = Date.now();
    await closed;
    expect(Date.now() - started).toBeGreaterThanOrEqual(150);
  });

  it('is never timed when it never pinged', async () => {
    const { ws } = await connect();
    await new Promise((r) => setTimeout(r, 900));
    expect(ws.readyState).toBe(WebSocket.OPEN);
    ws.close();
  });
});
