import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from '@jest/globals';
import { WebSocket, WebSocketServer } from 'ws';
import { relay, RELAY_HIGH_WATER_BYTES } from '../../packages/controller/src/relay.js';

const MiB = 1024 * 1024;

/** A WebSocket server on loopback port 0; resolves its first connection's server side and a client to it. */
async function socketPair(): Promise<{ server: WebSocket; client: WebSocket; close(): Promise<void> }> {
  const http: Server = createServer();
  const wss = new WebSocketServer({ server: http, perMessageDeflate: false });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const accepted = new Promise<WebSocket>((resolve) => wss.once('connection', resolve));
  const client = new WebSocket(`ws://127.0.0.1:${(http.address() as AddressInfo).port}`, { perMessageDeflate: false });
  await new Promise((resolve, reject) => client.once('open', resolve).once('error', reject));
  const server = await accepted;
  return {
    server,
    client,
    close: async () => {
      client.terminate();
      server.terminate();
      await new Promise((resolve) => wss.close(resolve));
      await new Promise((resolve) => http.close(resolve));
    },
  };
}

const until = async (what: string, check: () => boolean, timeoutMs = 10_000) => {
  const started = Date.now();
  while (!check()) {
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
};

/**
 * The relay between a client and a daemon, with real sockets on loopback: the "daemon" floods
 * 1 MiB messages while the client reads nothing. The relay must stop reading the daemon once its
 * send buffer toward the client passes the high-water mark (so the controller holds about that
 * much, whatever the daemon sends), and pass everything on, in order, once the client reads again.
 */
describe('relay backpressure', () => {
  it('holds at most about the high-water mark for a client that stops reading, and resumes on the sends completing', async () => {
    const front = await socketPair(); // client <-> the controller's client-facing side
    const back = await socketPair(); // the controller's daemon connection <-> the "daemon"
    try {
      relay(front.server, back.client);
      const received: number[] = [];
      front.client.on('message', (data: Buffer) => received.push(data.readUInt32BE(0)));
      front.client.pause();
      const count = 64;
      for (let i = 0; i < count; i++) {
        const message = Buffer.alloc(MiB, i);
        message.writeUInt32BE(i, 0);
        back.server.send(message);
      }
      // The daemon's sends back up once the relay stops reading it.
      await until('the daemon to be held back', () => back.server.bufferedAmount > 16 * MiB);
      // What the relay holds toward the client, looked at for 300 ms: one look can fall just after
      // the kernel took a frame (loopback buffers grow) and before the relay sent the next.
      let held = 0;
      for (const started = Date.now(); Date.now() - started < 300; await new Promise((resolve) => setTimeout(resolve, 5))) {
        held = Math.max(held, front.server.bufferedAmount);
      }
      expect(held).toBeGreaterThan(0);
      // The mark plus the frame that crossed it, and what the paused socket had read before it stopped.
      expect(held).toBeLessThanOrEqual(RELAY_HIGH_WATER_BYTES + 2 * MiB);
      expect(back.server.bufferedAmount).toBeGreaterThan(16 * MiB);
      front.client.resume();
      await until('every message to arrive', () => received.length === count);
      expect(received).toEqual(Array.from({ length: count }, (_, i) => i));
      expect(back.server.bufferedAmount).toBe(0);
    } finally {
      await front.close();
      await back.close();
    }
  });

  it('applies the same to what a client sends toward a daemon that stops reading', async () => {
    const front = await socketPair();
    const back = await socketPair();
    try {
      relay(front.server, back.client);
      const received: number[] = [];
      back.server.on('message', (data: Buffer) => received.push(data.readUInt32BE(0)));
      back.server.pause();
      const count = 48;
      for (let i = 0; i < count; i++) {
        const message = Buffer.alloc(MiB, i);
        message.writeUInt32BE(i, 0);
        front.client.send(message);
      }
      await until('the client to be held back', () => front.client.bufferedAmount > 16 * MiB);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(back.client.bufferedAmount).toBeLessThanOrEqual(RELAY_HIGH_WATER_BYTES + 2 * MiB);
      back.server.resume();
      await until('every message to arrive', () => received.length === count);
      expect(received).toEqual(Array.from({ length: count }, (_, i) => i));
    } finally {
      await front.close();
      await back.close();
    }
  });
});
