import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { createHandlers, serveConnection, type Handlers } from '@warren/agent';
import { decodeFrame, encodeFrame } from '@warren/protocol';
import { Connection } from '@warren/sdk';
import { WebSocket, WebSocketServer } from 'ws';

/** A daemon on a unix socket whose handlers the test shapes: a newer or an older server. */
async function server(shape: (handlers: Handlers) => Handlers) {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'warren-evolve-'));
  const socketPath = path.join(dir, 's.sock');
  const handlers = shape(createHandlers({ root: dir, readOnly: false }, dir));
  const wss = new WebSocketServer({ noServer: true });
  const http = createServer();
  http.on('upgrade', (req, socket, head) => wss.handleUpgrade(req, socket, head, (ws) => serveConnection(ws, handlers)));
  await new Promise<void>((r) => http.listen(socketPath, r));
  return {
    url: `ws+unix://${socketPath}:/`,
    [Symbol.asyncDispose]: async () => {
      for (const c of wss.clients) c.terminate();
      await new Promise((r) => http.close(r));
      await rm(dir, { recursive: true, force: true });
    },
  };
}

describe('the protocol evolves without breaking deployed clients', () => {
  it('a client that does not know a field a newer server added to a result reads the rest', async () => {
    await using newer = await server((h) => ({
      ...h,
      'system.info': async (p, ctx) => ({ result: { ...(await h['system.info'](p, ctx)).result, gpus: 2, region: 'eu' } }),
    }));
    const client = await Connection.open(newer.url, randomBytes(8).toString('hex'));
    const { result } = await client.call('system.info', {});
    expect(result).toMatchObject({ agentVersion: expect.any(String) });
    expect(result).not.toHaveProperty('gpus');
    client.close();
  });

  it('a newer client reads an older server that lacks an optional field', async () => {
    await using older = await server((h) => ({
      ...h,
      'audit.list': async (p, ctx) => {
        const { nextCursor: _nextCursor, ...rest } = (await h['audit.list'](p, ctx)).result;
        return { result: rest };
      },
    }));
    const client = await Connection.open(older.url, 'x');
    const { result } = await client.call('audit.list', {});
    expect(result).toMatchObject({ entries: [], dropped: false });
    expect(result.nextCursor).toBeUndefined();
    client.close();
  });

  it('a client of another major is refused with an error that names both versions', async () => {
    await using current = await server((h) => h);
    const ws = new WebSocket(current.url);
    await new Promise((r) => ws.once('open', r));
    const answer = new Promise<Buffer>((r) => ws.once('message', r));
    ws.send(encodeFrame({ type: 'hello', protocolVersion: 2 }));
    const { header } = decodeFrame(await answer);
    expect(header).toMatchObject({
      type: 'err',
      error: { code: 'PROTOCOL_VERSION_MISMATCH', message: expect.stringMatching(/1\.\d+.*2\.0/), details: { client: '2.0' } },
    });
    ws.terminate();
  });
});
