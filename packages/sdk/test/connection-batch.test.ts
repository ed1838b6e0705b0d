import { describe, expect, it } from '@jest/globals';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { Socket } from 'node:net';
import { decodeFrame, encodeFrame } from '@warren/protocol';
import { WebSocketServer } from 'ws';
import { Connection } from '../src/connection.js';

/** A daemon stand-in on a unix socket: a welcome, and a stat answer naming the path each request asked for. */
async function statServer() {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'warren-batch-'));
  const socketPath = path.join(dir, 's.sock');
  const wss = new WebSocketServer({ noServer: true });
  const http = createServer();
  http.on('upgrade', (req, socket, head) =>
    wss.handleUpgrade(req, socket, head, (ws) =>
      ws.on('message', (data: Buffer) => {
        const { header } = decodeFrame(data);
        if (header.type === 'hello') ws.send(encodeFrame({ type: 'welcome', protocolVersion: 1, server: 'test', serverVersion: '0' }));
        if (header.type !== 'req') return;
        const asked = (header.params as { path: string }).path;
        const result = { path: asked, type: 'file', size: 1, mode: 0o644, mtimeMs: 0, nlink: 1, readable: true, writable: true };
        ws.send(encodeFrame({ type: 'res', id: header.id, result }));
      }),
    ),
  );
  await new Promise<void>((resolve) => http.listen(socketPath, resolve));
  return {
    url: `ws+unix://${socketPath}:/`,
    [Symbol.asyncDispose]: async () => {
      for (const c of wss.clients) c.terminate();
      await new Promise((resolve) => http.close(resolve));
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Counts the writes (system calls) the client's socket makes from now on. */
function countWrites(connection: Connection): { writes: number } {
  const socket = (connection as unknown as { ws: { _socket: Socket & { _writev: (...a: unknown[]) => unknown; _write: (...a: unknown[]) => unknown } } }).ws
    ._socket;
  const counter = { writes: 0 };
  for (const name of ['_write', '_writev'] as const) {
    const original = socket[name].bind(socket);
    socket[name] = (...args: unknown[]) => {
      counter.writes++;
      return original(...args);
    };
  }
  return counter;
}

describe('a burst of calls leaves the SDK in two writes', () => {
  it('calls made in one turn go out together, each answered with its own result', async () => {
    await using server = await statServer();
    const connection = await Connection.open(server.url, 'token');
    try {
      const counter = countWrites(connection);
      const paths = Array.from({ length: 30 }, (_, i) => `file-${i}`);
      const answers = await Promise.all(paths.map((p) => connection.call('fs.stat', { path: p })));
      expect(answers.map((a) => a.result.path)).toEqual(paths);
      // The first at once, the other 29 together at the end of the turn.
      expect(counter.writes).toBe(2);
      const lone = await connection.call('fs.stat', { path: 'alone' });
      expect(lone.result.path).toBe('alone');
      expect(counter.writes).toBe(3);
    } finally {
      connection.close();
    }
  });
});
