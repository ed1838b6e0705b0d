import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { createHandlers, serveConnection, type Handlers } from '@warren/agent';
import { decodeFrame, encodeFrame, PROTOCOL_MINOR, type FrameHeader } from '@warren/protocol';
import { Connection, Files, InternalError } from '@warren/sdk';
import { WebSocket, WebSocketServer } from 'ws';
import { archive, file } from '../support/tar-bytes.js';

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

/**
 * A server from the future, scripted frame by frame: its welcome, and the frames it answers each
 * request with (header and optional payload). Real WebSockets on a unix socket; no daemon.
 */
async function scripted(welcome: Record<string, unknown>, answer: (req: { id: number; method: string }) => [Record<string, unknown>, Buffer?][]) {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'warren-future-'));
  const socketPath = path.join(dir, 's.sock');
  const hellos: FrameHeader[] = [];
  const wss = new WebSocketServer({ noServer: true });
  const http = createServer();
  http.on('upgrade', (req, socket, head) =>
    wss.handleUpgrade(req, socket, head, (ws) => {
      ws.on('message', (data: Buffer) => {
        const { header } = decodeFrame(data);
        if (header.type === 'hello') {
          hellos.push(header);
          ws.send(encodeFrame(welcome as FrameHeader));
        } else if (header.type === 'req') {
          for (const [frame, payload] of answer({ id: header.id as number, method: header.method })) ws.send(encodeFrame(frame as FrameHeader, payload));
        }
      });
    }),
  );
  await new Promise<void>((r) => http.listen(socketPath, r));
  return {
    url: `ws+unix://${socketPath}:/`,
    hellos,
    [Symbol.asyncDispose]: async () => {
      for (const c of wss.clients) c.terminate();
      await new Promise((r) => http.close(r));
      await rm(dir, { recursive: true, force: true });
    },
  };
}

