import { readFileSync, statSync } from 'node:fs';

/** One id-to-name table (`/etc/passwd` or `/etc/group`), read again when the file changes. */
interface NameTable {
  file: string;
  /** When the file was last looked at (ms), so a listing stats it once, not per entry. */
  checkedAt: number;
  mtimeMs: number;
  names: Map<number, string>;
}

/**
 * The user and group names of numeric ids, as `ls -l` shows them: from the sandbox's own
 * `/etc/passwd` and `/etc/group`, and the number itself for an id neither file names. The files
 * are read once and again only after they change, so a listing costs no extra reads.
 *
 * @example
 * const names = new OwnerNames();
 * names.user(1000); // 'user' in warren/e2b-base
 */
export class OwnerNames {
  private readonly users: NameTable;
  private readonly groups: NameTable;

  constructor(
    passwd = '/etc/passwd',
    group = '/etc/group',
    private readonly now: () => number = Date.now,
  ) {
    this.users = { file: passwd, checkedAt: -Infinity, mtimeMs: -1, names: new Map() };
    this.groups = { file: group, checkedAt: -Infinity, mtimeMs: -1, names: new Map() };
  }

  user(uid: number): string {
    return this.lookup(this.users, uid);
  }

  group(gid: number): string {
    return this.lookup(this.groups, gid);
  }

  private lookup(table: NameTable, id: number): string {
    const now = this.now();
    if (now - table.checkedAt >= RECHECK_MS) {
      table.checkedAt = now;
      refresh(table);
    }
    return table.names.get(id) ?? String(id);
  }
}

/** How long a read table is trusted before its file's mtime is looked at again. */
const RECHECK_MS = 1000;

function refresh(table: NameTable): void {
  let mtimeMs: number;
  try {
    mtimeMs = statSync(table.file).mtimeMs;
  } catch {
    table.names.clear();
    return;
  }
  if (mtimeMs === table.mtimeMs) return;
  table.mtimeMs = mtimeMs;
  table.names.clear();
  let text: string;
  try {
    text = readFileSync(table.file, 'utf8');
  } catch {
    return;
  }
  // name:password:id:... in both files; the first name given to an id wins, as in getpwuid.
  for (const line of text.split('\n')) {
    const [name, , idText] = line.split(':');
    const id = Number(idText);
    if (name && idText && Number.isInteger(id) && !table.names.has(id)) table.names.set(id, name);
  }
}

/** The daemon's one table of names, shared by `fs.stat` and `fs.list`. */
export const ownerNames = new OwnerNames();
