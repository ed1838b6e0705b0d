import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { encodeFrame } from '@warren/protocol';
import { Sandbox } from '@warren/sdk';
import { startLocalController, type LocalController } from '../../support/local-controller.js';
import { outcomeOf, RawClient } from '../../support/reliability.js';

/**
 * One authorization model for every door, and answers that always reach their caller: a real
 * controller (REST, relay, per-frame checks) over a real daemon, without Docker.
 */
describe('every door: one rule for the WebSocket and REST', () => {
  let warren: LocalController;
  let sandbox: Sandbox;
  let token: string;
  const handles: Record<string, string> = {};

  const rest = async (method: string, route: string, credential: string, body?: unknown) => {
    const res = await fetch(`${warren.url}${route}`, {
      method,
      headers: { authorization: `Bearer ${credential}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, code: text ? ((JSON.parse(text) as { error?: { code?: string } }).error?.code ?? 'ok') : 'ok' };
  };
  const ws = async (credential: string, call: (s: Sandbox) => Promise<unknown>) => {
    const handle = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token: credential });
    try {
      return await call(handle).then(
        () => 'ok',
        (err: { code?: string }) => err.code ?? 'no code',
      );
    } finally {
      handle.close();
    }
  };

  beforeAll(async () => {
    warren = await startLocalController({ maxMessageBytes: 20 * 1024 * 1024 });
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: warren.root, readOnly: false } });
    token = sandbox.token;
    await mkdir(path.join(warren.root, 'src'));
    await writeFile(path.join(warren.root, 'src', 'a.txt'), 'x');
    await sandbox.commands.run('echo top secret command line');
    handles['API key'] = warren.apiKey;
    handles['sandbox token'] = token;
    handles['derived, one folder, read-only'] = (await sandbox.deriveToken({ allowRead: [path.join(warren.root, 'src')], readonly: true })).token;
    handles['derived, everything, with exec'] = (await sandbox.deriveToken({ inherit: true, allowExec: true })).token;
  }, 60_000);
  afterAll(async () => {
    sandbox?.close();
    await warren?.[Symbol.asyncDispose]();
  });

  it('a derived handle reads no audit log, over the WebSocket as over REST; each method and its REST route agree for every credential', async () => {
    const seen: Record<string, unknown> = {};
    for (const [name, credential] of Object.entries(handles)) {
      const derived = name.startsWith('derived');
      const audit = { ws: await ws(credential, (s) => s.auditLog()), rest: (await rest('GET', `/v1/sandboxes/${sandbox.id}/audit`, credential)).code };
      const info = { ws: await ws(credential, (s) => s.daemonInfo()), rest: (await rest('GET', `/v1/sandboxes/${sandbox.id}`, credential)).code };
      seen[name] = { audit, info };
      expect([name, audit]).toEqual([name, derived ? { ws: 'FORBIDDEN', rest: 'FORBIDDEN' } : { ws: 'ok', rest: 'ok' }]);
      expect([name, info]).toEqual([name, { ws: 'ok', rest: 'ok' }]);
    }
    // The refusal says why and what is allowed, and the daemon never saw the call.
    const reader = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token: handles['derived, one folder, read-only']! });
    await expect(reader.auditLog()).rejects.toMatchObject({
      code: 'FORBIDDEN',
      message: expect.stringContaining("only the API key or the sandbox's own token"),
    });
    reader.close();
    const log = await sandbox.auditLog({ limit: 10_000 });
    expect(log.entries.some((e) => e.method === 'audit.list')).toBe(false);
  });

  it('the other classes hold at both doors: exec and writes over the WebSocket, lifecycle over REST', async () => {
    const reader = handles['derived, one folder, read-only']!;
    const runner = handles['derived, everything, with exec']!;
    expect(await ws(reader, (s) => s.commands.run('true'))).toBe('FORBIDDEN');
    expect(await ws(reader, (s) => s.files.write(path.join(warren.root, 'src', 'b.txt'), 'no'))).toBe('FORBIDDEN');
    expect(await ws(reader, (s) => s.files.read(path.join(warren.root, 'src', 'a.txt')))).toBe('ok');
    expect(await ws(runner, (s) => s.commands.run('true'))).toBe('ok');
    for (const credential of [reader, runner]) {
      for (const [method, action, body] of [
        ['POST', 'keepalive'],
        ['POST', 'pause'],
        ['POST', 'timeout', { ttlSeconds: 600 }],
        ['DELETE', ''],
      ] as const) {
        const route = `/v1/sandboxes/${sandbox.id}${action ? `/${action}` : ''}`;
        expect([method, route, await rest(method, route, credential, body)]).toEqual([method, route, { status: 403, code: 'FORBIDDEN' }]);
      }
      expect((await rest('POST', `/v1/sandboxes/${sandbox.id}/derive`, credential, { readonly: true })).status).toBe(201);
      expect((await rest('GET', '/v1/sandboxes', credential)).status).toBe(401);
    }
    expect((await rest('POST', `/v1/sandboxes/${sandbox.id}/keepalive`, token)).status).toBe(200);
  });

  it('audit reads are paged over REST: since, limit and nextCursor', async () => {
    for (let i = 0; i < 30; i++) await sandbox.files.stat(path.join(warren.root, 'src', 'a.txt'));
    const page = async (query: string) =>
      (await fetch(`${warren.url}/v1/sandboxes/${sandbox.id}/audit?${query}`, { headers: { authorization: `Bearer ${token}` } })).json() as Promise<{
        entries: { seq: number }[];
        nextCursor?: number;
      }>;
    const first = await page('limit=10');
    expect(first.entries).toHaveLength(10);
    expect(first.nextCursor).toBe(first.entries.at(-1)!.seq);
    const second = await page(`since=${first.nextCursor}&limit=10`);
    expect(second.entries[0]!.seq).toBe(first.entries.at(-1)!.seq + 1);
    const seqs: number[] = [];
    for await (const entry of sandbox.auditEntries()) seqs.push(entry.seq);
    expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i));
    expect(seqs.length).toBeGreaterThan(30);
  });

  it('a frame over the relay cap, and a request header over the frame cap, are refused with their ids at once; the connection lives on', async () => {
    const raw = await RawClient.open(warren.url, sandbox.id, token);
    try {
      let started = Date.now();
      raw.sendJson(
        JSON.stringify({ type: 'req', id: 41, method: 'fs.write', params: { path: path.join(warren.root, 'big.bin') } }),
        Buffer.alloc(21 * 1024 * 1024, 1),
      );
      expect(await raw.answer(41)).toMatchObject({
        type: 'err',
        id: 41,
        error: { code: 'FRAME_TOO_LARGE', message: expect.stringContaining('maxMessageBytes') },
      });
      // "At once" means without waiting for a timeout (30 s), not a speed: a loaded machine takes its time.
      expect(Date.now() - started).toBeLessThan(10_000);

      // The daemon's own header cap, behind a controller that passes larger frames.
      const header = Buffer.from(
        JSON.stringify({ type: 'req', id: 'big-env', method: 'process.exec', params: { cmd: 'true', env: { BIG: 'x'.repeat(17 * 1024 * 1024) } } }),
      );
      const prefix = Buffer.alloc(4);
      prefix.writeUInt32BE(header.length);
      started = Date.now();
      raw.send(Buffer.concat([prefix, header]));
      expect(await raw.answer('big-env')).toMatchObject({ type: 'err', id: 'big-env', error: { code: 'FRAME_TOO_LARGE' } });
      expect(Date.now() - started).toBeLessThan(10_000);

      raw.send(encodeFrame({ type: 'req', id: 42, method: 'system.info', params: {} }));
      expect(outcomeOf(await raw.answer(42))).toBe('ok');
    } finally {
      raw.close();
    }
  });

  it('an error answer too large for a frame (1.3 million unknown keys named back) is cut and delivered with its id; the daemon lives on', async () => {
    const before = await sandbox.daemonInfo();
    const keys = Array.from({ length: 1_300_000 }, (_, i) => `"k${i}":0`).join(',');
    const raw = await RawClient.open(warren.url, sandbox.id, token);
    try {
      raw.sendJson(`{"type":"req","id":"keys","method":"fs.stat","params":{"path":"a",${keys}}}`);
      const answer = await raw.answer('keys', 30_000);
      expect(answer).toMatchObject({ type: 'err', id: 'keys', error: { code: 'INVALID_PARAMS', message: expect.stringContaining('cut') } });
      // The same without an id to answer to: an error frame with id null, cut too.
      raw.sendJson(`{"type":"cancel",${keys}}`);
      expect(await raw.anonymousError(30_000)).toMatchObject({ type: 'err', id: null, error: { code: 'INVALID_FRAME' } });
      raw.send(encodeFrame({ type: 'req', id: 43, method: 'system.info', params: {} }));
      expect(outcomeOf(await raw.answer(43))).toBe('ok');
    } finally {
      raw.close();
    }
    expect((await sandbox.daemonInfo()).uptimeMs).toBeGreaterThan(before.uptimeMs);
  }, 60_000);

  it('a key cannot put a sandbox past the egress gateway: network bridge is FORBIDDEN unless the operator turned it on', async () => {
    for (const body of [{ network: 'bridge' }, { network: 'bridge', policy: { root: warren.root } }]) {
      expect(await rest('POST', '/v1/sandboxes', warren.apiKey, body)).toEqual({ status: 403, code: 'FORBIDDEN' });
    }
    await expect(Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, network: 'bridge' })).rejects.toMatchObject({ code: 'FORBIDDEN' });
  });

  it('unknown REST paths, prototype names included, answer 404 on every route shape; a wrong HTTP method 405', async () => {
    const names = ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf', 'isPrototypeOf', '__defineGetter__', 'prototype', 'nope'];
    const shapes = (name: string) => [
      `/${name}`,
      `/v1/${name}`,
      `/v1/sandboxes/${name}`,
      `/v1/sandboxes/${sandbox.id}/${name}`,
      `/v1/sandboxes/${name}/audit`,
      `/v1/sandboxes/${sandbox.id}/${name}/x`,
      `/v1/sandboxes/${sandbox.id}/audit/${name}`,
    ];
    const seen = new Set<string>();
    for (const name of names) {
      for (const route of shapes(name)) {
        for (const method of ['GET', 'POST', 'DELETE', 'PUT']) {
          const answer = await rest(method, route, warren.apiKey);
          expect([method, route, answer.status]).toEqual([method, route, 404]);
          seen.add(answer.code);
        }
      }
      // A prototype name as a label filter filters (nothing matches), never lists everything.
      const filtered = await fetch(`${warren.url}/v1/sandboxes?label=${encodeURIComponent(`${name}=x`)}`, {
        headers: { authorization: `Bearer ${warren.apiKey}` },
      });
      expect([name, filtered.status, ((await filtered.json()) as { sandboxes: unknown[] }).sandboxes]).toEqual([name, 200, []]);
    }
    expect([...seen].sort()).toEqual(['NOT_FOUND', 'SANDBOX_NOT_FOUND']);
    for (const [method, route] of [
      ['GET', `/v1/sandboxes/${sandbox.id}/keepalive`],
      ['POST', `/v1/sandboxes/${sandbox.id}/audit`],
      ['PUT', '/v1/sandboxes'],
      ['PUT', `/v1/sandboxes/${sandbox.id}`],
    ] as const) {
      expect([method, route, await rest(method, route, warren.apiKey)]).toEqual([method, route, { status: 405, code: 'METHOD_NOT_ALLOWED' }]);
    }
  });
});
