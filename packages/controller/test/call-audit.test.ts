import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from '@jest/globals';
import { encodeFrame, type FrameHeader } from '@warren/protocol';
import { attributionOf, CallAudit } from '../src/audit/call-audit.js';
import { AuditTrail } from '../src/audit/trail.js';
import { CallGate } from '../src/call-gate.js';
import type { Holder } from '../src/grants.js';
import { Metrics } from '../src/metrics.js';
import { DEFAULT_ADMIN } from '../src/tenancy/principals.js';

const policy = { root: '/workspace', readOnly: false };
const operator: Holder = { caller: { kind: 'operator', ...DEFAULT_ADMIN }, grant: () => ({ policy, allowExec: true, allowAudit: true }) };
const reader: Holder = {
  caller: { kind: 'derived', sandboxId: 'sb1', grant: {}, keyId: 'k9', tokenId: 'tok1' },
  grant: () => ({ policy: { root: '/workspace', readOnly: true }, allowExec: false }),
};
const frame = (header: Record<string, unknown>, payload?: Buffer) => encodeFrame(header as FrameHeader, payload);

describe('the durable trail at the relay: what the CallGate sees of each call', () => {
  const dirs: string[] = [];
  const openTrail = async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'warren-call-audit-'));
    dirs.push(dir);
    return AuditTrail.open({ dir });
  };
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it('attributes each kind of caller: an API key by its id, a derived token by its minting key and token id, the sandbox token by kind', () => {
    const sandbox = { tenant: 'acme', creatorKeyId: 'k1' };
    expect(attributionOf({ kind: 'operator', ...DEFAULT_ADMIN }, sandbox)).toEqual({ callerKind: 'operator', keyId: DEFAULT_ADMIN.keyId, tenant: 'acme' });
    expect(attributionOf({ kind: 'sandbox', sandboxId: 'sb1' }, sandbox)).toEqual({ callerKind: 'sandbox', keyId: 'k1', tenant: 'acme' });
    expect(attributionOf({ kind: 'sandbox', sandboxId: 'sb1' }, { tenant: 'acme' })).toEqual({ callerKind: 'sandbox', tenant: 'acme' });
    expect(attributionOf(reader.caller, sandbox)).toEqual({ callerKind: 'derived', keyId: 'k9', tenant: 'acme', tokenId: 'tok1' });
  });

  it('records method, paths, the long command, bytes each way, outcome and caller; a refused call too; a call cut by the close as CANCELLED', async () => {
    const trail = await openTrail();
    const long = `python -c "${'x'.repeat(5000)}"`;
    const gate = new CallGate({
      holder: operator,
      metrics: new Metrics(),
      maxMessageBytes: 1 << 20,
      audit: new CallAudit(trail, 'sb1', attributionOf(operator.caller, { tenant: 'acme' })),
    });
    gate.fromClient(frame({ type: 'req', id: 1, method: 'fs.write', params: { path: 'a.txt' } }, Buffer.from('hello')));
    gate.fromDaemon(frame({ type: 'res', id: 1, result: {} }));
    gate.fromClient(frame({ type: 'req', id: 2, method: 'process.exec', params: { cmd: long, cwd: 'src' } }));
    gate.fromDaemon(frame({ type: 'evt', id: 2, event: 'stdout', data: {} }, Buffer.from('12345678')));
    gate.fromDaemon(frame({ type: 'err', id: 2, error: { code: 'NOT_FOUND', message: 'gone' } }));
    gate.fromClient(frame({ type: 'req', id: 3, method: 'fs.read', params: { path: 'b.txt' } }));
    gate.fromClient(frame({ type: 'req', id: 4, method: 'audit.list', params: {} }));
    // A daemon (in the sandbox, so possibly hostile) answering with a code of its own choosing is recorded as INTERNAL.
    gate.fromClient(frame({ type: 'req', id: 5, method: 'fs.stat', params: { path: 'c' } }));
    gate.fromDaemon(frame({ type: 'err', id: 5, error: { code: 'MADE_UP_BY_A_DAEMON', message: '' } }));
    gate.close();
    const { entries } = await trail.list('sb1', { limit: 10 });
    expect(entries.map((e) => [e.method, e.paths, e.outcome, e.bytesIn, e.bytesOut])).toEqual([
      ['fs.write', ['a.txt'], 'ok', 5, 0],
      ['process.exec', ['src'], 'NOT_FOUND', 0, 8],
      ['fs.stat', ['c'], 'INTERNAL', 0, 0],
      ['fs.read', ['b.txt'], 'CANCELLED', 0, 0],
    ]);
    expect(entries[1]!.command).toBe(long);
    expect(entries[0]).toMatchObject({ callerKind: 'operator', keyId: DEFAULT_ADMIN.keyId, tenant: 'acme' });
  });

  it('a call the per-frame check refuses never reaches the daemon, and is in the trail as FORBIDDEN with the token that tried', async () => {
    const trail = await openTrail();
    const gate = new CallGate({
      holder: reader,
      metrics: new Metrics(),
      maxMessageBytes: 1 << 20,
      audit: new CallAudit(trail, 'sb1', attributionOf(reader.caller, { tenant: 'acme' })),
    });
    expect(gate.fromClient(frame({ type: 'req', id: 1, method: 'process.exec', params: { cmd: 'cat /etc/shadow' } }))).toBeDefined();
    const { entries } = await trail.list('sb1', { limit: 10 });
    expect(entries).toEqual([
      expect.objectContaining({
        method: 'process.exec',
        command: 'cat /etc/shadow',
        outcome: 'FORBIDDEN',
        callerKind: 'derived',
        keyId: 'k9',
        tokenId: 'tok1',
      }),
    ]);
  });
});
