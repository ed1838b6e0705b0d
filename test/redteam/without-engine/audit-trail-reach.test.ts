import { readdirSync, readFileSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { RestClient, Sandbox } from '@warren/sdk';
import { startLocalController, type LocalController } from '../../support/local-controller.js';

/**
 * The durable audit trail is out of reach of what runs in or for a sandbox: the controller keeps
 * it in its state folder on the host, no credential short of the API key and the sandbox's own
 * token reads it, no file call or mount reaches it, and nothing a call carries can forge or evict
 * an entry. A real controller over real daemons, without Docker.
 */
describe("the audit trail is out of the sandbox's reach", () => {
  let warren: LocalController;
  let sandbox: Sandbox;
  let runner: string;
  const MAX_BYTES = 64 * 1024;

  const rest = async (route: string, credential: string) => {
    const res = await fetch(`${warren.url}${route}`, { headers: { authorization: `Bearer ${credential}` } });
    const text = await res.text();
    return { status: res.status, code: res.ok ? 'ok' : ((JSON.parse(text) as { error?: { code?: string } }).error?.code ?? 'no code') };
  };
  const trailFile = (id: string) => path.join(warren.stateDir, 'audit', `${id}.jsonl`);
  const trail = async (id: string) => (await new RestClient(warren.url, warren.apiKey).auditTrail(id, { limit: 10_000 })).entries;

  beforeAll(async () => {
    // Host mounts are allowed below the temporary folder, which holds the controller's state folder too.
    warren = await startLocalController({ allowedMountRoots: [os.tmpdir()], audit: { retentionDays: 30, maxBytesPerSandbox: MAX_BYTES } });
    sandbox = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: warren.root, readOnly: false } });
    await sandbox.commands.run('echo a call to audit');
    runner = (await sandbox.deriveToken({ inherit: true, allowExec: true })).token;
  }, 60_000);
  afterAll(async () => {
    sandbox?.close();
    await warren?.[Symbol.asyncDispose]();
  });

  it("a derived token, even one that may run commands, reads no trail: not the sandbox's, not the export; the sandbox token reads no export", async () => {
    expect(await rest(`/v1/sandboxes/${sandbox.id}/audit`, runner)).toEqual({ status: 403, code: 'FORBIDDEN' });
    expect(await rest('/v1/audit', runner)).toEqual({ status: 401, code: 'UNAUTHORIZED' });
    expect((await rest('/v1/audit', sandbox.token)).code).toMatch(/^(UNAUTHORIZED|FORBIDDEN)$/);
    const handle = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token: runner });
    await expect(handle.auditLog()).rejects.toMatchObject({ code: 'FORBIDDEN' });
    handle.close();
    // The API key reads it.
    expect(await rest(`/v1/sandboxes/${sandbox.id}/audit`, warren.apiKey)).toEqual({ status: 200, code: 'ok' });
  });

  it('no file call reaches the trail file, by its path or by climbing out of the root, and no mount of it is allowed', async () => {
    const file = trailFile(sandbox.id);
    expect(statSync(file).isFile()).toBe(true);
    expect(path.relative(warren.root, file).startsWith('..')).toBe(true);
    const handle = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token: runner });
    for (const attempt of [file, path.relative(warren.root, file)]) {
      await expect(handle.files.read(attempt)).rejects.toMatchObject({ code: expect.stringMatching(/^(PATH_NOT_IN_SANDBOX|FORBIDDEN)$/) });
      await expect(handle.files.write(attempt, '{"seq":0}\n')).rejects.toMatchObject({ code: expect.stringMatching(/^(PATH_NOT_IN_SANDBOX|FORBIDDEN)$/) });
    }
    handle.close();
    const mounted = await fetch(`${warren.url}/v1/sandboxes`, {
      method: 'POST',
      headers: { authorization: `Bearer ${warren.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ mounts: [{ hostPath: path.join(warren.stateDir, 'audit'), path: '/mnt/audit', readOnly: true }] }),
    });
    expect(mounted.status).toBe(403);
    expect(((await mounted.json()) as { error: { message: string } }).error.message).toContain("the controller's state folder");
    // The refused attempts are themselves in the trail, as the derived token's.
    const refused = (await trail(sandbox.id)).filter((e) => e.callerKind === 'derived' && e.outcome !== 'ok');
    expect(refused.length).toBeGreaterThanOrEqual(4);
  });

  it('nothing a call carries forges an entry: a path or command with newlines and JSON in it is one entry, written as it was', async () => {
    const forged = `x"}\n{"seq":0,"time":"2020-01-01T00:00:00.000Z","method":"nothing.happened","paths":[],"outcome":"ok","bytesIn":0,"bytesOut":0,"durationMs":0}\n`;
    const handle = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token: runner });
    await handle.commands.run(`echo '${forged.replace(/'/g, '')}'`).catch(() => undefined);
    await handle.files.write(`forged${forged.replace(/\//g, '')}.txt`, 'x').catch(() => undefined);
    handle.close();
    const entries = await trail(sandbox.id);
    expect(entries.some((e) => e.method === 'nothing.happened')).toBe(false);
    expect(entries.filter((e) => e.command?.includes('nothing.happened') || e.paths.some((p) => p.includes('nothing.happened')))).toHaveLength(2);
    const lines = readFileSync(trailFile(sandbox.id), 'utf8').split('\n').filter(Boolean);
    expect(lines.every((line) => typeof (JSON.parse(line) as { seq?: unknown }).seq === 'number')).toBe(true);
    expect(lines.length).toBe(entries.length);
  });

  it("one sandbox's flood of calls stays within its own bound and evicts nothing of another sandbox's trail", async () => {
    const other = await Sandbox.create({ baseUrl: warren.url, apiKey: warren.apiKey, policy: { root: warren.root, readOnly: false } });
    await other.files.write('kept.txt', 'the other sandbox');
    const kept = await trail(other.id);
    const flood = await Sandbox.connect(sandbox.id, { baseUrl: warren.url, token: runner });
    const long = 'y'.repeat(4000);
    for (let i = 0; i < 60; i++) await flood.commands.run(`echo ${long} ${i}`);
    flood.close();
    const sizes = readdirSync(path.join(warren.stateDir, 'audit'))
      .filter((name) => name.startsWith(sandbox.id))
      .map((name) => statSync(path.join(warren.stateDir, 'audit', name)).size);
    expect(sizes.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(MAX_BYTES + MAX_BYTES / 2);
    const page = await new RestClient(warren.url, warren.apiKey).auditTrail(sandbox.id, { limit: 10_000 });
    expect(page.dropped).toBe(true);
    expect(page.entries.at(-1)!.command).toBe(`echo ${long} 59`);
    expect(await trail(other.id)).toEqual(kept);
    other.close();
  });
});
