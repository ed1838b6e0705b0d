import { describe, expect, it } from '@jest/globals';
import type { AuditRecord } from '../src/audit/trail.js';
import { API_KEY, startFakeHttpServer, type FakeHttpServer } from './http-server.js';

function call(tenant: string, method: string): AuditRecord {
  return { time: new Date().toISOString(), method, paths: [], outcome: 'ok', bytesIn: 0, bytesOut: 0, durationMs: 1, callerKind: 'operator', tenant };
}

async function get(server: FakeHttpServer, route: string, key: string): Promise<{ status: number; code?: string; lines: Record<string, unknown>[] }> {
  const res = await fetch(`${server.url}${route}`, { headers: { authorization: `Bearer ${key}` } });
  const text = await res.text();
  if (!res.ok) return { status: res.status, code: (JSON.parse(text) as { error: { code: string } }).error.code, lines: [] };
  return {
    status: res.status,
    lines: text
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Record<string, unknown>),
  };
}

describe('the audit routes read the durable trail', () => {
  it("GET /v1/audit: a member key reads its own tenant's entries only and may not name another; an admin key reads every tenant or the one it names", async () => {
    await using server = await startFakeHttpServer();
    const trail = server.sandboxes.auditTrail!;
    trail.append('sbacme', call('acme', 'fs.read'));
    trail.append('sbacme', call('acme', 'fs.write'));
    trail.append('sbbeta', call('beta', 'process.exec'));
    const member = (await server.sandboxes.credentials.keys.create({ tenant: 'acme', role: 'member' })).key;
    const mine = await get(server, '/v1/audit', member);
    expect(mine.lines.map((l) => [l.sandboxId, l.method])).toEqual([
      ['sbacme', 'fs.read'],
      ['sbacme', 'fs.write'],
    ]);
    expect((await get(server, '/v1/audit?sandbox=sbbeta', member)).lines).toEqual([]);
    expect(await get(server, '/v1/audit?tenant=beta', member)).toMatchObject({ status: 403, code: 'FORBIDDEN' });
    expect((await get(server, '/v1/audit', API_KEY)).lines.map((l) => l.sandboxId)).toEqual(['sbacme', 'sbacme', 'sbbeta']);
    expect((await get(server, '/v1/audit?tenant=beta', API_KEY)).lines.map((l) => l.method)).toEqual(['process.exec']);
    expect(await get(server, '/v1/audit?since=yesterday', API_KEY)).toMatchObject({ status: 400, code: 'INVALID_PARAMS' });
    expect((await get(server, `/v1/audit?until=${new Date(Date.now() - 60_000).toISOString()}`, API_KEY)).lines).toEqual([]);
  });

  it("GET /v1/sandboxes/:id/audit pages the sandbox's trail with audit.list's bounds, and reads a hibernated sandbox without waking it", async () => {
    await using server = await startFakeHttpServer();
    const { id } = await server.sandboxes.create({});
    for (let i = 0; i < 5; i++) server.sandboxes.auditTrail!.append(id, call('default', 'fs.read'));
    const res = await fetch(`${server.url}/v1/sandboxes/${id}/audit?since=1&limit=2`, { headers: { authorization: `Bearer ${API_KEY}` } });
    expect(await res.json()).toMatchObject({ entries: [{ seq: 2 }, { seq: 3 }], nextCursor: 3, lastSeq: 4, dropped: false });
    for (const limit of [0, 10_001]) {
      const refused = await fetch(`${server.url}/v1/sandboxes/${id}/audit?limit=${limit}`, { headers: { authorization: `Bearer ${API_KEY}` } });
      expect([limit, refused.status, ((await refused.json()) as { error: { code: string } }).error.code]).toEqual([limit, 400, 'INVALID_PARAMS']);
    }
    await server.sandboxes.hibernate(id);
    const asleep = await fetch(`${server.url}/v1/sandboxes/${id}/audit`, { headers: { authorization: `Bearer ${API_KEY}` } });
    expect(((await asleep.json()) as { entries: unknown[] }).entries).toHaveLength(5);
    expect(server.sandboxes.record(id).hibernated).toBe(true);
  });
});
