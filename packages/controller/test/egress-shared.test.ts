import { afterEach, describe, expect, it } from '@jest/globals';
import { CodedError, type EgressPolicy } from '@warren/protocol';
import { EgressCa } from '../src/egress/ca.js';
import type { StoredEgress } from '../src/egress/egress-store.js';
import { EgressGateway } from '../src/egress/gateway.js';
import { SandboxEgress } from '../src/egress/sandbox-egress.js';
import type { EgressTunnel, EgressTunnelOptions } from '../src/egress/tunnel.js';
import type { DaemonEndpoint, SharedEgressStore } from '../src/provider.js';

/** The cluster's Secrets as the replicas see them: stored egress, bound or not, and the acknowledged version. */
class FakeSecrets implements SharedEgressStore {
  readonly shared = true as const;
  readonly entries = new Map<string, { egress: StoredEgress; bound: boolean; applied?: number }>();
  async write(id: string, egress: StoredEgress): Promise<void> {
    const previous = this.entries.get(id);
    this.entries.set(id, { ...previous, egress: structuredClone(egress), bound: previous?.bound ?? false });
  }
  async read(id: string): Promise<StoredEgress | undefined> {
    return structuredClone(this.entries.get(id)?.egress);
  }
  async ids(): Promise<string[]> {
    return [...this.entries.keys()];
  }
  async removeTemporary(): Promise<void> {}
  async remove(id: string): Promise<void> {
    this.entries.delete(id);
  }
  async updatePolicy(id: string, policy: EgressPolicy): Promise<number | undefined> {
    const entry = this.entries.get(id);
    if (!entry) return undefined;
    entry.egress = { ...entry.egress, policy, version: entry.egress.version + 1 };
    return entry.egress.version;
  }
  async bind(id: string): Promise<void> {
    this.entries.get(id)!.bound = true;
  }
  async acknowledge(id: string, version: number): Promise<void> {
    const entry = this.entries.get(id);
    if (entry) entry.applied = version;
  }
  async applied(id: string): Promise<number | undefined> {
    return this.entries.get(id)?.applied;
  }
  async readBound(): Promise<Map<string, StoredEgress>> {
    return new Map([...this.entries].filter(([, e]) => e.bound).map(([id, e]) => [id, structuredClone(e.egress)]));
  }
}

/** The daemons' relays: one `egress.serve` at a time per sandbox, as the real daemon has it (CONFLICT for a second). */
class FakeDaemons {
  readonly holders = new Map<string, string>();
  opener(replica: string) {
    return async (options: EgressTunnelOptions): Promise<EgressTunnel> => {
      const agentId = (options.endpoint as unknown as { agentId: string }).agentId;
      if (this.holders.has(agentId)) throw new CodedError('CONFLICT', 'The egress relay is already served on another connection; cancel that call first.');
      this.holders.set(agentId, replica);
      let resolveClosed!: (reason: string) => void;
      const closed = new Promise<string>((r) => (resolveClosed = r));
      return {
        port: 3128,
        transparentPorts: undefined,
        connections: 0,
        closed,
        close: (reason = 'closed') => {
          if (this.holders.get(agentId) === replica) this.holders.delete(agentId);
          resolveClosed(reason);
        },
      } as unknown as EgressTunnel;
    };
  }
}

const open: SandboxEgress[] = [];
afterEach(async () => {
  for (const egress of open.splice(0)) await egress.close();
});

let ca: EgressCa | undefined;
async function replica(name: string, store: FakeSecrets, daemons: FakeDaemons): Promise<SandboxEgress> {
  ca ??= (await EgressCa.create()).ca;
  const gateway = new EgressGateway({
    operator: { deny: [], labCidrs: [], resolvers: [], maxConnectionsPerSandbox: 8, secrets: {} },
    ca,
    resolver: { resolve: async () => [] },
  });
  const egress = await SandboxEgress.create({ gateway, caPem: ca.certPem, maxConnections: 8, store, ackTimeoutMs: 2000, openTunnel: daemons.opener(name) });
  open.push(egress);
  return egress;
}

const channel = (agentId: string) => ({ endpoint: { agentId } as unknown as DaemonEndpoint, secret: 's' });
const secret = { name: 'API_KEY', value: 'real-value', hosts: ['api.test'], target: { header: 'Authorization', template: 'Bearer {secret}' } };

describe('egress shared by controller replicas (a shared store, one relay per sandbox)', () => {
  it('serves each relay on exactly one replica, carries updates made elsewhere to it, and lets another take over when it goes', async () => {
    const store = new FakeSecrets();
    const daemons = new FakeDaemons();
    const a = await replica('a', store, daemons);
    const b = await replica('b', store, daemons);

    const env = await a.register('sbx', { mode: 'allow', rules: [{ host: 'api.test' }] }, [secret]);
    // Not bound yet (its pod is being made): no other replica touches it.
    await b.follow(channel);
    expect(b.has('sbx')).toBe(false);
    await a.connect('sbx', channel('sbx').endpoint, 's');
    await a.bind('sbx');
    expect(daemons.holders.get('sbx')).toBe('a');

    // B tries, the daemon refuses (A serves), and B keeps nothing registered.
    await b.follow(channel);
    expect(b.has('sbx')).toBe(false);
    expect(daemons.holders.get('sbx')).toBe('a');

    // An update on B waits until A, the serving replica, enforces it.
    const updating = b.update('sbx', { mode: 'allow', rules: [{ host: 'other.test' }] });
    await new Promise((r) => setTimeout(r, 50));
    await a.follow(channel);
    expect(await updating).toEqual({ policy: { mode: 'allow', rules: [{ host: 'other.test' }] }, version: 2 });
    expect(a.policyOf('sbx')).toEqual({ policy: { mode: 'allow', rules: [{ host: 'other.test' }] }, version: 2 });
    expect(await b.currentPolicy('sbx')).toEqual({ policy: { mode: 'allow', rules: [{ host: 'other.test' }] }, version: 2 });

    // A goes (its tunnels close): B takes over with the stored policy, version and the same placeholder.
    await a.close();
    open.splice(open.indexOf(a), 1);
    await b.follow(channel);
    expect(daemons.holders.get('sbx')).toBe('b');
    expect(b.policyOf('sbx')).toEqual({ policy: { mode: 'allow', rules: [{ host: 'other.test' }] }, version: 2 });
    expect(store.entries.get('sbx')!.egress.secrets).toEqual([expect.objectContaining({ placeholder: env.API_KEY, value: 'real-value' })]);
    // An update on B, now serving, applies here at once.
    expect((await b.update('sbx', { mode: 'none' })).version).toBe(3);
    expect(b.policyOf('sbx').version).toBe(3);
    expect(store.entries.get('sbx')!.egress.version).toBe(3);

    // The stored egress goes with the sandbox (its pod): the serving replica lets the relay go.
    await store.remove('sbx');
    await b.follow(channel);
    expect(b.has('sbx')).toBe(false);
    expect(daemons.holders.has('sbx')).toBe(false);
  });

  it('answers an update made on a replica that does not serve after the wait when no replica serves it, with the version stored', async () => {
    const store = new FakeSecrets();
    const daemons = new FakeDaemons();
    const a = await replica('a', store, daemons);
    await a.register('lone', { mode: 'none' }, []);
    await store.bind('lone');
    const b = await replica('b', store, daemons);
    const started = Date.now();
    expect((await b.update('lone', { mode: 'allow', rules: [{ host: 'x.test' }] })).version).toBe(2);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1900);
    await expect(b.update('missing', { mode: 'none' })).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND' });
  });
});
