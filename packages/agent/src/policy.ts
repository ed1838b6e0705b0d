import type { Stats } from 'node:fs';
import { constants, lstatSync, readFileSync, readlinkSync, realpathSync, statfsSync } from 'node:fs';
import { lstat, open, readdir, readlink, rmdir, unlink, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import {
  accessAt,
  canRead,
  CodedError,
  DEFAULT_ROOT,
  describePolicy,
  isWithin,
  locate,
  mountsOf,
  RESERVED_FOLDERS,
  reservedFolderOf,
  suffixAllowed,
  type FilePolicy,
  type Located,
  type Mount,
} from '@warren/protocol';
import { atPinnedFolder } from './folder-pin.js';
import { mapFsError } from './fs-error.js';

export type { FilePolicy } from '@warren/protocol';
export { isWithin } from '@warren/protocol';

/**
 * The policy an agent uses when the controller sends none: a read-write root at `/workspace`.
 * This is the boundary of the file methods only: a shell command is bound by the kernel (the
 * container), not by this.
 */
export const DEFAULT_POLICY: FilePolicy = { root: DEFAULT_ROOT, readOnly: false };

/** How many symbolic links one resolution may pass through before it is called a loop (Linux's own limit). */
export const MAX_SYMLINK_HOPS = 40;

// The walk's metadata calls (realpath, lstat, readlink) are synchronous on purpose: on the
// container's local file systems each takes microseconds, while a trip through libuv's thread
// pool costs tens of microseconds more per call, and a small call makes three or more of them.
const realpath = (p: string): string => realpathSync.native(p);

/** What a caller means to do with a path; `list` is a read of a folder. */
export type Intent = 'read' | 'write';

export interface ResolveOptions {
  /**
   * Follow a symbolic link in the last segment (default true). Delete, move and lstat-style stat
   * act on the link itself and pass false.
   */
  followLast?: boolean;
}

/** A path that passed the policy: lexically and physically inside a mount the caller may use. */
export interface ResolvedPath {
  /** The in-container path to act on: every symbolic link before the last segment replaced by its target. */
  absolute: string;
  /** As shown to callers: relative to the root in root mode (`.` for the root), `/name/...` with named paths. */
  display: string;
  /** The mount whose rules apply (the stricter of the one named and the one the links led into). */
  mount: Mount;
  /** The real path of that mount's root. */
  mountRealRoot: string;
  /** True when the path is the root of a mount: never deleted or moved. */
  isMountRoot: boolean;
  /** The lstat of the last segment, when it exists. */
  stat: Stats | undefined;
}

/**
 * Resolves a caller's path through the policy, the way `openat2(RESOLVE_BENEATH)` would:
 *
 * 1. Normalise as text and pick the mount by the longest whole-segment match (`..`, foreign
 *    absolute paths, `/workspace2` against `/workspace`, NUL bytes and look-alike names fail here,
 *    without touching the disk).
 * 2. Check the caller's rights at that path (read-only roots, `derive()` allow-lists).
 * 3. Walk the existing segments from the mount's real root with `lstat`; a symbolic link is
 *    followed only while its target stays inside the mount (its `..` steps are taken physically,
 *    as the kernel would), and more than 40 hops is a loop.
 * 4. Check the rights again at the physical place the links led to.
 *
 * The caller then opens the result with {@link openChecked}, which refuses a link swapped in
 * since (O_NOFOLLOW) and checks the opened file is the one walked.
 *
 * @example
 * const target = await resolvePath(policy, 'src/a.py', 'read');
 * target.absolute; // '/workspace/src/a.py'
 */
export async function resolvePath(policy: FilePolicy, input: string, intent: Intent, options: ResolveOptions = {}): Promise<ResolvedPath> {
  if (typeof input !== 'string' || input.includes('\0')) throw notInSandbox(policy, String(input).replaceAll('\0', '\\0'), 'it contains a NUL byte');
  const located = locate(policy, input);
  if (!located) throw notInSandbox(policy, input);
  checkAccess(policy, located, intent, input);

  let mountRealRoot: string;
  try {
    mountRealRoot = realpath(located.mount.root);
  } catch {
    throw new CodedError(
      'NOT_FOUND',
      `The sandbox folder ${located.mount.root} (for '${located.mount.virtual}') does not exist in the container. ${describePolicy(policy)}`,
      {
        path: input,
      },
    );
  }
  const walked = await walk(policy, input, mountRealRoot, located.mount.root, located.segments, options.followLast ?? true);
  const reserved = reservedPlace(walked.physical, walked.stat ? walked.physical : walked.existing, walked.stat);
  if (reserved) throw notInSandbox(policy, input, reserved);

  // The links may have led into a nested mount with stricter rules: apply those too.
  let mount = located.mount;
  let realRoot = mountRealRoot;
  const physicalLocated = await locateReal(policy, walked.physical);
  if (physicalLocated) {
    checkAccess(policy, physicalLocated.located, intent, input);
    if (physicalLocated.located.mount.virtual !== located.mount.virtual) {
      mount = stricter(located.mount, physicalLocated.located.mount);
      realRoot = physicalLocated.realRoot;
    }
  }
  const isMountRoot = walked.physical === mountRealRoot || (physicalLocated !== undefined && walked.physical === physicalLocated.realRoot);
  return {
    absolute: walked.physical,
    display: displayOf(policy, located),
    mount,
    mountRealRoot: realRoot,
    isMountRoot,
    stat: walked.stat,
  };
}

/**
 * Where a command runs when the caller names no folder: the root in root mode; with named paths,
 * the first writable name (else the first name), since `.` there is the virtual top, not a folder.
 *
 * @example
 * await resolvePath(policy, cwd ?? defaultWorkingFolder(policy), 'read');
 */
export function defaultWorkingFolder(policy: FilePolicy): string {
  if ('root' in policy) return '.';
  const mounts = mountsOf(policy).sort((a, b) => a.virtual.localeCompare(b.virtual));
  return (mounts.find((m) => m.writable) ?? mounts[0]!).virtual;
}

/** How a located path is shown to callers. */
export function displayOf(policy: FilePolicy, located: Located): string {
  if ('root' in policy) return located.segments.length === 0 ? '.' : located.segments.join('/');
  return located.virtual;
}

/** Shows an in-container path (one found by walking a folder) the way callers name it. */
export function displayPhysical(policy: FilePolicy, resolved: ResolvedPath, physical: string): string {
  const rel = path.posix.relative(resolved.mountRealRoot, physical);
  const located = locate(policy, rel === '' ? resolved.mount.virtual : `${resolved.mount.virtual}/${rel}`);
  return located ? displayOf(policy, located) : physical;
}

/**
 * Whether a path found below a resolved one (by walking folders or by a watch, never through a
 * link) may be read under this policy: at the name it is shown by, and at the mount its physical
 * place lies in. A narrowed handle's allow-lists apply to each path it learns of, not only to the
 * one it named.
 *
 * @example
 * mayReadFound(policy, resolved, '/workspace/src/a.py'); // false for a handle that may read only 'docs'
 */
export function mayReadFound(policy: FilePolicy, resolved: ResolvedPath, physical: string): boolean {
  if (!canRead(policy, virtualOf(resolved, physical))) return false;
  for (const mount of mountsOf(policy)) {
    // A nested mount the path physically lies in applies its own allow-list too.
    let realRoot: string;
    try {
      realRoot = realpath(mount.root);
    } catch {
      continue;
    }
    if (realRoot === resolved.mountRealRoot || !isWithin(realRoot, physical) || realRoot.length <= resolved.mountRealRoot.length) continue;
    const rel = path.posix.relative(realRoot, physical);
    if (!canRead(policy, rel === '' ? mount.virtual : `${mount.virtual === '/' ? '' : mount.virtual}/${rel}`)) return false;
  }
  return true;
}

/** Maps a found in-container path (under a real mount root) to the policy's naming, for re-checks. */
export function virtualOf(resolved: ResolvedPath, physical: string): string {
  const rel = path.posix.relative(resolved.mountRealRoot, physical);
  return rel === '' ? resolved.mount.virtual : `${resolved.mount.virtual === '/' ? '' : resolved.mount.virtual}/${rel}`;
}

function checkAccess(policy: FilePolicy, located: Located, intent: Intent, input: string): void {
  const access = accessAt(policy, located);
  if (!access.read) throw notInSandbox(policy, input, 'it is outside the paths this handle may read');
  if (intent === 'write' && !access.write) {
    throw new CodedError('PATH_NOT_WRITABLE', `'${input}' is read-only for this sandbox handle. ${describePolicy(policy)}`, { path: input });
  }
}

/** The error for a path outside the policy; the message says what IS allowed. */
export function notInSandbox(policy: FilePolicy, input: string, why?: string): CodedError {
  return new CodedError('PATH_NOT_IN_SANDBOX', `'${input}' is outside the sandbox${why ? ` (${why})` : ''}. ${describePolicy(policy)}`, { path: input });
}

async function locateReal(policy: FilePolicy, physical: string): Promise<{ located: Located; realRoot: string } | undefined> {
  // Mount roots are compared by their real paths (a root may itself be reached through a link);
  // the longest real root holding the path wins, so nested mounts apply their own rules.
  let best: { located: Located; realRoot: string } | undefined;
  for (const mount of mountsOf(policy)) {
    let realRoot: string;
    try {
      realRoot = realpath(mount.root);
    } catch {
      continue;
    }
    if (!isWithin(realRoot, physical)) continue;
    if (best && realRoot.length <= best.realRoot.length) continue;
    const rel = physical === realRoot ? '' : physical.slice(realRoot === '/' ? 1 : realRoot.length + 1);
    const segments = rel === '' ? [] : rel.split('/');
    const virtual = rel === '' ? mount.virtual : `${mount.virtual === '/' ? '' : mount.virtual}/${rel}`;
    best = { located: { mount, virtual, physical, segments }, realRoot };
  }
  return best;
}

function stricter(a: Mount, b: Mount): Mount {
  const suffixes = a.suffixes && b.suffixes ? a.suffixes.filter((s) => b.suffixes!.includes(s)) : (a.suffixes ?? b.suffixes);
  const maxFileBytes = a.maxFileBytes === undefined ? b.maxFileBytes : b.maxFileBytes === undefined ? a.maxFileBytes : Math.min(a.maxFileBytes, b.maxFileBytes);
  return {
    ...b,
    writable: a.writable && b.writable,
    suffixes,
    maxFileBytes,
    readApproval: a.readApproval || b.readApproval,
    writeApproval: a.writeApproval || b.writeApproval,
  };
}

interface Walked {
  physical: string;
  stat: Stats | undefined;
  /** The deepest folder of `physical` that exists (when the path itself does not). */
  existing: string;
}

async function walk(policy: FilePolicy, input: string, realRoot: string, namedRoot: string, segments: string[], followLast: boolean): Promise<Walked> {
  let current = realRoot;
  const queue = [...segments];
  let hops = 0;
  const leaves = () => notInSandbox(policy, input, 'a symbolic link on the way leads outside it');
  while (queue.length > 0) {
    const part = queue.shift()!;
    if (part === '' || part === '.') continue;
    if (part === '..') {
      if (current === realRoot) throw leaves();
      current = path.posix.dirname(current);
      continue;
    }
    const next = current === '/' ? `/${part}` : `${current}/${part}`;
    // Checked at every step, before the step is looked at: no answer (not even NOT_FOUND or
    // NOT_A_DIRECTORY) comes from inside a reserved place.
    const inReserved = reservedPrefix(next);
    if (inReserved) throw notInSandbox(policy, input, inReserved);
    let info: Stats;
    try {
      info = lstatSync(next);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') {
        // The rest does not exist yet (a write creates it). A `..` past a missing folder cannot be taken.
        if (queue.includes('..')) throw new CodedError('NOT_FOUND', `No such file or folder: '${input}'.`, { path: input });
        return { physical: [next, ...queue.filter((q) => q !== '' && q !== '.')].join('/'), stat: undefined, existing: current };
      }
      if (code === 'ENOTDIR') throw new CodedError('NOT_A_DIRECTORY', `A parent of '${input}' is a file, not a folder.`, { path: input });
      if (code === 'ENAMETOOLONG')
        throw new CodedError('INVALID_PARAMS', `'${input.slice(0, 200)}...' has a name that is too long.`, { path: input.slice(0, 200) });
      if (code === 'EACCES')
        throw new CodedError('PATH_NOT_WRITABLE', `The sandbox user may not enter a parent folder of '${input}' (EACCES). ${describePolicy(policy)}`, {
          path: input,
        });
      throw err;
    }
    const onReserved = reservedFileSystem(next, info);
    if (onReserved) throw notInSandbox(policy, input, onReserved);
    const last = queue.length === 0;
    if (info.isSymbolicLink() && (!last || followLast)) {
      if (++hops > MAX_SYMLINK_HOPS)
        throw new CodedError('SYMLINK_LOOP', `'${input}' goes through more than ${MAX_SYMLINK_HOPS} symbolic links (a loop).`, { path: input });
      const target = readlinkSync(next);
      if (target.includes('\0') || target.length === 0) throw leaves();
      if (target.startsWith('/')) {
        // An absolute target must name the real root literally; its remaining steps are walked from there.
        // (The root's configured name counts too, when the root itself is reached through a link.)
        const clean = target.replace(/\/+/g, '/').replace(/\/\.(?=\/|$)/g, '');
        const base = isWithin(realRoot, clean) ? realRoot : isWithin(namedRoot, clean) ? namedRoot : undefined;
        if (base === undefined) throw leaves();
        const rest = clean === base ? '' : clean.slice(base === '/' ? 1 : base.length + 1);
        current = realRoot;
        queue.unshift(...rest.split('/').filter((s) => s !== ''));
      } else {
        queue.unshift(...target.split('/'));
      }
      continue;
    }
    if (!last && !info.isDirectory()) throw new CodedError('NOT_A_DIRECTORY', `A parent of '${input}' is a file, not a folder.`, { path: input });
    current = next;
    if (last) return { physical: current, stat: info, existing: current };
  }
  let stat: Stats | undefined;
  try {
    stat = lstatSync(current);
  } catch {
    stat = undefined;
  }
  return { physical: current, stat, existing: current };
}

