import { randomBytes } from 'node:crypto';
import { describe, expect, it } from '@jest/globals';
import { Credentials } from '../src/credentials.js';
import { E2bHttpError } from '../src/e2b/errors.js';
import { VOLUME_MOUNT, volumePath } from '../src/e2b/control/volume-content.js';

describe('the E2B volume content API, pure parts', () => {
  it('maps every volume path inside the mount: relative, absolute and .. all stay below it', () => {
    expect(volumePath('a/b.txt')).toBe(`${VOLUME_MOUNT}/a/b.txt`);
    expect(volumePath('/a/b.txt')).toBe(`${VOLUME_MOUNT}/a/b.txt`);
    expect(volumePath('/')).toBe(VOLUME_MOUNT);
    expect(volumePath('../../etc/passwd')).toBe(`${VOLUME_MOUNT}/etc/passwd`);
    expect(volumePath('a/../../../../b')).toBe(`${VOLUME_MOUNT}/b`);
    expect(volumePath('/etc/shadow')).toBe(`${VOLUME_MOUNT}/etc/shadow`);
    expect(() => volumePath('a\0b')).toThrow(E2bHttpError);
    expect(() => volumePath(null)).toThrow(/\?path=/);
  });

  it("signs a volume token for one key's volume: another volume, a forged token or a key no longer configured is refused", () => {
    const master = randomBytes(32);
    const credentials = Credentials.inMemory('key-one', master, ['key-two']);
    const one = credentials.apiKeyId('key-one')!;
    const two = credentials.apiKeyId('key-two')!;
    const token = credentials.volumeToken(one, 'cache');
    expect(token).toMatch(/^wvt_/);
    expect(credentials.readVolumeToken(token)).toEqual({ keyId: one, volume: 'cache' });
    expect(credentials.readVolumeToken(credentials.volumeToken(two, 'cache'))).toEqual({ keyId: two, volume: 'cache' });
    expect(credentials.readVolumeToken(`${token.slice(0, -2)}AA`)).toBeUndefined();
    const [payload, mac] = token.slice(4).split('.');
    const swapped = Buffer.from(JSON.stringify({ k: one, v: 'other' })).toString('base64url');
    expect(credentials.readVolumeToken(`wvt_${swapped}.${mac}`)).toBeUndefined();
    expect(credentials.readVolumeToken(`wvt_${payload}`)).toBeUndefined();
    expect(credentials.readVolumeToken('key-one')).toBeUndefined();
    // Another controller (master key), or the same one once that API key is gone: refused.
    expect(Credentials.inMemory('key-one').readVolumeToken(token)).toBeUndefined();
    expect(Credentials.inMemory('key-two', master).readVolumeToken(token)).toBeUndefined();
  });
});
