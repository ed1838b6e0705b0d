import { describe, expect, it } from '@jest/globals';
import { reservedPlacesOf } from '../src/policy.js';

// A sandbox container's mount table as runc makes it (abridged), plus hostile extras an operator
// could add: binds of the socket folder, of /dev/shm and of the host's root, and a second procfs.
const MOUNTINFO = [
  '600 500 0:52 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A',
  '601 600 0:55 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw',
  '602 600 0:56 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755',
  '603 602 0:57 / /dev/pts rw,nosuid,noexec,relatime - devpts devpts rw,gid=5,mode=620,ptmxmode=666',
  '604 600 0:58 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro',
  '605 604 0:29 / /sys/fs/cgroup/memory ro,nosuid,nodev,noexec,relatime master:11 - cgroup cgroup rw,memory',
  '606 602 0:54 / /dev/mqueue rw,nosuid,nodev,noexec,relatime - mqueue mqueue rw',
  '607 602 0:59 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k',
  '608 600 254:0 /var/lib/warren/sockets/abc /run/warren rw,relatime - ext4 /dev/vda rw',
  '609 600 254:0 /var/lib/docker/volumes/warren-runtime-1/_data /opt/warren ro,relatime - ext4 /dev/vda rw',
  '610 600 254:0 /var/lib/docker/volumes/ws-abc/_data /workspace rw,relatime - ext4 /dev/vda rw',
  '611 600 254:0 /var/lib/docker/containers/abc/hosts /etc/hosts rw,relatime - ext4 /dev/vda rw',
  '612 601 0:56 /null /proc/kcore rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755',
  // Hostile extras.
  '620 610 254:0 /var/lib/warren/sockets/abc /workspace/sock rw,relatime - ext4 /dev/vda rw',
  '621 610 0:59 / /workspace/my\\040shm rw - tmpfs shm rw',
  '622 600 254:0 /var/lib /host-var-lib rw - ext4 /dev/vda rw',
  '623 610 0:60 / /workspace/p rw - proc proc rw',
  '624 610 0:56 /pts /workspace/devpart rw - tmpfs tmpfs rw',
].join('\n');

describe('reservedPlacesOf: the places no file call reaches, from the mount table', () => {
  const places = reservedPlacesOf(MOUNTINFO);

  it('keeps the reserved folders and adds every other place their content shows', () => {
    expect(places.prefixes.sort()).toEqual([
      '/dev',
      '/host-var-lib/docker/volumes/warren-runtime-1/_data', // the host disk mounted above the runtime volume
      '/host-var-lib/warren/sockets/abc', // ... and above the socket folder
      '/opt/warren',
      '/proc',
      '/run/warren',
      '/sys',
      '/workspace/devpart', // part of the /dev tmpfs
      '/workspace/my shm', // the /dev/shm tmpfs again (an escaped name)
      '/workspace/sock', // the socket folder again
    ]);
  });

  it('never reserves the workspace volume or other mounts of the same disk', () => {
    for (const p of ['/workspace', '/etc/hosts', '/', '/host-var-lib', '/host-var-lib/docker']) expect(places.prefixes).not.toContain(p);
  });

  it('keeps the device numbers of memory file systems mounted in reserved folders, never of a disk', () => {
    const dev = (major: number, minor: number) => (minor % 256) + major * 256 + Math.floor(minor / 256) * 2 ** 20;
    for (const minor of [55, 56, 57, 58, 29, 54, 59]) expect(places.devices.has(dev(0, minor))).toBe(true);
    expect(places.devices.has(dev(254, 0))).toBe(false);
    expect(places.devices.has(dev(0, 52))).toBe(false); // the root overlay
    expect(places.devices.has(dev(0, 60))).toBe(false); // a procfs elsewhere: caught by its statfs magic instead
  });

  it('without a mount table, still the reserved folders by name', () => {
    expect(reservedPlacesOf(undefined).prefixes).toEqual(['/proc', '/sys', '/dev', '/run/warren', '/opt/warren']);
  });
});