/**
 * Kernel pseudo-file systems by their `statfs` magic: proc, sysfs, devpts, cgroup, cgroup2,
 * debugfs, tracefs, securityfs, bpf, mqueue, configfs, pstore, efivarfs, binfmt_misc, selinuxfs,
 * nsfs, fusectl. (devtmpfs reports tmpfs's magic: `/dev` is caught by path and device instead.)
 */
const PSEUDO_FS_MAGIC = new Set([
  0x9fa0, 0x62656572, 0x1cd1, 0x27e0eb, 0x63677270, 0x64626720, 0x74726163, 0x73636673, 0xcafe4a11, 0x19800202, 0x62656570, 0x6165676c, 0xde5e81e4, 0x42494e4d,
  0xf97cff8c, 0x6e736673, 0x65735543,
]);

/** File system types whose device number belongs to one mount's memory (never a shared disk). */
const MEMORY_FS_TYPES = new Set([
  'proc',
  'sysfs',
  'devtmpfs',
  'tmpfs',
  'devpts',
  'mqueue',
  'cgroup',
  'cgroup2',
  'debugfs',
  'tracefs',
  'securityfs',
  'bpf',
  'configfs',
  'pstore',
  'efivarfs',
  'binfmt_misc',
  'selinuxfs',
  'nsfs',
  'fusectl',
  'hugetlbfs',
  'autofs',
]);

