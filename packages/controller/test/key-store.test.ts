import { describe, expect, it } from '@jest/globals';
import type { KeyStorage } from '../src/tenancy/key-storage.js';
import { KeyStore, type KeyEnd } from '../src/tenancy/principals.js';

/** A storage two stores share, as replicas share a Secret: each update applies to the newest document. */
function sharedStorage(): KeyStorage & { writes: number } {
  let text: string | undefined;
  return {
    writes: 0,
    async read() {
      return text;
    },
    async update(change) {
      text = change(text);
      this.writes++;
    },
  };
}

describe('KeyStore', () => {
  it('keeps digests only, refuses a revoked, rotated-away or expired key, and keeps the id across a rotation', async () => {
    let now = 1_000_000;
    const store = KeyStore.inMemory([], () => now);
    const { key, info } = await store.create({ tenant: 'acme', role: 'member', scopes: ['exec'], expiresInSeconds: 60 });
    expect(store.principal(key)).toMatchObject({ keyId: info.id, tenant: 'acme', role: 'member', scopes: ['exec'] });
    const rotated = await store.rotate(info.id);
    expect(rotated.info.id).toBe(info.id);
    expect(store.principal(key)).toBeUndefined();
    expect(store.principal(rotated.key)).toMatchObject({ keyId: info.id });
    now += 61_000;
    expect(store.principal(rotated.key)).toBeUndefined();
    expect(store.ended(info.id)).toBe(true);
    const other = await store.create({ tenant: 'acme' });
    await store.revoke(other.info.id);
    expect(store.principal(other.key)).toBeUndefined();
    expect(JSON.stringify(store.list())).not.toContain(other.key);
  });

  it('replicas sharing a storage take up each other’s keys, revocations and limits, and end what a revocation on the other ended', async () => {
    const storage = sharedStorage();
    const a = KeyStore.inMemory([]);
    const b = KeyStore.inMemory([]);
    const early = await a.create({ tenant: 'acme' });
    await a.share(storage, 60_000);
    await b.share(storage, 60_000);
    expect(b.principal(early.key)?.tenant).toBe('acme');
    const made = await b.create({ tenant: 'bravo' });
    await a.refresh();
    expect(a.principal(made.key)?.tenant).toBe('bravo');
    await a.setLimits('bravo', { maxSandboxes: 2 });
    const ended: [string, KeyEnd][] = [];
    b.onEnd((id, why) => ended.push([id, why]));
    await a.revoke(made.info.id);
    await b.refresh();
    expect(b.principal(made.key)).toBeUndefined();
    expect(b.limitsOf('bravo')).toEqual({ maxSandboxes: 2 });
    expect(ended).toEqual([[made.info.id, 'revoked']]);
    a.close();
    b.close();
  });

  it('reads a tampered document as untrusted: a key with a bad tenant or digest is left out', async () => {
    const storage = sharedStorage();
    await storage.update(() =>
      JSON.stringify({
        keys: [
          { id: '0123456789abcdef', digest: 'f'.repeat(64), tenant: '../etc', role: 'admin', createdAt: 'x' },
          { id: 'fedcba9876543210', digest: 'nothex', tenant: 'acme', role: 'member', createdAt: 'x' },
        ],
      }),
    );
    const store = KeyStore.inMemory([]);
    await store.share(storage, 60_000);
    expect(store.list()).toEqual([]);
    store.close();
  });
});
