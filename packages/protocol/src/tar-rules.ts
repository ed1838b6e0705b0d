import { dirnamePosix, joinPosix, normalizePosix } from './posix-path.js';
import { CodedError } from './errors.js';

/**
 * The rules every tar archive must pass before anything is written, shared by the agent (uploads)
 * and the SDK (downloads, and so the CLI's `cp`), so both ends refuse the same archives. Two
 * layers, both pure:
 *
 * - {@link readCheckedTar} reads the bytes itself, strictly: checksums, numeric fields, PAX
 *   records and GNU long names are checked, and anything malformed, contradicting or not
 *   understood is refused rather than skipped, so no other tar reader can see a different set of
 *   entries in an archive Warren accepted.
 * - {@link TarChecker} checks each resulting entry: names, types, modes, links and caps.
 */

/** The caps of one archive. `maxRecordBytes` is the most one PAX header carries. */
export const TAR_CAPS = {
  maxEntries: 100_000,
  maxDepth: 64,
  maxNameBytes: 4096,
  maxBytes: 1024 * 1024 * 1024,
  maxRecordBytes: 64 * 1024,
  maxGlobalHeaders: 64,
  /** Zero padding allowed after the end-of-archive blocks. */
  maxTrailerBytes: 1024 * 1024,
} as const;

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

  /** @param maxBytes the most file bytes in all ({@link TAR_CAPS}.maxBytes unless set). */
  constructor(private readonly maxBytes: number = TAR_CAPS.maxBytes) {}

  /**
   * Checks one header; throws `INVALID_PARAMS` naming the entry and the rule it breaks: absolute
   * or `..` names, NUL bytes, hard links, devices, FIFOs, setuid/setgid bits, symbolic links whose
   * target is absolute or leaves the archive's folder, entries below a symbolic link of the same
   * archive, duplicates, and the caps on entries, depth, name length and bytes.
   */
  check(header: TarHeaderLike): CheckedTarEntry {
    const entryName = printable(String(header.name ?? '')).slice(0, 200);
    const refuse = (why: string) =>
      new CodedError('INVALID_PARAMS', `The archive entry '${entryName}' is refused: ${why}. Nothing was written. ${ALLOWED}.`, { entry: entryName });
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
    if (this.bytes > this.maxBytes) throw refuse(`the archive holds more than ${this.maxBytes} bytes`);
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
      const lands = normalizePosix(joinPosix(dirnamePosix(name), target));
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

/** One checked entry and its bytes (a view into the archive, not a copy). */
export interface TarContent {
  entry: CheckedTarEntry;
  data: Buffer;
}

/** What every refusal of the reader ends with: what an archive may hold. */
const ALLOWED =
  'Allowed: a ustar, GNU or PAX tar archive of regular files, folders and relative symbolic links, with at most one PAX header and one GNU long name (and long link) per entry, whose records are well-formed and agree with the entry';

const BLOCK = 512;
const USTAR_MAGIC = Buffer.from('ustar\u000000', 'latin1');
const GNU_MAGIC = Buffer.from('ustar  \u0000', 'latin1');
const UTF8_CHARSET = 'ISO-IR 10646 2000 UTF-8';
/** Type flags of entries, by the names {@link TarChecker} knows. */
const ENTRY_TYPES: Record<string, string> = {
  '0': 'file',
  '\0': 'file',
  '7': 'contiguous-file',
  '1': 'link',
  '2': 'symlink',
  '3': 'character-device',
  '4': 'block-device',
  '5': 'directory',
  '6': 'fifo',
};

/** One header block, parsed and checked. */
interface RawHeader {
  at: number;
  flag: string;
  name: string;
  linkname: string;
  mode: number;
  size: number;
}

/** What the PAX and GNU headers before an entry said about it. */
interface Pending {
  pax?: Map<string, string>;
  longName?: string;
  longLink?: string;
  at: number;
}

/** One step of a streamed archive: an entry's header, a piece of its data, or its end. */
export type TarStreamEvent = { type: 'entry'; entry: CheckedTarEntry } | { type: 'data'; data: Buffer } | { type: 'end' };

/** Options of {@link CheckedTarStream}. */
export interface TarStreamOptions {
  /** The most file bytes the archive may hold in all; {@link TAR_CAPS}.maxBytes unless set. */
  maxBytes?: number | undefined;
}

/**
 * The strict tar reader of {@link readCheckedTar}, fed piece by piece: the same rules, applied to
 * each header as it arrives, holding at most one header block or one PAX/GNU record header
 * ({@link TAR_CAPS}.maxRecordBytes) in memory. Entry data is handed on as views into the pieces
 * fed, never gathered. A refused archive throws `INVALID_PARAMS` from {@link push} or {@link end};
 * what the caller did with earlier entries is its to undo.
 *
 * @example
 * const reader = new CheckedTarStream();
 * for await (const piece of source) for (const step of reader.push(piece)) await handle(step);
 * reader.end(); // throws when the archive is cut short
 */
export class CheckedTarStream {
  private readonly checker: TarChecker;
  private offset = 0;
  private state: 'header' | 'meta' | 'data' | 'padding' | 'trailer' = 'header';
  private readonly block = Buffer.alloc(BLOCK);
  private blockFill = 0;
  private pending: Pending | undefined;
  private globals = 0;
  private meta: { header: RawHeader; data: Buffer; fill: number } | undefined;
  private current: RawHeader | undefined;
  private remaining = 0;
  private seen = false;
  private trailer = 0;

  constructor(options: TarStreamOptions = {}) {
    this.checker = new TarChecker(options.maxBytes);
  }

  /** Reads the next piece; returns what it completed, in order. Throws `INVALID_PARAMS` on the first rule broken. */
  push(piece: Uint8Array): TarStreamEvent[] {
    const bytes = Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength);
    const out: TarStreamEvent[] = [];
    let i = 0;
    if (bytes.length > 0) this.seen = true;
    while (i < bytes.length) {
      const take = (n: number) => {
        const slice = bytes.subarray(i, i + Math.min(n, bytes.length - i));
        i += slice.length;
        this.offset += slice.length;
        return slice;
      };
      switch (this.state) {
        case 'trailer': {
          const rest = take(bytes.length - i);
          if (!isZero(rest)) throw refuseAt(this.offset - rest.length, undefined, 'there are bytes after the end-of-archive blocks');
          this.trailer += rest.length;
          // Tar pads to its record size (10 KiB by default); a stream of zeros without end is not an archive.
          if (this.trailer > TAR_CAPS.maxTrailerBytes)
            throw refuseAt(this.offset, undefined, `more than ${TAR_CAPS.maxTrailerBytes} bytes of padding follow the end-of-archive blocks`);
          break;
        }
        case 'header': {
          const slice = take(BLOCK - this.blockFill);
          slice.copy(this.block, this.blockFill);
          this.blockFill += slice.length;
          if (this.blockFill === BLOCK) {
            this.blockFill = 0;
            this.onHeader(this.offset - BLOCK, out);
          }
          break;
        }
        case 'meta': {
          const meta = this.meta!;
          const slice = take(padded(meta.header.size) - meta.fill);
          slice.copy(meta.data, meta.fill, 0, Math.max(0, Math.min(slice.length, meta.header.size - meta.fill)));
          meta.fill += slice.length;
          if (meta.fill === padded(meta.header.size)) {
            this.meta = undefined;
            this.state = 'header';
            this.onMeta(meta.header, meta.data);
          }
          break;
        }
        case 'data': {
          const slice = take(this.remaining);
          this.remaining -= slice.length;
          if (slice.length > 0) out.push({ type: 'data', data: slice });
          if (this.remaining === 0) this.endData(out);
          break;
        }
        case 'padding': {
          const slice = take(this.remaining);
          this.remaining -= slice.length;
          if (this.remaining === 0) this.state = 'header';
          break;
        }
      }
    }
    return out;
  }

  /** Says the archive ended; throws `INVALID_PARAMS` unless it ended where an archive may (an empty input is an empty archive). */
  end(): void {
    if (this.state === 'trailer' || (!this.seen && this.state === 'header')) return;
    if (this.state === 'header')
      throw refuseAt(this.offset - this.blockFill, undefined, 'the archive ends without its end-of-archive blocks (it is cut short)');
    const header = this.meta?.header ?? this.current!;
    throw refuseAt(header.at, header.name, `its ${header.size} bytes of data run past the end of the archive (it is cut short)`);
  }

  private onHeader(at: number, out: TarStreamEvent[]): void {
    const block = this.block;
    if (isZero(block)) {
      if (this.pending) throw refuseAt(this.pending.at, undefined, 'a PAX or GNU long-name header has no entry after it');
      this.state = 'trailer';
      return;
    }
    const header = parseHeader(Buffer.from(block), at);
    if (header.flag === 'x' || header.flag === 'g' || header.flag === 'L' || header.flag === 'K') {
      const cap = header.flag === 'L' || header.flag === 'K' ? TAR_CAPS.maxNameBytes + 1 : TAR_CAPS.maxRecordBytes;
      if (header.size > cap)
        throw refuseAt(header.at, header.name, `its ${describeFlag(header.flag)} carries ${header.size} bytes, more than the ${cap} allowed`);
      this.meta = { header, data: Buffer.alloc(header.size), fill: 0 };
      this.state = 'meta';
      if (header.size === 0) {
        this.meta = undefined;
        this.state = 'header';
        this.onMeta(header, Buffer.alloc(0));
      }
      return;
    }
    const type = ENTRY_TYPES[header.flag];
    if (type === undefined)
      throw refuseAt(header.at, header.name, `its type flag '${printable(header.flag)}' is not supported (files, folders and symbolic links are)`);
    const entry = applyPending(header, type, this.pending);
    this.pending = undefined;
    const sized = { ...header, size: entry.size };
    this.current = sized;
    this.remaining = entry.size;
    // `tar -C dir -c .` names the folder itself `./`: skipped, not an entry.
    const root = entry.type === 'directory' && entry.size === 0 && isArchiveRoot(entry.name);
    if (!root) {
      const checked = this.checker.check(entry);
      if (checked.kind !== 'file' && entry.size !== 0)
        throw refuseAt(header.at, checked.name, `it is a ${checked.kind} but carries ${entry.size} bytes of data`);
      out.push({ type: 'entry', entry: checked });
    }
    this.state = 'data';
    if (entry.size === 0) this.endData(out, root);
  }

  private endData(out: TarStreamEvent[], root = false): void {
    if (!root) out.push({ type: 'end' });
    this.remaining = padded(this.current!.size) - this.current!.size;
    this.state = this.remaining === 0 ? 'header' : 'padding';
  }

  private onMeta(header: RawHeader, data: Buffer): void {
    if (header.flag === 'g') {
      if (this.pending) throw refuseAt(header.at, header.name, 'a global PAX header lies between a PAX or GNU header and its entry');
      if (++this.globals > TAR_CAPS.maxGlobalHeaders)
        throw refuseAt(header.at, header.name, `the archive has more than ${TAR_CAPS.maxGlobalHeaders} global PAX headers`);
      const records = parsePax(data, header);
      for (const key of ['path', 'linkpath', 'size']) {
        if (records.has(key)) throw refuseAt(header.at, header.name, `its global PAX header sets '${key}', which would apply to every entry`);
      }
      return;
    }
    const pending = (this.pending ??= { at: header.at });
    if (header.flag === 'x') {
      if (pending.pax) throw refuseAt(header.at, header.name, 'two PAX headers precede one entry');
      pending.pax = parsePax(data, header);
    } else {
      const key = header.flag === 'L' ? 'longName' : 'longLink';
      if (pending[key] !== undefined) throw refuseAt(header.at, header.name, `two GNU ${header.flag === 'L' ? 'long names' : 'long links'} precede one entry`);
      pending[key] = parseLongName(data, header);
    }
  }
}

