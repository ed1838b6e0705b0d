import { describe, expect, it } from '@jest/globals';
import { createLogger } from '@warren/controller';
import { Sandbox } from '@warren/sdk';
import { WebSocket } from 'ws';
import { startLocalController } from '../support/local-controller.js';

type Line = { msg: string; requestId?: string } & Record<string, unknown>;

/** Waits for the first line that `match` accepts. */
async function lineWhere(lines: Line[], match: (line: Line) => boolean): Promise<Line> {
  for (;;) {
    const line = lines.find(match);
    if (line) return line;
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('the access log of a WebSocket connection, through a real controller and daemon', () => {
  it('echoes the request id on the 101 answer and logs the connection when it opens and when it closes, without its token', async () => {
    const raw: string[] = [];
    const lines: Line[] = [];
    const logger = createLogger({ level: 'info', destination: { write: (line: string) => void (raw.push(line), lines.push(JSON.parse(line) as Line)) } });
    await using warren = await startLocalController({}, { logger });
    const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: warren.root } });
    try {
      const ws = new WebSocket(`${warren.url.replace('http', 'ws')}/v1/sandboxes/${sandbox.id}/connect`, {
        headers: { authorization: `Bearer ${sandbox.token}`, 'x-request-id': 'trace-ws-1' },
      });
      // 'upgrade' and 'open' come in the same tick: listen for both before either.
      let echoed: unknown;
      ws.once('upgrade', (res) => (echoed = res.headers['x-request-id']));
      await new Promise((resolve, reject) => {
        ws.once('open', resolve);
        ws.once('error', reject);
      });
      expect(echoed).toBe('trace-ws-1');
      expect(await lineWhere(lines, (l) => l.msg === 'ws.connect' && l.requestId === 'trace-ws-1')).toMatchObject({
        level: 'info',
        status: 101,
        sandboxId: sandbox.id,
        caller: 'sandbox',
        path: `/v1/sandboxes/${sandbox.id}/connect`,
      });
      ws.close(1000);
      expect(await lineWhere(lines, (l) => l.msg === 'ws.close' && l.requestId === 'trace-ws-1')).toMatchObject({
        sandboxId: sandbox.id,
        closeCode: 1000,
        durationMs: expect.any(Number),
      });
      // The SDK's own connection gets an id of its own.
      await sandbox.daemonInfo();
      await lineWhere(lines, (l) => l.msg === 'ws.connect' && l.requestId !== 'trace-ws-1' && l.status === 101);
    } finally {
      await sandbox.kill();
    }
    const all = raw.join('');
    for (const secret of [warren.apiKey, sandbox.token]) expect(all.includes(secret)).toBe(false);
  });

  it('names the key id and tenant of every request, and the tenant an admin key acted in when it was not its own', async () => {
    const lines: Line[] = [];
    const logger = createLogger({ level: 'info', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Line) } });
    await using warren = await startLocalController({}, { logger });
    const made = await warren.credentials.keys.create({ tenant: 'acme', role: 'member' });
    const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: made.key, policy: { root: warren.root } });
    try {
      await fetch(`${warren.url}/v1/sandboxes/${sandbox.id}`, { headers: { authorization: `Bearer ${made.key}`, 'x-request-id': 'member-1' } });
      expect(await lineWhere(lines, (l) => l.msg === 'http.request' && l.requestId === 'member-1')).toMatchObject({
        caller: 'operator',
        keyId: made.info.id,
        tenant: 'acme',
        sandboxId: sandbox.id,
      });
      await fetch(`${warren.url}/v1/sandboxes/${sandbox.id}`, { headers: { authorization: `Bearer ${warren.apiKey}`, 'x-request-id': 'admin-1' } });
      expect(await lineWhere(lines, (l) => l.msg === 'http.request' && l.requestId === 'admin-1')).toMatchObject({
        caller: 'operator',
        tenant: 'default',
        actedIn: 'acme',
      });
    } finally {
      await sandbox.kill();
    }
  });
});
