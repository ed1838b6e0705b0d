import path from 'node:path';
import { CodedError } from './errors.js';

/**
 * The rules every tar entry must pass before anything is written, shared by the agent (uploads)
 * and the SDK (downloads), so both ends refuse the same archives. Pure: it sees tar headers as
 * plain objects, whichever tar library parsed them.
 */

/** The caps of one archive. */
export const TAR_CAPS = { maxEntries: 100_000, maxDepth: 64, maxNameBytes: 4096, maxBytes: 1024 * 1024 * 1024 } as const;

/** The parts of a tar header the rules look at (tar-stream's names). */
export interface TarHeaderLike {
  name: string;
  type?: string | null | undefined;
  mode?: number | null | undefined;
  size?: number | null | undefined;
  linkname?: string | null | undefined;
}

/** One checked entry: its clean relative name and kind. */
export interface CheckedTarEntry {
  /** `/`-separated, relative, no `.` or `..`, no trailing slash. */
  name: string;
  kind: 'file' | 'directory' | 'symlink';
  /** Permission bits with setuid, setgid and sticky cleared. */
  mode: number;
  size: number;
  linkname?: string;
}

/** Running state of one archive's check: what was seen so far. */
export class TarChecker {
  private readonly names = new Set<string>();
  private readonly links = new Set<string>();
  private entries = 0;
  private bytes = 0;

  /**
   * Checks one header; throws `INVALID_PARAMS` naming the entry and the rule it breaks: absolute
   * or `..` names, NUL bytes, hard links, devices, FIFOs, setuid/setgid bits, symbolic links whose
   * target is absolute or leaves the archive's folder, entries below a symbolic link of the same
   * archive, duplicates, and the caps on entries, depth, name length and bytes.
   */
  check(header: TarHeaderLike): CheckedTarEntry {
    const refuse = (why: string) => new CodedError('INVALID_PARAMS', `The archive entry '${String(header.name).slice(0, 200)}' is refused: ${why}. Nothing was written.`, { entry: String(header.name).slice(0, 200) });
    if (++this.entries > TAR_CAPS.maxEntries) throw refuse(`the archive has more than ${TAR_CAPS.maxEntries} entries`);
    const raw = String(header.name ?? '');
    if (raw.includes('\0')) throw refuse('its name has a NUL byte');
    if (Buffer.byteLength(raw) > TAR_CAPS.maxNameBytes) throw refuse(`its name is longer than ${TAR_CAPS.maxNameBytes} bytes`);
    if (raw.startsWith('/')) throw refuse('its name is absolute');
    const segments = raw.split('/').filter((s) => s !== '' && s !== '.');
    if (segments.some((s) => s === '..')) throw refuse('its name has a .. segment');
    if (segments.some((s) => s.includes('\\'))) throw refuse('its name has a backslash');
    if (segments.length === 0) throw refuse('its name is empty');
    if (segments.length > TAR_CAPS.maxDepth) throw refuse(`it is deeper than ${TAR_CAPS.maxDepth} folders`);
    const name = segments.join('/');
    const type = header.type ?? 'file';
    let kind: CheckedTarEntry['kind'];
    if (type === 'file' || type === 'contiguous-file') kind = 'file';
    else if (type === 'directory') kind = 'directory';
    else if (type === 'symlink') kind = 'symlink';
    else if (type === 'link') throw refuse('hard links are not extracted');
    else throw refuse(`entries of type ${type} (devices, FIFOs and the like) are not extracted`);
    const mode = header.mode ?? (kind === 'directory' ? 0o755 : 0o644);
    if (mode & 0o6000) throw refuse('it has the setuid or setgid bit');
    for (let i = 1; i < segments.length; i++) {
      if (this.links.has(segments.slice(0, i).join('/'))) throw refuse('it lies below a symbolic link of the same archive');
    }
    if (this.names.has(name)) throw refuse('the archive holds this name twice');
    const size = kind === 'file' ? Math.max(0, header.size ?? 0) : 0;
    this.bytes += size;
    if (this.bytes > TAR_CAPS.maxBytes) throw refuse(`the archive holds more than ${TAR_CAPS.maxBytes} bytes`);
    const entry: CheckedTarEntry = { name, kind, mode: mode & 0o777, size };
    if (kind === 'symlink') {
      const target = String(header.linkname ?? '');
      if (target === '' || target.includes('\0')) throw refuse('its link target is empty or has a NUL byte');
      if (target.startsWith('/')) throw refuse('its link target is absolute');
      // `..` only at the start: after a step down (maybe through another link) a `..` is taken
      // physically, where text normalisation would lie about where it lands.
      const parts = target.split('/').filter((s) => s !== '' && s !== '.');
      const firstDown = parts.findIndex((s) => s !== '..');
      if (firstDown !== -1 && parts.slice(firstDown).includes('..')) throw refuse('its link target has a .. after a folder name');
      const lands = path.posix.normalize(path.posix.join(path.posix.dirname(name), target));
      if (lands === '..' || lands.startsWith('../')) throw refuse('its link target leaves the archive folder');
      entry.linkname = target;
      this.links.add(name);
    }
    // A later entry may not be inside a name already used for a file or link.
    for (let i = 1; i < segments.length; i++) {
      const prefix = segments.slice(0, i).join('/');
      if (this.names.has(prefix) && !this.dirs.has(prefix)) throw refuse('a parent of it is a file in the same archive');
    }
    this.names.add(name);
    if (kind === 'directory') this.dirs.add(name);
    return entry;
  }

  private readonly dirs = new Set<string>();
}

/** One entry of a tar archive as a streaming parser yields it (tar-stream's `extract()`): its header, then its bytes. */
export type TarEntryStream = AsyncIterable<unknown> & { header: TarHeaderLike };

/**
 * Reads a whole archive from a streaming parser (tar-stream's `extract()`, fed the bytes),
 * checking each header by the rules above before its bytes are kept. A bad entry throws the
 * checker's {@link CodedError}; a malformed archive throws the parser's own error.
 */
export async function readCheckedTar(entries: AsyncIterable<TarEntryStream>): Promise<{ entry: CheckedTarEntry; data: Buffer }[]> {
  const checker = new TarChecker();
  const out: { entry: CheckedTarEntry; data: Buffer }[] = [];
  for await (const item of entries) {
    const entry = checker.check(item.header);
    const chunks: Uint8Array[] = [];
    for await (const chunk of item) chunks.push(chunk as Uint8Array);
    out.push({ entry, data: Buffer.concat(chunks) });
  }
  return out;
}
