import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { CodedError, CreateSnapshotRequest, DEFAULT_ROOT } from '@warren/protocol';
import {
  checkSnapshotQuota,
  checkSnapshotRef,
  checkSnapshotSize,
  newSnapshotId,
  SNAPSHOT_ID_PATTERN,
  SnapshotStore,
  type SnapshotRecord,
} from '../src/snapshot-store.js';
import { mergeWithSnapshot } from '../src/snapshots.js';

const MiB = 1024 * 1024;
const limits = { maxCount: 3, maxMb: 100, maxForkCount: 4 };
const settings = {
  cpus: 1,
  memoryMb: 300,
  pidsLimit: 256,
  network: 'none' as const,
  runtime: 'runc' as const,
  user: '1000:1000',
  workdir: DEFAULT_ROOT,
  ttlSeconds: 600,
  mounts: [],
};

const record = (over: Partial<SnapshotRecord> = {}): SnapshotRecord => ({
  id: newSnapshotId(),
  labels: {},
  ownerKeyId: 'key-a',
  tenant: 'tenant-a',
  sandboxId: 'sb1',
  image: 'warren/sandbox:latest',
  snapshotImage: 'warren-snapshot/x:latest',
  createdAt: new Date().toISOString(),
  sizeBytes: 10,
  processes: false,
  settings,
  ...over,
});

const codeOf = (fn: () => unknown): string | undefined => {
  try {
    fn();
    return undefined;
  } catch (err) {
    return (err as CodedError).code;
  }
};

describe('snapshot names and references (hostile input)', () => {
  it('refuses path characters, dot segments and over-long names in requests', () => {
    for (const name of ['../x', 'a/b', '..', '.', '.hidden', '-x', 'a..b', 'x'.repeat(64), 'a\0b', 'a b', '%2e%2e'])
      expect([name, CreateSnapshotRequest.safeParse({ name }).success]).toEqual([name, false]);
    for (const name of ['first', 'before-fix.2', 'A_b-c', 'x'.repeat(63)]) expect(CreateSnapshotRequest.safeParse({ name }).success).toBe(true);
    expect(CreateSnapshotRequest.safeParse({ labels: { 'a/b': 'x' } }).success).toBe(false);
    expect(CreateSnapshotRequest.safeParse({ unknown: 1 }).success).toBe(false);
  });

  it('answers INVALID_PARAMS for a reference that is not a plain word', () => {
    for (const ref of ['../../records', '/etc/passwd', '..', '']) expect(codeOf(() => checkSnapshotRef(ref))).toBe('INVALID_PARAMS');
    expect(codeOf(() => checkSnapshotRef('first'))).toBeUndefined();
  });

  it('makes ids usable as a folder and an image repository as they are', () => {
    const id = newSnapshotId();
    expect(id).toMatch(SNAPSHOT_ID_PATTERN);
    expect(id).toMatch(/^[a-z0-9-]+$/);
    expect(newSnapshotId()).not.toBe(id);
  });
});

describe('snapshot quota per API key', () => {
  it('refuses a snapshot past maxCount before it is taken', () => {
    expect(codeOf(() => checkSnapshotQuota([{ sizeBytes: 1 }, { sizeBytes: 1 }], limits))).toBeUndefined();
    expect(codeOf(() => checkSnapshotQuota([{ sizeBytes: 1 }, { sizeBytes: 1 }, { sizeBytes: 1 }], limits))).toBe('RESOURCE_EXHAUSTED');
  });

  it('refuses when the bytes kept already reach maxMb, and a new snapshot that would pass it', () => {
    expect(codeOf(() => checkSnapshotQuota([{ sizeBytes: 100 * MiB }], limits))).toBe('RESOURCE_EXHAUSTED');
    expect(codeOf(() => checkSnapshotSize([{ sizeBytes: 60 * MiB }], 40 * MiB, limits))).toBeUndefined();
    expect(codeOf(() => checkSnapshotSize([{ sizeBytes: 60 * MiB }], 41 * MiB, limits))).toBe('RESOURCE_EXHAUSTED');
  });
});

describe('a create from a snapshot', () => {
  it("takes the snapshot's image, settings, labels and policies, and the request's own fields win", () => {
    const snap = record({ sandboxLabels: { team: 'red' }, policy: { root: '/workspace', readOnly: true } });
    expect(mergeWithSnapshot(snap, {})).toMatchObject({ image: 'warren/sandbox:latest', memoryMb: 300, labels: { team: 'red' }, policy: { readOnly: true } });
    expect(mergeWithSnapshot(snap, { memoryMb: 512, labels: {} })).toMatchObject({ memoryMb: 512, labels: {} });
  });
});

describe('SnapshotStore (whole or absent across a crash)', () => {
  let stateDir: string;
  beforeEach(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'warren-snapshots-'));
  });
  afterEach(async () => rm(stateDir, { recursive: true, force: true }));

  it('keeps committed snapshots and removes half-written, half-deleted and torn ones on load', async () => {
    const store = new SnapshotStore(stateDir);
    await store.load();
    const kept = record();
    await store.begin(kept.id);
    await store.commit(kept);
    // A capture the controller was killed in, a delete it was killed in, and a folder without a readable record.
    await store.begin(newSnapshotId());
    await mkdir(path.join(store.dir, `.del-${newSnapshotId()}`));
    const torn = newSnapshotId();
    await mkdir(path.join(store.dir, torn));
    await writeFile(path.join(store.dir, torn, 'snapshot.json'), '{"id":');
    const again = new SnapshotStore(stateDir);
    expect((await again.load()).length).toBe(3);
    expect(again.all().map((r) => r.id)).toEqual([kept.id]);
    expect(await readdir(again.dir)).toEqual([kept.id]);
  });

  it("finds a tenant's snapshot by id or name, and another tenant's as SNAPSHOT_NOT_FOUND", async () => {
    const store = new SnapshotStore(stateDir);
    await store.load();
    const mine = record({ name: 'first' });
    await store.begin(mine.id);
    await store.commit(mine);
    expect(store.require('tenant-a', 'first').id).toBe(mine.id);
    expect(store.require('tenant-a', mine.id).id).toBe(mine.id);
    expect(codeOf(() => store.require('tenant-b', mine.id))).toBe('SNAPSHOT_NOT_FOUND');
    expect(codeOf(() => store.require('tenant-b', 'first'))).toBe('SNAPSHOT_NOT_FOUND');
    expect(store.list('tenant-b')).toEqual([]);
    await store.remove(mine.id);
    expect(codeOf(() => store.require('tenant-a', 'first'))).toBe('SNAPSHOT_NOT_FOUND');
    expect(await readdir(store.dir)).toEqual([]);
  });
});
