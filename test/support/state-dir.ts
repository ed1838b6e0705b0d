import { execFile } from 'node:child_process';
import { readFile, rm } from 'node:fs/promises';
import { promisify } from 'node:util';

/**
 * Removes a controller's state folder that a test made, after unmounting the sandbox disks still
 * mounted below it (a test that removes containers itself, or kills the controller, leaves them).
 * `rm -r` would otherwise fail with EBUSY on the mount points.
 */
export async function removeStateDir(dir: string): Promise<void> {
  const mountinfo = await readFile('/proc/self/mountinfo', 'utf8').catch(() => '');
  const below = mountinfo
    .split('\n')
    .map((line) => line.split(' ')[4]?.replace(/\\040/g, ' '))
    .filter((point): point is string => point !== undefined && point.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length);
  for (const point of below) await promisify(execFile)('umount', ['-l', point]).catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
}