/**
 * Reads a whole archive held in memory and checks it by every rule here before returning
 * anything, so a caller writes nothing from a refused archive. Throws `INVALID_PARAMS` naming the
 * entry (or the header's byte offset) and what is allowed. An empty input is an empty archive.
 * It is {@link CheckedTarStream} fed the whole archive at once, so both read by the same rules.
 *
 * Refused beyond {@link TarChecker}'s rules: a bad checksum or magic, a numeric field that is not
 * octal, data or padding cut short, bytes after the end-of-archive blocks; PAX records whose
 * length is not decimal or does not land on their newline, without `key=value`, repeated in one
 * header, not UTF-8, or longer than the caps; a PAX `path` or `linkpath` that is empty or has a
 * NUL, a `size` that is not decimal or disagrees with the header's, a `linkpath` on an entry that
 * is not a link, `GNU.sparse.*` records, a `hdrcharset` other than UTF-8, and global headers that
 * name a path, link or size; GNU long names (`L`) and long links (`K`) that are empty, too long,
 * have a NUL inside, are repeated, or contradict a PAX record; a PAX or GNU header with no entry
 * after it; and every other type flag.
 *
 * @example
 * for (const { entry, data } of readCheckedTar(archive)) console.log(entry.kind, entry.name, data.length);
 */
