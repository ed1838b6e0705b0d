import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from '@jest/globals';
import { RecordStore } from '../src/record-store.js';

describe('RecordStore', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it('survives many writes of one record at once (two keepalives): each lands whole, none fails, no staging file is left', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'warren-records-'));
    dirs.push(dir);
    const store = new RecordStore(dir);
    const times = Array.from({ length: 20 }, (_, i) => new Date(Date.UTC(2030, 0, 1, 0, 0, i)).toISOString());
    await Promise.all(times.map((expiresAt) => store.write({ id: 'abc', agentId: 'abc', expiresAt })));
    const stored = (await store.readAll()).get('abc');
    expect(times).toContain(stored?.expiresAt);
    expect(readdirSync(path.join(dir, 'records'))).toEqual(['abc.json']);
  });
});
