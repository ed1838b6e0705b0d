import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from '@jest/globals';
import type { AuditEntry, AuditExportLine } from '@warren/protocol';
import { RestClient, Sandbox } from '@warren/sdk';
import { Sandbox as E2bSandbox } from 'e2b';
import { startLocalController } from '../support/local-controller.js';

/**
 * The controller's durable audit trail over a real controller and real daemons: every call made
 * on a sandbox, through every door, lands in `<stateDir>/audit` attributed to who made it, and is
 * still there after the daemon restarted, while the sandbox hibernates, after the controller
 * restarted, and after the sandbox is gone.
 */
describe('the durable audit trail', () => {
  it('records exec and file calls over the WebSocket and the E2B REST doors, with caller kind, key and tenant, and keeps them across daemon and controller restarts', async () => {
    await using warren = await startLocalController();
    const keyId = createHash('sha256').update(warren.apiKey).digest('hex').slice(0, 16);
    const rest = () => new RestClient(warren.url, warren.apiKey);
    const trailOf = async (id: string): Promise<AuditEntry[]> => (await rest().auditTrail(id, { limit: 10_000 })).entries;

    // The SDK's WebSocket, through the relay's CallGate.
    const sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: warren.root, readOnly: false } });
    const long = `echo audited-marker ${'a'.repeat(3000)}`;
    expect((await sandbox.commands.run(long)).exitCode).toBe(0);
    await sandbox.files.write('ws.txt', 'over the websocket');
    const { token } = await sandbox.deriveToken({ allowRead: [warren.root], readonly: true });
    const reader = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token });
    expect(await reader.files.read('ws.txt')).toBe('over the websocket');
    await expect(reader.commands.run('cat /etc/shadow')).rejects.toMatchObject({ code: 'FORBIDDEN' });
    reader.close();

    // The E2B gateway's REST doors, through the controller's own daemon sessions.
    const e2bOptions = { apiKey: warren.apiKey, apiUrl: `${warren.url}/e2b`, sandboxUrl: `${warren.url}/e2b` };
    const e2b = await E2bSandbox.create(e2bOptions);
    await e2b.files.write('e2b.txt', 'over rest');
    expect((await e2b.commands.run('echo via-e2b')).stdout).toBe('via-e2b\n');

    const entries = await trailOf(sandbox.id);
    const exec = entries.find((e) => e.command?.startsWith('echo audited-marker'));
    // The SDK's handle speaks with the sandbox's own token, handed to the key that created the sandbox.
    expect(exec).toMatchObject({ outcome: 'ok', callerKind: 'sandbox', keyId, tenant: 'default' });
    expect(exec!.command).toBe(long);
    expect(entries.find((e) => e.method === 'fs.write' && e.paths.includes('ws.txt'))).toMatchObject({
      outcome: 'ok',
      bytesIn: 'over the websocket'.length,
      callerKind: 'sandbox',
      keyId,
    });
    const derived = entries.filter((e) => e.callerKind === 'derived');
    expect(derived.map((e) => [e.method, e.outcome])).toEqual(
      expect.arrayContaining([
        [expect.stringMatching(/^fs\.read/), 'ok'],
        [expect.stringMatching(/^process\./), 'FORBIDDEN'],
      ]),
    );
    expect(derived.find((e) => e.outcome === 'FORBIDDEN')).toMatchObject({ command: 'cat /etc/shadow', tokenId: expect.any(String), tenant: 'default' });
    expect(entries.some((e) => e.method === 'audit.list')).toBe(false);

    const viaE2b = await trailOf(e2b.sandboxId);
    // The e2b SDK speaks to the gateway with the sandbox's access token.
    expect(viaE2b.find((e) => e.paths.some((p) => p.endsWith('e2b.txt')))).toMatchObject({ outcome: 'ok', callerKind: 'sandbox', keyId, tenant: 'default' });
    expect(viaE2b.find((e) => e.command?.includes('echo via-e2b'))).toMatchObject({ outcome: 'ok', callerKind: 'sandbox', keyId });

    // The daemon restarts: its in-memory ring starts over, the controller's trail does not.
    const before = await trailOf(sandbox.id);
    sandbox.close();
    await warren.restartDaemons();
    const again = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, apiKey: warren.apiKey });
    const ring = await again.auditLog({ limit: 10_000 });
    expect(ring.entries.some((e) => e.command?.startsWith('echo audited-marker'))).toBe(false);
    await again.files.write('after.txt', 'after the daemon restart');
    again.close();
    const afterDaemon = await trailOf(sandbox.id);
    expect(afterDaemon.slice(0, before.length)).toEqual(before);
    // A handle opened with the API key itself.
    expect(afterDaemon.at(-1)).toMatchObject({ method: 'fs.write', paths: ['after.txt'], callerKind: 'operator', keyId, tenant: 'default' });

    // Hibernated: the trail is read without waking the sandbox.
    await rest().action(sandbox.id, 'hibernate');
    expect((await trailOf(sandbox.id)).length).toBe(afterDaemon.length);
    expect((await rest().get(sandbox.id)).state).toBe('hibernated');

    // A new controller over the same state folder: the entries are there, and seq goes on.
    await warren.restartController();
    const afterController = await rest().auditTrail(sandbox.id, { limit: 10_000 });
    expect(afterController.entries).toEqual(afterDaemon);
    const woken = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, apiKey: warren.apiKey });
    await woken.files.read('after.txt');
    woken.close();
    const last = (await trailOf(sandbox.id)).at(-1)!;
    expect(last).toMatchObject({ method: expect.stringMatching(/^fs\.read/), paths: ['after.txt'] });
    expect(last.seq).toBeGreaterThan(afterController.lastSeq);

    // Gone: the export still has the sandbox's trail until retention ends.
    await rest().kill(e2b.sandboxId);
    const exported: AuditExportLine[] = [];
    for await (const line of rest().exportAudit({ sandbox: e2b.sandboxId })) exported.push(line);
    expect(exported.length).toBe(viaE2b.length);
    expect(exported.every((line) => line.sandboxId === e2b.sandboxId && line.tenant === 'default')).toBe(true);
    const all: AuditExportLine[] = [];
    for await (const line of rest().exportAudit({ since: new Date(Date.now() - 3_600_000).toISOString() })) all.push(line);
    expect(new Set(all.map((line) => line.sandboxId))).toEqual(new Set([sandbox.id, e2b.sandboxId]));

    // `warren audit export` writes the same lines to an owner-only file.
    const out = path.join(warren.root, '..', 'export.jsonl');
    const cli = await promisify(execFile)(process.execPath, [
      path.resolve('packages/cli/bin/warren.js'),
      'audit',
      'export',
      '--url',
      warren.url,
      '--api-key',
      warren.apiKey,
      '--sandbox',
      e2b.sandboxId,
      '--out',
      out,
    ]);
    expect(cli.stderr).toContain(`Wrote ${exported.length} audit entries`);
    expect(
      readFileSync(out, 'utf8')
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as AuditExportLine),
    ).toEqual(exported);
    expect(statSync(out).mode & 0o777).toBe(0o600);

    // On the host, owner-only.
    const dir = path.join(warren.stateDir, 'audit');
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    for (const name of readdirSync(dir)) expect([name, statSync(path.join(dir, name)).mode & 0o777]).toEqual([name, 0o600]);
  });
});