export function readCheckedTar(archive: Uint8Array): TarContent[] {
  const reader = new CheckedTarStream();
  const out: TarContent[] = [];
  let parts: Buffer[] = [];
  for (const step of reader.push(archive)) {
    if (step.type === 'entry') {
      out.push({ entry: step.entry, data: EMPTY });
      parts = [];
    } else if (step.type === 'data') parts.push(step.data);
    else out[out.length - 1]!.data = parts.length === 1 ? parts[0]! : Buffer.concat(parts);
  }
  reader.end();
  return out;
}

const EMPTY = Buffer.alloc(0);

/** The entry as the checker sees it, after the PAX records and GNU long names that precede it. */
function applyPending(header: RawHeader, type: string, pending: Pending | undefined): TarHeaderLike & { size: number } {
  const pax = pending?.pax;
  const paxPath = pax?.get('path');
  const paxLink = pax?.get('linkpath');
  const paxSize = pax?.get('size');
  const label = paxPath ?? pending?.longName ?? header.name;
  if (paxPath !== undefined && pending?.longName !== undefined) throw refuseAt(header.at, label, 'both a PAX path record and a GNU long name give its name');
  if (paxLink !== undefined && pending?.longLink !== undefined)
    throw refuseAt(header.at, label, 'both a PAX linkpath record and a GNU long link give its link target');
  const isLink = type === 'symlink' || type === 'link';
  if (!isLink && (paxLink !== undefined || pending?.longLink !== undefined))
    throw refuseAt(header.at, label, `it is not a link but a PAX linkpath record or GNU long link gives it a link target`);
  if (paxSize !== undefined && Number(paxSize) !== header.size) {
    throw refuseAt(header.at, label, `its PAX size record (${paxSize}) disagrees with its header's size (${header.size})`);
  }
  // Old archives mark a folder by a trailing slash on a file entry.
  const kind = type === 'file' && label.endsWith('/') ? 'directory' : type;
  return { name: label, type: kind, mode: header.mode, size: header.size, linkname: isLink ? (paxLink ?? pending?.longLink ?? header.linkname) : null };
}

