import { describe, expect, it } from '@jest/globals';
import { CodedError } from '@warren/protocol';
import { createLogger } from '../src/logger.js';
import {
  defaultReserveBytes,
  isWorkspaceId,
  openWorkspaceStore,
  quotaUnavailableReason,
  roomForWorkspaces,
  workspaceSizeBytes,
} from '../src/docker/workspace-store.js';
import { parseMountInfo } from '../src/docker/loop-disk.js';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

describe('roomForWorkspaces (admission: sandboxes together never take the host below its reserve)', () => {
  it('is the free space minus what every image may still grow by, minus the reserve', () => {
    const images = [
      { sizeBytes: 10 * GiB, allocatedBytes: 1 * GiB },
      { sizeBytes: 2 * GiB, allocatedBytes: 2 * GiB },
    ];
    expect(roomForWorkspaces({ freeBytes: 50 * GiB, reserveBytes: 5 * GiB, images })).toBe(36 * GiB);
  });

  it('is never negative, also when the host filled up from elsewhere', () => {
    expect(roomForWorkspaces({ freeBytes: 1 * GiB, reserveBytes: 5 * GiB, images: [{ sizeBytes: 10 * GiB, allocatedBytes: 0 }] })).toBe(0);
  });
});

describe('workspace sizes and ids', () => {
  it('rounds a limit up to whole 4 KiB blocks and refuses less than 16 MiB or a fraction', () => {
    expect(workspaceSizeBytes(16 * MiB)).toBe(16 * MiB);
    expect(workspaceSizeBytes(16 * MiB + 1)).toBe(16 * MiB + 4096);
    for (const bad of [MiB, 16 * MiB - 1, 16 * MiB + 0.5, Number.NaN, Infinity]) {
      expect(() => workspaceSizeBytes(bad)).toThrow(expect.objectContaining({ code: 'INVALID_PARAMS' }));
    }
  });

  it('builds paths only from letters and digits', () => {
    expect(isWorkspaceId('h3xQ9aZ0')).toBe(true);
    for (const bad of ['', '..', '../x', 'a/b', '.probe', 'a b', 'a\0b', 'x'.repeat(65)]) expect(isWorkspaceId(bad)).toBe(false);
  });

  it('keeps 5% of the host file system free, at least 1 GiB', () => {
    expect(defaultReserveBytes(10 * GiB)).toBe(GiB);
    expect(defaultReserveBytes(400 * GiB)).toBe(20 * GiB);
  });
});

describe('parseMountInfo', () => {
  it('reads mount points (octal escapes undone), types and sources, with or without optional fields', () => {
    const text = [
      '36 35 98:0 / /mnt1 rw,noatime master:1 - ext3 /dev/root rw,errors=continue',
      '99 28 7:3 / /var/lib/warren\\040state/workspaces/abc rw,nosuid,nodev,noatime - ext4 /dev/loop3 rw,discard',
      '',
      'garbage',
    ].join('\n');
    expect(parseMountInfo(text)).toEqual([
      { mountPoint: '/mnt1', fsType: 'ext3', source: '/dev/root' },
      { mountPoint: '/var/lib/warren state/workspaces/abc', fsType: 'ext4', source: '/dev/loop3' },
    ]);
  });
});

describe('hosts without a quota', () => {
  it('say why: turned off, a remote engine, or not root', () => {
    expect(quotaUnavailableReason({ mode: 'auto', remoteEngine: false, root: true })).toBeUndefined();
    expect(quotaUnavailableReason({ mode: 'off', remoteEngine: false, root: true })).toMatch(/turned off/);
    expect(quotaUnavailableReason({ mode: 'auto', remoteEngine: true, root: true })).toMatch(/another host/);
    expect(quotaUnavailableReason({ mode: 'auto', remoteEngine: false, root: false })).toMatch(/not run as root/);
  });

  it('fall back to Docker volumes, and create nothing on the host', async () => {
    const logged: { msg: string; level: string }[] = [];
    const logger = createLogger({ destination: { write: (line) => void logged.push(JSON.parse(line) as { msg: string; level: string }) } });
    const store = await openWorkspaceStore({ stateDir: '/nonexistent/warren-state', remoteEngine: true, logger });
    expect(store.describe()).toEqual({ quota: false, kind: 'volume', reason: expect.stringMatching(/another host/) });
    expect(await store.create('abc', { uid: 1000, gid: 1000 }, GiB)).toBeUndefined();
    expect(await store.attach('abc')).toBeUndefined();
    expect(await store.usage('abc')).toBeUndefined();
    expect(await store.list()).toEqual([]);
    await store.remove('abc');
    expect(logged).toEqual([expect.objectContaining({ msg: 'workspaces.no-quota', level: 'warn', reason: expect.stringMatching(/another host/) })]);
  });

  it("refuse to open when the quota is 'required'", async () => {
    const opening = openWorkspaceStore({ stateDir: '/nonexistent/warren-state', mode: 'required', root: false });
    await expect(opening).rejects.toBeInstanceOf(CodedError);
    await expect(opening).rejects.toThrow(/'required'.*not run as root/);
  });
});
