import { lstatSync, readFileSync } from 'node:fs';
import path from 'node:path';

/** One mount of this process's namespace, from `/proc/self/mountinfo`. */
interface MountEntry {
  mountPoint: string;
  fsType: string;
}

/**
 * Refuses to run the daemon under a mount that covers one of its folders from above (a volume or
 * host folder mounted at `/opt` or `/run`, however the create request spelt it, through whatever
 * link the image has): that mount's owner, the sandbox user, could then rename, replace or read
 * what lies in the daemon's runtime or socket folder. A folder may be a mount point itself (the
 * engine binds each of them); above it only `/` and root's own tmpfs (as Podman mounts at `/run`)
 * are accepted (Podman's is sticky and world-writable, as /tmp is). The controller refuses such targets by name before the create
 * (`sandbox-plan.ts` `reservedTargetOf`); this catches the spellings only the image knows.
 *
 * @example
 * assertNoMountAbove(['/opt/warren', '/run/warren']); // throws where a volume is mounted at /run
 */
export function assertNoMountAbove(folders: readonly string[], mountinfo = readFileSync('/proc/self/mountinfo', 'utf8')): void {
  const mounts = parseMountinfo(mountinfo);
  for (const folder of folders) {
    for (const mount of mounts) {
      if (mount.mountPoint === '/' || mount.mountPoint === folder || !isBelow(folder, mount.mountPoint)) continue;
      if (mount.fsType === 'tmpfs' && ownedByRootOnly(mount.mountPoint)) continue;
      throw new Error(
        `a ${mount.fsType} mount at ${mount.mountPoint} covers the daemon's folder ${folder}; the sandbox would own it. Mount volumes and host folders elsewhere (/data, /mnt, below the workspace).`,
      );
    }
  }
}

/** Root's, and writable by no one else, or only as /tmp is (sticky: no one renames another's entry). */
function ownedByRootOnly(folder: string): boolean {
  try {
    const info = lstatSync(folder);
    return info.uid === 0 && ((info.mode & 0o022) === 0 || (info.mode & 0o1000) !== 0);
  } catch {
    return false;
  }
}

/** Mount points and file system types; octal escapes (`\040` for a space) decoded. */
function parseMountinfo(text: string): MountEntry[] {
  const entries: MountEntry[] = [];
  for (const line of text.split('\n')) {
    const [before, after] = line.split(' - ');
    const mountPoint = before?.split(' ')[4];
    const fsType = after?.split(' ')[0];
    if (mountPoint === undefined || fsType === undefined) continue;
    entries.push({ mountPoint: mountPoint.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8))), fsType });
  }
  return entries;
}

function isBelow(child: string, parent: string): boolean {
  return child === parent || child.startsWith(parent.endsWith('/') ? parent : `${parent}/`);
}

/** The daemon's own folders as this process sees them: its runtime (where its bundle is) and its socket's folder. */
export function daemonFolders(socketPath: string): string[] {
  return [path.dirname(path.resolve(process.argv[1] ?? '/opt/warren/warren-agent.mjs')), path.dirname(path.resolve(socketPath))];
}