/** Parses one header block: checksum, magic, numeric fields and UTF-8 names, all strictly. */
function parseHeader(block: Buffer, at: number): RawHeader {
  const rawName = cString(block, 0, 100);
  const label = rawName.toString('latin1');
  const stored = octal(block, 148, 8, at, label, 'checksum');
  let unsigned = 8 * 0x20;
  let signed = 8 * 0x20;
  for (let i = 0; i < BLOCK; i++) {
    if (i >= 148 && i < 156) continue;
    unsigned += block[i]!;
    signed += (block[i]! << 24) >> 24;
  }
  if (stored !== unsigned && stored !== signed) throw refuseAt(at, label, 'its header checksum is wrong (the archive is damaged, or not a tar archive)');
  const magic = block.subarray(257, 265);
  const ustar = magic.equals(USTAR_MAGIC);
  if (!ustar && !magic.equals(GNU_MAGIC)) throw refuseAt(at, label, 'its header is neither ustar nor GNU (old V7 archives are not read)');
  const flag = String.fromCharCode(block[156]!);
  const mode = octal(block, 100, 8, at, label, 'mode');
  for (const [off, len, field] of [
    [108, 8, 'uid'],
    [116, 8, 'gid'],
    [136, 12, 'mtime'],
    [329, 8, 'devmajor'],
    [337, 8, 'devminor'],
  ] as const) {
    numeric(block, off, len, at, label, field);
  }
  const size = numeric(block, 124, 12, at, label, 'size');
  if (size < 0 || !Number.isSafeInteger(size)) throw refuseAt(at, label, 'its size field is negative or too large');
  let name = utf8(rawName, at, label, 'name');
  if (ustar && block[345] !== 0) name = `${utf8(cString(block, 345, 155), at, label, 'name prefix')}/${name}`;
  const linkname = utf8(cString(block, 157, 100), at, label, 'link name');
  return { at, flag, name, linkname, mode, size };
}

