import { describe, expect, it } from '@jest/globals';
import { assertNoMountAbove } from '../src/mount-guard.js';

const line = (id: number, mountPoint: string, fsType: string) => `${id} 1 0:${id} / ${mountPoint} rw,relatime - ${fsType} src rw`;

describe("the daemon's mount guard", () => {
  const folders = ['/opt/warren', '/run/warren'];

  it('accepts the root, the folders as mount points of their own, and mounts beside or below them', () => {
    const mountinfo = [
      line(1, '/', 'overlay'),
      line(2, '/opt/warren', 'ext4'),
      line(3, '/run/warren', 'ext4'),
      line(4, '/workspace', 'ext4'),
      line(5, '/run/warren/cpu', 'cgroup'),
    ].join('\n');
    expect(() => assertNoMountAbove(folders, mountinfo)).not.toThrow();
  });

  it('refuses a volume or host folder mounted above one of them', () => {
    for (const above of ['/opt', '/run'])
      expect(() => assertNoMountAbove(folders, [line(1, '/', 'overlay'), line(2, above, 'ext4'), line(3, '/run/warren', 'ext4')].join('\n'))).toThrow(
        /covers the daemon's folder/,
      );
  });

  it('decodes escaped mount points', () => {
    expect(() => assertNoMountAbove(['/my dir/warren'], [line(1, '/', 'overlay'), line(2, '/my\\040dir', 'ext4')].join('\n'))).toThrow(/\/my dir/);
  });
});