describe('the protocol evolves without breaking deployed clients', () => {
  it('the handshake: both ends send their minor and speak the lower; a newer welcome with added fields is read', async () => {
    const welcome = {
      type: 'welcome',
      protocolVersion: 1,
      protocolMinor: PROTOCOL_MINOR + 5,
      server: 'warren-agent',
      serverVersion: '9.0.0',
      features: ['gpu'],
    };
    await using future = await scripted(welcome, () => []);
    const client = await Connection.open(future.url, 'x');
    expect(future.hellos[0]).toMatchObject({ protocolVersion: 1, protocolMinor: PROTOCOL_MINOR });
    expect(client.protocol).toEqual({ version: 1, minor: PROTOCOL_MINOR, serverMinor: PROTOCOL_MINOR + 5, server: 'warren-agent', serverVersion: '9.0.0' });
    client.close();

    // The reverse: a client from before minors were sent, whose hello has a field this daemon does not know.
    await using current = await server((h) => h);
    const ws = new WebSocket(current.url);
    await new Promise((r) => ws.once('open', r));
    const answer = new Promise<Buffer>((r) => ws.once('message', r));
    ws.send(encodeFrame({ type: 'hello', protocolVersion: 1, wants: 'compression' } as unknown as FrameHeader));
    expect(decodeFrame(await answer).header).toMatchObject({ type: 'welcome', protocolVersion: 1, protocolMinor: PROTOCOL_MINOR });
    ws.terminate();
  });

  it('events: an added data field is dropped, an event the client does not know is ignored, the output still arrives', async () => {
    await using future = await scripted({ type: 'welcome', protocolVersion: 1, protocolMinor: 99, server: 'future', serverVersion: '9' }, ({ id }) => [
      [{ type: 'evt', id, event: 'progress', data: { percent: 50 } }],
      [{ type: 'evt', id, event: 'stdout', data: { offset: 0, encoding: 'utf8' }, addedToFrame: true }, Buffer.from('hello\n')],
      [
        {
          type: 'res',
          id,
          result: {
            exitCode: 0,
            signal: null,
            timedOut: false,
            durationMs: 1,
            stdout: 'hello\n',
            stderr: '',
            truncated: false,
            stdoutBytes: 6,
            stderrBytes: 0,
            cpuMs: 3,
          },
        },
      ],
    ]);
    const client = await Connection.open(future.url, 'x');
    const seen: string[] = [];
    const { result } = await client.call(
      'process.exec',
      { cmd: ['echo', 'hello'], stream: true },
      { onEvent: (event, bytes) => seen.push(`${event.event}@${JSON.stringify(event.data)}:${bytes?.toString() ?? ''}`) },
    );
    expect(seen).toEqual(['stdout@{"offset":0}:hello\n']);
    expect(result).toMatchObject({ exitCode: 0, stdout: 'hello\n' });
    expect(result).not.toHaveProperty('cpuMs');
    client.close();
  });

  it('a known event off its contract fails the call it belongs to, typed, instead of being cast', async () => {
    await using broken = await scripted({ type: 'welcome', protocolVersion: 1, server: 'x', serverVersion: '1' }, ({ id }) => [
      [{ type: 'evt', id, event: 'stdout', data: { offset: 'zero' } }, Buffer.from('x')],
    ]);
    const client = await Connection.open(broken.url, 'x');
    await expect(client.call('process.exec', { cmd: ['true'], stream: true }, { onEvent: () => undefined })).rejects.toThrow(
      /process\.exec's 'stdout' event off-contract/,
    );
    client.close();
  });

  it('an error code a newer server added arrives as InternalError that keeps the code', async () => {
    await using future = await scripted({ type: 'welcome', protocolVersion: 1, protocolMinor: 40, server: 'future', serverVersion: '9' }, ({ id }) => [
      [{ type: 'err', id, error: { code: 'QUOTA_OF_THE_FUTURE', message: 'over the future quota', hint: 'added later' } }],
    ]);
    const client = await Connection.open(future.url, 'x');
    const err = await client.call('system.info', {}).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InternalError);
    expect(err).toMatchObject({ code: 'INTERNAL', message: 'over the future quota', details: { code: 'QUOTA_OF_THE_FUTURE' } });
    client.close();
  });

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

  it('streamed transfers against a daemon of minor 2: a typed UNKNOWN_METHOD, and downloadTo falls back to one frame', async () => {
    const tar = archive(file('old.txt', 'from an older daemon'));
    await using old = await scripted({ type: 'welcome', protocolVersion: 1, protocolMinor: 2, server: 'warren-agent', serverVersion: '0.0.9' }, (req) => {
      if (req.method === 'fs.download')
        return [[{ type: 'res', id: req.id, result: { path: 'd', files: 1, directories: 0, symlinks: 0, bytes: tar.length, skipped: [] } }, tar]];
      return [[{ type: 'err', id: req.id, error: { code: 'UNKNOWN_METHOD', message: `Unknown method '${req.method}'.` } }]];
    });
    const client = await Connection.open(old.url, 'secret');
    const local = await mkdtemp(path.join(os.tmpdir(), 'warren-old-'));
    try {
      expect(client.protocol.minor).toBe(2);
      const files = new Files(() => client);
      await files.downloadTo('d', path.join(local, 'd'));
      expect(await readFile(path.join(local, 'd/old.txt'), 'utf8')).toBe('from an older daemon');
      await writeFile(path.join(local, 'up.txt'), 'x');
      await expect(files.uploadFrom(path.join(local, 'up.txt'), 'up.txt')).rejects.toMatchObject({ code: 'UNKNOWN_METHOD' });
      await expect(files.downloadFile('d/old.txt', path.join(local, 'f.txt'))).rejects.toMatchObject({ code: 'UNKNOWN_METHOD' });
    } finally {
      client.close();
      await rm(local, { recursive: true, force: true });
    }
  });
});