/** One line of `/proc/self/mountinfo`. */
interface MountLine {
  /** `major:minor` */
  device: string;
  /** The folder of its file system that this mount shows. */
  root: string;
  mountPoint: string;
  type: string;
}

/** What no file call may reach: path prefixes (real paths) and device numbers. */
export interface ReservedPlaces {
  prefixes: string[];
  /** Device numbers (as `stat` gives them) of memory file systems mounted in a reserved folder (the /dev tmpfs, /dev/shm). */
  devices: Set<number>;
}

/**
 * The places out of every policy's reach, from the mount table: the reserved folders
 * ({@link RESERVED_FOLDERS}) themselves, and every other place where the file system content
 * mounted in one of them shows again (a bind mount of `/proc`, `/dev/shm` or the socket folder
 * elsewhere, or a mount of the disk above it): a mount of the same device whose root holds, or
 * lies inside, the reserved mount's root. Pure, for tests; the daemon reads its own table once.
 *
 * @example
 * reservedPlacesOf(readFileSync('/proc/self/mountinfo', 'utf8')).prefixes; // ['/proc', ..., '/workspace/p']
 */
export function reservedPlacesOf(mountinfo: string | undefined): ReservedPlaces {
  const prefixes = new Set<string>(RESERVED_FOLDERS);
  const devices = new Set<number>();
  const mounts: MountLine[] = [];
  for (const line of (mountinfo ?? '').split('\n')) {
    const fields = line.split(' ');
    const dash = fields.indexOf('-');
    if (fields.length < 10 || dash < 6) continue;
    mounts.push({ device: fields[2]!, root: unescapeMount(fields[3]!), mountPoint: unescapeMount(fields[4]!), type: fields[dash + 1]! });
  }
  const reserved = mounts.filter((m) => reservedFolderOf(m.mountPoint) !== undefined);
  for (const r of reserved) if (MEMORY_FS_TYPES.has(r.type)) devices.add(deviceNumber(r.device));
  for (const m of mounts) {
    if (reservedFolderOf(m.mountPoint) !== undefined) continue;
    for (const r of reserved) {
      if (r.device !== m.device) continue;
      if (isWithin(r.root, m.root)) prefixes.add(m.mountPoint);
      else if (isWithin(m.root, r.root)) prefixes.add(path.posix.join(m.mountPoint, path.posix.relative(m.root, r.root)));
    }
  }
  return { prefixes: [...prefixes], devices };
}

