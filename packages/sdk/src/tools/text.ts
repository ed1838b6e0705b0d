import { posix } from 'node:path';

/** `child` shown under the folder it was listed from (`.` adds nothing). */
export function joinShown(folder: string, child: string): string {
  if (folder === '.' || folder === '' || folder === './') return child;
  return posix.join(folder, child);
}
