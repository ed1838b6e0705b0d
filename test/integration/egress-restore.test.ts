import { mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { EgressCa } from '../../packages/controller/src/egress/ca.js';
import { EgressGateway } from '../../packages/controller/src/egress/gateway.js';
import { EgressStore } from '../../packages/controller/src/egress/egress-store.js';
import { SandboxEgress } from '../../packages/controller/src/egress/sandbox-egress.js';

// In-process: a real gateway and store on a temporary state folder; no sandbox, no packet out.
let stateDir: string;
let ca: EgressCa;
const open: SandboxEgress[] = [];

beforeEach(async () => {
  stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-egress-restore-'));
  ca ??= (await EgressCa.create()).ca;
});
afterEach(async () => {
  for (const egress of open.splice(0)) await egress.close();
  await rm(stateDir, { recursive: true, force: true });
});

async function controllerEgress(): Promise<SandboxEgress> {
  const gateway = new EgressGateway({
    operator: { deny: [], labCidrs: [], resolvers: [], maxConnectionsPerSandbox: 8, secrets: { lab: 'operator-value' } },
    ca,
    resolver: { resolve: async () => [] },
  });
  const egress = await SandboxEgress.create({ gateway, caPem: ca.certPem, maxConnections: 8, store: new EgressStore(stateDir) });
  open.push(egress);
  return egress;
}

const binding = { name: 'API_KEY', ref: 'lab', hosts: ['api.test'], target: { header: 'Authorization', template: 'Bearer {secret}' } };

describe('egress kept across a controller restart', () => {
  it('registers a sandbox again with its policy, version and the same placeholder, after close() left the file', async () => {
    const first = await controllerEgress();
    const env = await first.register('sbx1', { mode: 'allow', rules: [{ host: 'api.test' }] }, [binding]);
    await first.update('sbx1', { mode: 'allow', rules: [{ host: 'other.test', ports: [80] }] });
    await first.close(); // a clean stop: the sandbox keeps running, so its egress stays stored
    expect(await readdir(path.join(stateDir, 'egress'))).toEqual(['sbx1.json']);

    const second = await controllerEgress();
    expect(await second.restore('sbx1')).toBe(true);
    expect(second.has('sbx1')).toBe(true);
    expect(second.policyOf('sbx1')).toEqual({ policy: { mode: 'allow', rules: [{ host: 'other.test', ports: [80] }] }, version: 2 });
    expect(await second.restore('unknown')).toBe(false);
    // The same placeholder the container's environment holds.
    const stored = await new EgressStore(stateDir).read('sbx1');
    expect(stored?.secrets).toEqual([expect.objectContaining({ name: 'API_KEY', placeholder: env.API_KEY, value: 'operator-value' })]);
    await second.remove('sbx1');
    expect(await readdir(path.join(stateDir, 'egress'))).toEqual([]);
  });

  it('stores the last of concurrent updates, and an update racing a removal leaves no file behind', async () => {
    const egress = await controllerEgress();
    await egress.register('sbx2', { mode: 'none' }, [binding]);
    await Promise.all(Array.from({ length: 8 }, (_, i) => egress.update('sbx2', { mode: 'allow', rules: [{ host: `h${i}.test` }] })));
    expect((await new EgressStore(stateDir).read('sbx2'))?.version).toBe(9);
    expect((await new EgressStore(stateDir).read('sbx2'))?.policy).toEqual({ mode: 'allow', rules: [{ host: 'h7.test' }] });
    const late = egress.update('sbx2', { mode: 'none' });
    await egress.remove('sbx2');
    await late;
    expect(await readdir(path.join(stateDir, 'egress'))).toEqual([]);
  });

  it('deletes the stored egress of sandboxes that are gone', async () => {
    const egress = await controllerEgress();
    await egress.register('kept', { mode: 'none' }, [binding]);
    await egress.register('gone', { mode: 'none' }, [binding]);
    await egress.forgetStoredExcept(new Set(['kept']));
    expect(await readdir(path.join(stateDir, 'egress'))).toEqual(['kept.json']);
  });
});