/** glibc's makedev: `major:minor` as `stat` reports the device. */
function deviceNumber(majorMinor: string): number {
  const [major, minor] = majorMinor.split(':').map(Number) as [number, number];
  return (minor % 256) + (major % 4096) * 256 + Math.floor(minor / 256) * 2 ** 20 + Math.floor(major / 4096) * 2 ** 32;
}

/** mountinfo escapes space, tab, newline and backslash as octal (`\040`). */
function unescapeMount(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}

let reservedCache: ReservedPlaces | undefined;
const pseudoByDevice = new Map<number, boolean>();

/** The daemon's reserved places, read once: mounts do not change without CAP_SYS_ADMIN, which it lacks. */
function reservedPlaces(): ReservedPlaces {
  if (!reservedCache) {
    let mountinfo: string | undefined;
    try {
      mountinfo = readFileSync('/proc/self/mountinfo', 'utf8');
    } catch {
      mountinfo = undefined; // no /proc: the folders by name and the statfs check still stand
    }
    reservedCache = reservedPlacesOf(mountinfo);
  }
  return reservedCache;
}

const RESERVED_WHY = `no file call reaches ${RESERVED_FOLDERS.join(', ')} or the kernel's pseudo-file systems, whatever the policy`;

/** Why a real path is in a reserved place by its name alone, or undefined. */
function reservedPrefix(absolute: string): string | undefined {
  const prefix = reservedPlaces().prefixes.find((p) => isWithin(p, absolute));
  return prefix === undefined ? undefined : `it is in ${prefix}; ${RESERVED_WHY}`;
}