/** Parses the records of a PAX header (`LENGTH key=value\n`, LENGTH counting the whole record). */
function parsePax(data: Buffer, header: RawHeader): Map<string, string> {
  const records = new Map<string, string>();
  const bad = (why: string) => refuseAt(header.at, header.name, `its PAX header is malformed: ${why}`);
  let i = 0;
  while (i < data.length) {
    let j = i;
    while (j < data.length && data[j]! >= 0x30 && data[j]! <= 0x39) j++;
    if (j === i || j - i > 7 || data[j] !== 0x20) throw bad(`the record at byte ${i} does not start with its decimal length and a space`);
    const length = Number(data.toString('latin1', i, j));
    const end = i + length;
    if (length <= j - i + 1 || end > data.length)
      throw bad(`the record at byte ${i} says it is ${length} bytes long, which does not fit the header's ${data.length} bytes`);
    if (data[end - 1] !== 0x0a) throw bad(`the record at byte ${i} does not end with a newline where its length says`);
    const body = data.subarray(j + 1, end - 1);
    const eq = body.indexOf(0x3d);
    if (eq <= 0) throw bad(`the record at byte ${i} is not key=value`);
    const key = utf8(body.subarray(0, eq), header.at, header.name, 'PAX record key');
    if (records.has(key)) throw refuseAt(header.at, header.name, `its PAX header has the record '${printable(key)}' twice`);
    const rawValue = body.subarray(eq + 1);
    if (key === 'path' || key === 'linkpath') {
      if (rawValue.length === 0) throw refuseAt(header.at, header.name, `its PAX '${key}' record is empty (which would unset the name the header gives)`);
      if (rawValue.includes(0)) throw refuseAt(header.at, header.name, `its PAX '${key}' record has a NUL byte`);
      if (rawValue.length > TAR_CAPS.maxNameBytes)
        throw refuseAt(header.at, header.name, `its PAX '${key}' record is longer than ${TAR_CAPS.maxNameBytes} bytes`);
    }
    const value = utf8(rawValue, header.at, header.name, `PAX '${printable(key)}' record`);
    if (key === 'size' && !/^[0-9]{1,16}$/.test(value))
      throw refuseAt(header.at, header.name, `its PAX size record '${printable(value.slice(0, 40))}' is not a decimal number`);
    if (key.startsWith('GNU.sparse.')) throw refuseAt(header.at, header.name, 'it describes a sparse file (GNU.sparse records), which is not extracted');
    if (key === 'hdrcharset' && value !== UTF8_CHARSET)
      throw refuseAt(header.at, header.name, `its PAX hdrcharset is '${printable(value.slice(0, 40))}'; only UTF-8 names are read`);
    records.set(key, value);
    i = end;
  }
  return records;
}

