import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { EgressStore } from '../src/egress/egress-store.js';

let stateDir: string;
beforeEach(async () => {
  stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-egress-store-'));
});
afterEach(async () => {
  await rm(stateDir, { recursive: true, force: true });
});

const secret = {
  name: 'API_KEY',
  placeholder: `WARREN_SECRET_${'ab'.repeat(16)}`,
  hosts: ['api.test'],
  target: { header: 'Authorization', template: 'Bearer {secret}' },
  value: 'real-value',
};

describe('the egress store', () => {
  it('keeps a policy, its version and the secrets by name, in a 0600 file in a 0700 folder', async () => {
    const store = new EgressStore(stateDir);
    await store.write('abc', { policy: { mode: 'allow', rules: [{ host: 'api.test', ports: [443] }] }, version: 3, secrets: [secret] });
    expect(await store.read('abc')).toEqual({ policy: { mode: 'allow', rules: [{ host: 'api.test', ports: [443] }] }, version: 3, secrets: [secret] });
    expect((await stat(path.join(stateDir, 'egress'))).mode & 0o777).toBe(0o700);
    const file = path.join(stateDir, 'egress', 'abc.json');
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    expect(Object.keys(JSON.parse(await readFile(file, 'utf8')).secrets)).toEqual(['API_KEY']);
    expect(await store.ids()).toEqual(['abc']);
    await store.remove('abc');
    expect(await store.read('abc')).toBeUndefined();
    expect(await store.ids()).toEqual([]);
  });

  it('reads a torn or foreign file as nothing stored, and never makes a path from an id that is not one of its own', async () => {
    const store = new EgressStore(stateDir);
    await store.write('torn', { policy: { mode: 'none' }, version: 1, secrets: [] });
    await writeFile(path.join(stateDir, 'egress', 'torn.json'), '{"policy":');
    expect(await store.read('torn')).toBeUndefined();
    await writeFile(path.join(stateDir, 'egress', 'odd.json'), JSON.stringify({ policy: { mode: 'open' }, version: 1, secrets: {}, extra: 1 }));
    expect(await store.read('odd')).toBeUndefined();
    expect(await store.read('../records/x')).toBeUndefined();
    await expect(store.write('../x', { policy: { mode: 'none' }, version: 1, secrets: [] })).rejects.toThrow(/refusing/);
    // What a crash between write and rename leaves is swept at the next start.
    await writeFile(path.join(stateDir, 'egress', 'torn.json.123.tmp'), '{');
    await store.removeTemporary();
    expect((await readdir(path.join(stateDir, 'egress'))).sort()).toEqual(['odd.json', 'torn.json']);
  });
});