/**
 * Why a real path (symbolic links already resolved) is out of every policy's reach, or
 * undefined: it lies in a reserved place ({@link reservedPlacesOf}), or its file system (or, when
 * it does not exist, that of its deepest existing folder `existing`) is a memory file system
 * mounted in a reserved folder (by device number, so a bind mount of it anywhere is caught) or a
 * kernel pseudo-file system (by `statfs` magic, cached per device).
 *
 * @example
 * reservedPlace('/proc/1/environ', '/proc/1/environ', lstatSync('/proc/1/environ')); // 'it is in /proc; no file call reaches ...'
 */
export function reservedPlace(absolute: string, existing: string, stat?: Stats): string | undefined {
  return reservedPrefix(absolute) ?? reservedFileSystem(existing, stat);
}

/** Why the file system of an existing path (`stat`: its lstat, when at hand) is out of reach, or undefined. */
function reservedFileSystem(existing: string, stat?: Stats): string | undefined {
  const places = reservedPlaces();
  let info = stat;
  if (!info) {
    try {
      info = lstatSync(existing);
    } catch {
      return undefined; // vanished meanwhile: the call itself will not find it
    }
  }
  if (places.devices.has(info.dev)) return `it is on a file system mounted in a reserved folder; ${RESERVED_WHY}`;
  let pseudo = pseudoByDevice.get(info.dev);
  if (pseudo === undefined) {
    try {
      // statfs follows a link: ask about the folder that holds it instead.
      pseudo = PSEUDO_FS_MAGIC.has(statfsSync(info.isSymbolicLink() ? path.posix.dirname(existing) : existing).type);
    } catch {
      pseudo = false;
    }
    pseudoByDevice.set(info.dev, pseudo);
  }
  if (pseudo) return `it is on a kernel pseudo-file system; ${RESERVED_WHY}`;
  return undefined;
}