/** A GNU long name or long link: the name, then NUL bytes only. */
function parseLongName(data: Buffer, header: RawHeader): string {
  const what = header.flag === 'L' ? 'GNU long name' : 'GNU long link';
  const nul = data.indexOf(0);
  const text = nul === -1 ? data : data.subarray(0, nul);
  if (nul !== -1 && !isZero(data.subarray(nul))) throw refuseAt(header.at, header.name, `its ${what} has a NUL byte inside it`);
  if (text.length === 0) throw refuseAt(header.at, header.name, `its ${what} is empty`);
  if (text.length > TAR_CAPS.maxNameBytes) throw refuseAt(header.at, header.name, `its ${what} is longer than ${TAR_CAPS.maxNameBytes} bytes`);
  return utf8(text, header.at, header.name, what);
}

function padded(size: number): number {
  return Math.ceil(size / BLOCK) * BLOCK;
}

/** An octal field: optional leading spaces, octal digits, then only NULs or spaces. Empty is 0. */
function octal(block: Buffer, off: number, len: number, at: number, label: string, field: string): number {
  const raw = block.subarray(off, off + len);
  let i = 0;
  while (i < raw.length && raw[i] === 0x20) i++;
  let j = i;
  while (j < raw.length && raw[j]! >= 0x30 && raw[j]! <= 0x37) j++;
  for (let k = j; k < raw.length; k++) {
    if (raw[k] !== 0 && raw[k] !== 0x20) throw refuseAt(at, label, `its ${field} field is not an octal number`);
  }
  return j === i ? 0 : parseInt(raw.toString('latin1', i, j), 8);
}

/** A numeric field: octal, or GNU's base-256 (first byte 0x80 positive, 0xff negative). */
function numeric(block: Buffer, off: number, len: number, at: number, label: string, field: string): number {
  const first = block[off]!;
  if (first !== 0x80 && first !== 0xff) return octal(block, off, len, at, label, field);
  let value = 0;
  for (let i = off + 1; i < off + len; i++) value = value * 256 + (first === 0xff ? 0xff - block[i]! : block[i]!);
  return first === 0xff ? -(value + 1) : value;
}

/** The bytes of a NUL-terminated field (all of it when it has no NUL). */
function cString(block: Buffer, off: number, len: number): Buffer {
  const field = block.subarray(off, off + len);
  const nul = field.indexOf(0);
  return nul === -1 ? field : field.subarray(0, nul);
}

function utf8(raw: Buffer, at: number, label: string, what: string): string {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(raw);
  } catch {
    throw refuseAt(at, label, `its ${what} is not UTF-8`);
  }
}

function isArchiveRoot(name: string): boolean {
  return name.split('/').every((s) => s === '' || s === '.');
}

function isZero(bytes: Buffer): boolean {
  for (const b of bytes) if (b !== 0) return false;
  return true;
}

function describeFlag(flag: string): string {
  return flag === 'L' ? 'GNU long name' : flag === 'K' ? 'GNU long link' : flag === 'g' ? 'global PAX header' : 'PAX header';
}

/** Control characters shown escaped, so a refusal never carries raw NULs or newlines. */
function printable(text: string): string {
  // Control characters are what this shows escaped.
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\u0000-\u001f\u007f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
}

function refuseAt(at: number, label: string | undefined, why: string): CodedError {
  const entry = label === undefined ? undefined : printable(label).slice(0, 200);
  const what = entry === undefined ? `The archive's header at byte ${at}` : `The archive entry '${entry}' (header at byte ${at})`;
  return new CodedError('INVALID_PARAMS', `${what} is refused: ${why}. Nothing was written. ${ALLOWED}.`, {
    ...(entry === undefined ? {} : { entry }),
    offset: at,
  });
}