/** Checks a file name against its mount's suffix list; the error says which suffixes are allowed. */
export function checkSuffix(policy: FilePolicy, resolved: ResolvedPath, input: string, ...names: string[]): void {
  const suffixes = resolved.mount.suffixes;
  if (!suffixes) return;
  for (const name of [path.posix.basename(resolved.absolute), ...names.map((n) => path.posix.basename(n))]) {
    if (!suffixAllowed(suffixes, name)) {
      throw new CodedError(
        'SUFFIX_NOT_ALLOWED',
        `'${input}' has a suffix this sandbox does not allow. Allowed suffixes under ${resolved.mount.virtual}: ${suffixes.join(', ')}. ${describePolicy(policy)}`,
        {
          path: input,
          allowed: suffixes,
        },
      );
    }
  }
}

/** Checks a size against its mount's `maxFileBytes`; the error names the limit. */
export function checkSize(policy: FilePolicy, resolved: ResolvedPath, input: string, size: number): void {
  const limit = resolved.mount.maxFileBytes;
  if (limit !== undefined && size > limit) {
    throw new CodedError(
      'FILE_TOO_LARGE',
      `'${input}' is ${size} bytes; files under ${resolved.mount.virtual} may be at most ${limit} bytes. ${describePolicy(policy)}`,
      {
        path: input,
        size,
        limit,
      },
    );
  }
}

/** The type name of a stat, as the file methods report it. */
export function typeOf(info: Stats): 'file' | 'directory' | 'symlink' | 'fifo' | 'socket' | 'char-device' | 'block-device' | 'other' {
  if (info.isFile()) return 'file';
  if (info.isDirectory()) return 'directory';
  if (info.isSymbolicLink()) return 'symlink';
  if (info.isFIFO()) return 'fifo';
  if (info.isSocket()) return 'socket';
  if (info.isCharacterDevice()) return 'char-device';
  if (info.isBlockDevice()) return 'block-device';
  return 'other';
}

/** Refuses anything but a regular file, without opening it (a FIFO or a device is never opened). */
export function requireRegularFile(info: Stats | undefined, display: string): void {
  if (!info) throw new CodedError('NOT_FOUND', `No such file: '${display}'.`, { path: display });
  if (info.isDirectory()) throw new CodedError('IS_A_DIRECTORY', `'${display}' is a folder, not a file; list it to see its files.`, { path: display });
  if (!info.isFile()) {
    throw new CodedError('UNSUPPORTED_FILE_TYPE', `'${display}' is a ${typeOf(info)}, not a regular file; file calls only read and write regular files.`, {
      path: display,
      type: typeOf(info),
    });
  }
}

/**
 * Opens a resolved path in its folder pinned by a descriptor ({@link atPinnedFolder}), without
 * following a link in its last segment (O_NOFOLLOW) and without blocking on a FIFO (O_NONBLOCK),
 * then checks that the opened file is the one the walk saw (same
 * device and inode) and that the kernel's own name for it (`/proc/self/fd`) is the walked path.
 * Anything swapped in between is refused and the handle closed.
 */
export async function openChecked(resolved: ResolvedPath, display: string, flags: number = constants.O_RDONLY): Promise<FileHandle> {
  let handle: FileHandle;
  try {
    // In its folder pinned by a descriptor: a folder on the way swapped for a link meanwhile never
    // gets a file elsewhere opened (a device's open alone can act), only refused.
    handle =
      resolved.absolute === '/'
        ? await open(resolved.absolute, flags | constants.O_NOFOLLOW | constants.O_NONBLOCK)
        : await atPinnedFolder(resolved.absolute, display, (at) => open(at, flags | constants.O_NOFOLLOW | constants.O_NONBLOCK));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ELOOP')
      throw new CodedError('PATH_NOT_IN_SANDBOX', `'${display}' was replaced by a symbolic link during the call; file calls do not follow it.`, {
        path: display,
      });
    throw mapFsError(err, display);
  }
  try {
    const info = await handle.stat();
    if (resolved.stat && (info.dev !== resolved.stat.dev || info.ino !== resolved.stat.ino)) {
      throw new CodedError('PATH_NOT_IN_SANDBOX', `'${display}' changed during the call (another file was swapped in); try again.`, { path: display });
    }
    await checkKernelName(handle, resolved.absolute, display);
    return handle;
  } catch (err) {
    await handle.close().catch(() => undefined);
    throw err;
  }
}

/** Checks that an open handle is the file at `expected`, by the kernel's own name for it. */
export async function checkKernelName(handle: FileHandle, expected: string, display: string): Promise<void> {
  const actual = await readlink(`/proc/self/fd/${handle.fd}`).catch(() => undefined);
  // Without /proc the dev/ino check of openChecked stands alone.
  if (actual !== undefined && actual !== expected) {
    throw new CodedError('PATH_NOT_IN_SANDBOX', `'${display}' moved during the call (a folder on the way was swapped); try again.`, { path: display });
  }
}

/**
 * Deletes the folder `at` (a name from {@link atPinnedFolder}) and everything in it by descriptor:
 * each folder is opened without following a link (O_NOFOLLOW) and its entries are looked at,
 * unlinked and descended into through `/proc/self/fd/<n>/<name>`, never by a path walked again,
 * so a folder inside swapped for a link mid-delete leads nowhere (the link itself is removed).
 */
export async function removeFolderAt(at: string): Promise<void> {
  const handle = await open(at, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  try {
    const here = `/proc/self/fd/${handle.fd}`;
    for (const name of await readdir(here)) {
      const entry = `${here}/${name}`;
      const info = await lstat(entry).catch(() => undefined);
      if (info === undefined) continue;
      if (info.isDirectory()) await removeFolderAt(entry);
      else
        await unlink(entry).catch((err: NodeJS.ErrnoException) => {
          if (err.code !== 'ENOENT') throw err;
        });
    }
  } finally {
    await handle.close().catch(() => undefined);
  }
  await rmdir(at);
}
