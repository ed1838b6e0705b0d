import { resolvePosix } from './posix-path.js';
import { z } from 'zod';
import { CodedError } from './errors.js';

/**
 * The file policy of seed 001, as it crosses the wire (controller labels, the `x-warren-policy`
 * upgrade header, `derive()`), plus the pure functions every side uses to reason about it. These
 * functions are lexical: they never touch a disk. The agent adds the physical checks (symlinks,
 * file types) on top of them, in `packages/agent/src/policy.ts`.
 *
 * Two shapes, exactly one of them per policy:
 *
 * - **root mode** `{ root: '/workspace', readOnly, suffixes, maxFileBytes }`: one folder. Callers name
 *   files relative to it (`src/a.py`) or by their absolute in-container path (`/workspace/src/a.py`).
 * - **named paths** `{ paths: { data: { root: '/mnt/data', mode: 'ro' }, out: { root: '/workspace/out', mode: 'rw' } } }`:
 *   each name is a virtual top-level folder. Callers say `/data/x.csv` (or `data/x.csv`); the
 *   agent maps it to `/mnt/data/x.csv`. A name may have several segments (`repo/src`); the longest
 *   name that matches on whole segments wins. An absolute in-container path below a root
 *   (`/mnt/data/x.csv`) is accepted too when its first segment is not a name.
 *
 * Both shapes may carry `restrict`, the allow-lists a `derive()` added: prefixes, in the policy's
 * own naming, outside which nothing may be read (`read`, `write`) or written (`write`).
 */

/** The folder a policy grants when none is given: a read-write root at `/workspace`. */
export const DEFAULT_ROOT = '/workspace';

const AbsoluteFolder = z
  .string()
  .min(1)
  .max(4096)
  .refine((p) => p.startsWith('/') && !p.includes('\0'), 'must be an absolute in-container path without NUL bytes');

/**
 * In-container folders no policy may grant: the kernel's pseudo-file systems (`/proc`, `/sys`,
 * `/dev`), the daemon's socket folder and its runtime. The daemon runs as root, so a file call
 * there would read its environment or memory, or replace its code. Refused as policy roots when a
 * policy is parsed; the agent's resolver also refuses every path that lands there (by real path
 * and by file system), whatever the root, so a root of `/` does not reach them either.
 */
export const RESERVED_FOLDERS = ['/proc', '/sys', '/dev', '/run/warren', '/opt/warren'] as const;

/** The reserved folder holding `folder` (an absolute path, normalised here), if any. */
export function reservedFolderOf(folder: string): string | undefined {
  const normal = resolvePosix('/', folder);
  return RESERVED_FOLDERS.find((r) => isWithin(r, normal));
}

/** A policy's in-container root: absolute, and not in or below a reserved folder. */
const RootFolder = AbsoluteFolder.superRefine((p, ctx) => {
  const reserved = reservedFolderOf(p);
  if (reserved !== undefined) {
    ctx.addIssue({
      code: 'custom',
      message: `the root '${p.slice(0, 200)}' is in ${reserved}, which no policy may grant (${RESERVED_FOLDERS.join(', ')} are the kernel's and the daemon's own); choose a folder such as /workspace`,
    });
  }
});

/** An allowed file suffix, dot included: `.py`, `.tar.gz`. Matched case-insensitively against the end of the name. */
export const Suffix = z
  .string()
  .min(2)
  .max(32)
  .regex(/^\.[^/\0]+$/, 'a suffix starts with a dot, e.g. ".py"');

const Suffixes = z.array(Suffix).max(256);
const MaxFileBytes = z.number().int().positive().max(Number.MAX_SAFE_INTEGER);

/** A name in multi-path mode: one or more `/`-separated segments of letters, digits, `.`, `_`, `-`. */
export const PathName = z
  .string()
  .min(1)
  .max(256)
  .regex(/^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/, 'a path name is segments of letters, digits, . _ - separated by /')
  .refine((n) => n.split('/').every((s) => s !== '.' && s !== '..'), 'a path name must not have . or .. segments');

/** Allow-lists added by `derive()`: prefixes in the policy's own naming (absolute, normalised). */
export const Restrict = z.strictObject({
  read: z.array(AbsoluteFolder).max(256),
  write: z.array(AbsoluteFolder).max(256),
});

/** Seed 001's `RootSandboxConfig`: one folder. */
export const RootPolicy = z.strictObject({
  root: RootFolder,
  readOnly: z.boolean().default(false),
  suffixes: Suffixes.optional(),
  maxFileBytes: MaxFileBytes.optional(),
  restrict: Restrict.optional(),
});

/** Seed 001's `PathConfig`: one named folder. `write_approval` defaults to true, as in the seed. */
export const PathConfig = z.strictObject({
  root: RootFolder,
  mode: z.enum(['ro', 'rw']).default('ro'),
  suffixes: Suffixes.optional(),
  maxFileBytes: MaxFileBytes.optional(),
  writeApproval: z.boolean().default(true),
  readApproval: z.boolean().default(false),
});

/** Seed 001's multi-path mode: named folders. */
export const PathsPolicy = z.strictObject({
  paths: z.record(PathName, PathConfig).refine((p) => Object.keys(p).length > 0 && Object.keys(p).length <= 64, 'give 1 to 64 named paths'),
  restrict: Restrict.optional(),
});

/** A sandbox's file policy: a single root or named paths (seed 001), maybe narrowed by `derive()`. */
export const FilePolicy = z.union([RootPolicy, PathsPolicy]);
export type FilePolicy = z.output<typeof FilePolicy>;
export type FilePolicyInput = z.input<typeof FilePolicy>;
export type RootPolicy = z.output<typeof RootPolicy>;
export type PathsPolicy = z.output<typeof PathsPolicy>;
export type PathConfig = z.output<typeof PathConfig>;

/**
 * What the controller grants one connection, sent to the agent base64url-encoded in the
 * `x-warren-policy` upgrade header. The agent trusts it because it arrives with the secret.
 */
export const ConnectionGrant = z.strictObject({
  policy: FilePolicy,
  /** A shell is not bound by the file policy, so a narrowed handle gets exec only when asked for. */
  allowExec: z.boolean(),
  /** The sandbox's whole audit log: the API key's and the sandbox token's, never a derived handle's. */
  allowAudit: z.boolean().optional(),
});
export type ConnectionGrant = z.output<typeof ConnectionGrant>;

/** The upgrade header that carries a {@link ConnectionGrant}. */
export const GRANT_HEADER = 'x-warren-policy';

/** Encodes a grant for the {@link GRANT_HEADER} header. */
export function encodeGrant(grant: z.input<typeof ConnectionGrant>): string {
  return Buffer.from(JSON.stringify(ConnectionGrant.parse(grant)), 'utf8').toString('base64url');
}

/** Decodes the {@link GRANT_HEADER} header; throws `INVALID_PARAMS` when it is not a valid grant. */
export function decodeGrant(header: string): ConnectionGrant {
  let raw: unknown;
  try {
    raw = JSON.parse(Buffer.from(header, 'base64url').toString('utf8'));
  } catch {
    throw new CodedError('INVALID_PARAMS', `The ${GRANT_HEADER} header is not base64url JSON.`);
  }
  const parsed = ConnectionGrant.safeParse(raw);
  if (!parsed.success)
    throw new CodedError('INVALID_PARAMS', `The ${GRANT_HEADER} header is not a valid grant: ${parsed.error.issues.map((i) => i.message).join('; ')}`);
  return parsed.data;
}

/**
 * What the agent asks the client before an operation that needs approval (seed 001's
 * `read_approval` / `write_approval`), as the data of an `approval` event on the request.
 */
export const ApprovalRequest = z.strictObject({
  /** read, write, edit, delete, move, copy, mkdir, list, glob, stat, upload, download. */
  operation: z.string(),
  /** The path, as the caller named it in the policy's naming. */
  path: z.string(),
  /** The destination of a move or copy. */
  to: z.string().optional(),
  /** The bytes a write or upload carries. */
  bytes: z.number().int().nonnegative().optional(),
});
export type ApprovalRequest = z.infer<typeof ApprovalRequest>;

/** How long the agent waits for an approval answer before it counts as a deny. */
export const DEFAULT_APPROVAL_TIMEOUT_MS = 30_000;

/** `derive()`'s arguments, as in seed 001. */
export const DeriveRequest = z.strictObject({
  /** Paths or prefixes the child may read. */
  allowRead: z.union([z.string().min(1).max(4096), z.array(z.string().min(1).max(4096)).max(256)]).optional(),
  /** Paths or prefixes the child may write (and read). */
  allowWrite: z.union([z.string().min(1).max(4096), z.array(z.string().min(1).max(4096)).max(256)]).optional(),
  /** true forces a read-only child; false on a read-only parent is an escalation. */
  readonly: z.boolean().optional(),
  /** false (the default): the child starts with no access; true: it starts with the parent's. */
  inherit: z.boolean().optional(),
});
export type DeriveRequest = z.input<typeof DeriveRequest>;

/** One folder of a policy as the lexical functions see it. */
export interface Mount {
  /** The name callers use: the root itself in root mode, `/name` in multi-path mode. */
  virtual: string;
  /** The in-container folder, normalised. */
  root: string;
  writable: boolean;
  suffixes: string[] | undefined;
  maxFileBytes: number | undefined;
  readApproval: boolean;
  writeApproval: boolean;
}

/** The mounts of a policy, longest virtual name first (so the first match is the longest). */
export function mountsOf(policy: FilePolicy): Mount[] {
  if ('root' in policy) {
    const root = resolvePosix(policy.root);
    return [
      {
        virtual: root,
        root,
        writable: !policy.readOnly,
        suffixes: policy.suffixes,
        maxFileBytes: policy.maxFileBytes,
        readApproval: false,
        writeApproval: false,
      },
    ];
  }
  return Object.entries(policy.paths)
    .map(([name, c]) => ({
      virtual: `/${name}`,
      root: resolvePosix(c.root),
      writable: c.mode === 'rw',
      suffixes: c.suffixes,
      maxFileBytes: c.maxFileBytes,
      readApproval: c.readApproval,
      writeApproval: c.writeApproval,
    }))
    .sort((a, b) => b.virtual.length - a.virtual.length);
}

/** True when `candidate` is `root` or below it, on whole segments (`/workspace2` is not below `/workspace`). */
export function isWithin(root: string, candidate: string): boolean {
  if (root === '/') return candidate.startsWith('/');
  return candidate === root || candidate.startsWith(`${root}/`);
}

/** A caller's path placed in a policy, lexically: no disk was touched. */
export interface Located {
  mount: Mount;
  /** The path in the policy's own naming, normalised (`/workspace/a.py`, `/data/x.csv`). */
  virtual: string;
  /** The in-container path, normalised (no `..`, no `.`, no double slashes). */
  physical: string;
  /** The segments below the mount root. */
  segments: string[];
}

/**
 * Places a caller's path in a policy without touching the disk: `..`, `.` and repeated slashes
 * are resolved as text, then the mount is the longest name matching on whole segments. Undefined
 * when the path lies outside every mount.
 *
 * @example
 * locate({ root: '/workspace', readOnly: false }, 'src/../a.py')?.physical; // '/workspace/a.py'
 */
export function locate(policy: FilePolicy, input: string): Located | undefined {
  if (input.includes('\0') || input.length === 0) return undefined;
  const mounts = mountsOf(policy);
  const rootMode = 'root' in policy;
  const base = rootMode ? mounts[0]!.root : '/';
  const normal = resolvePosix(base, input);
  for (const mount of mounts) {
    if (isWithin(mount.virtual, normal)) return place(mount, normal, mount.virtual);
  }
  if (!rootMode) {
    // An in-container absolute path below a root, when its first segment names no mount.
    const byRoot = [...mounts].sort((a, b) => b.root.length - a.root.length);
    for (const mount of byRoot) {
      if (input.startsWith('/') && isWithin(mount.root, normal)) return place(mount, normal, mount.root);
    }
  }
  return undefined;
}

function place(mount: Mount, normal: string, prefix: string): Located {
  const rest = normal === prefix ? '' : normal.slice(prefix === '/' ? 1 : prefix.length + 1);
  const segments = rest === '' ? [] : rest.split('/');
  const join = (root: string) => (segments.length === 0 ? root : `${root === '/' ? '' : root}/${segments.join('/')}`);
  return { mount, virtual: join(mount.virtual), physical: join(mount.root), segments };
}

/** What a policy lets a caller do at one located path, before any disk check. */
export function accessAt(policy: FilePolicy, located: Located): { read: boolean; write: boolean } {
  const r = policy.restrict;
  const inRead = !r || r.read.some((p) => isWithin(p, located.virtual)) || r.write.some((p) => isWithin(p, located.virtual));
  const inWrite = !r || r.write.some((p) => isWithin(p, located.virtual));
  return { read: inRead, write: inRead && inWrite && located.mount.writable };
}

/**
 * True when the policy lets a caller read `input` (lexically).
 *
 * @example
 * canRead({ root: '/workspace', readOnly: true }, 'a.py'); // true
 */
export function canRead(policy: FilePolicy, input: string): boolean {
  const located = locate(policy, input);
  return located !== undefined && accessAt(policy, located).read;
}

/** True when the policy lets a caller write `input` (lexically). */
export function canWrite(policy: FilePolicy, input: string): boolean {
  const located = locate(policy, input);
  return located !== undefined && accessAt(policy, located).write;
}

/** The prefixes a caller may read, in the policy's naming. */
export function readableRoots(policy: FilePolicy): string[] {
  if (policy.restrict) return unique([...policy.restrict.read, ...policy.restrict.write]);
  return mountsOf(policy).map((m) => m.virtual);
}

/** The prefixes a caller may write, in the policy's naming. */
export function writableRoots(policy: FilePolicy): string[] {
  const mounts = mountsOf(policy).filter((m) => m.writable);
  if (policy.restrict) return unique(policy.restrict.write.filter((p) => mounts.some((m) => isWithin(m.virtual, p))));
  return mounts.map((m) => m.virtual);
}

/** True when `name` ends with one of the suffixes (case-insensitive), or there is no list. */
export function suffixAllowed(suffixes: readonly string[] | undefined, name: string): boolean {
  if (!suffixes) return true;
  const lower = name.toLowerCase();
  return suffixes.some((s) => lower.endsWith(s.toLowerCase()) && lower.length > s.length);
}

/**
 * One sentence a model can act on: what this policy allows. Every file error ends with it.
 *
 * @example
 * describePolicy({ root: '/workspace', readOnly: false }); // 'Readable: /workspace. Writable: /workspace. Relative paths start at /workspace.'
 */
export function describePolicy(policy: FilePolicy): string {
  const readable = readableRoots(policy);
  const writable = writableRoots(policy);
  const parts = [
    `Readable: ${readable.length ? readable.join(', ') : 'nothing'}.`,
    `Writable: ${writable.length ? writable.join(', ') : 'nothing (read-only)'}.`,
  ];
  const mounts = mountsOf(policy);
  for (const m of mounts) {
    const limits: string[] = [];
    if (m.suffixes) limits.push(`suffixes ${m.suffixes.join(', ')}`);
    if (m.maxFileBytes !== undefined) limits.push(`files up to ${m.maxFileBytes} bytes`);
    if (m.readApproval) limits.push('reads need approval');
    if (m.writable && m.writeApproval) limits.push('writes need approval');
    if (limits.length) parts.push(`${m.virtual}: ${limits.join('; ')}.`);
  }
  if ('root' in policy) parts.push(`Relative paths start at ${mounts[0]!.root}.`);
  else parts.push(`Name files by their path name, e.g. ${mounts[mounts.length - 1]!.virtual}/file.txt (in-container: ${mounts[mounts.length - 1]!.root}).`);
  return parts.join(' ');
}

/**
 * `derive()`: a policy that can do at most what `parent` can, per seed 001. Pure, so the controller,
 * the SDK and the tests share it. Any request that would widen (a prefix the parent may not read
 * or write, `readonly: false` on a read-only parent) throws `PERMISSION_ESCALATION`.
 *
 * - `inherit: false` (default): the child reads only `allowRead` and `allowWrite`, writes only `allowWrite`.
 * - `inherit: true`: the child starts with the parent's access; `allowRead` / `allowWrite`, when
 *   given, replace the readable / writable part.
 * - `readonly: true`: nothing is writable. Approvals, suffixes and size limits are kept.
 *
 * @example
 * narrowPolicy({ root: '/workspace', readOnly: false }, { allowRead: 'src', allowWrite: 'out' });
 * // { root: '/workspace', readOnly: false, restrict: { read: ['/workspace/src'], write: ['/workspace/out'] } }
 */
export function narrowPolicy(parent: FilePolicy, request: DeriveRequest): FilePolicy {
  const parsed = DeriveRequest.safeParse(request);
  if (!parsed.success) throw new CodedError('INVALID_PARAMS', `Invalid derive request: ${parsed.error.issues.map((i) => i.message).join('; ')}`);
  const req = parsed.data;
  const parentOk = FilePolicy.safeParse(parent);
  if (!parentOk.success)
    throw new CodedError('INVALID_PARAMS', `The policy to derive from is not valid: ${parentOk.error.issues.map((i) => i.message).join('; ')}`);
  const list = (v: string | string[] | undefined) => (v === undefined ? undefined : typeof v === 'string' ? [v] : v);
  const allowRead = list(req.allowRead);
  const allowWrite = list(req.allowWrite);
  const parentWritable = writableRoots(parent).length > 0;
  const escalation = (what: string) =>
    new CodedError('PERMISSION_ESCALATION', `derive() would widen the parent: ${what}. A derived handle can only narrow. ${describePolicy(parent)}`, {
      parent: summary(parent),
    });

  if (req.readonly === false && !parentWritable) throw escalation('readonly: false on a read-only parent');
  const place = (p: string, intent: 'read' | 'write'): string => {
    const located = locate(parent, p);
    if (!located) throw escalation(`'${p}' is outside the parent's paths`);
    const access = accessAt(parent, located);
    if (intent === 'read' && !access.read) throw escalation(`'${p}' is not readable by the parent`);
    if (intent === 'write' && !access.write) throw escalation(`'${p}' is not writable by the parent`);
    return located.virtual;
  };
  const readOnly = req.readonly === true;
  const childRead = allowRead?.map((p) => place(p, 'read'));
  const childWrite = readOnly ? [] : allowWrite?.map((p) => place(p, 'write'));
  if (readOnly && allowWrite?.length) for (const p of allowWrite) place(p, 'write'); // still refuse a widening list

  let restrict: { read: string[]; write: string[] } | undefined;
  if (req.inherit) {
    if (childRead === undefined && childWrite === undefined) restrict = parent.restrict ? { ...parent.restrict } : undefined;
    else
      restrict = {
        read: childRead ?? readableRoots(parent),
        write: childWrite ?? writableRoots(parent),
      };
  } else {
    restrict = { read: childRead ?? [], write: childWrite ?? [] };
  }
  if (readOnly) restrict = { read: restrict ? unique([...restrict.read, ...restrict.write]) : readableRoots(parent), write: [] };
  if (restrict) restrict = { read: unique(restrict.read), write: unique(restrict.write) };

  if ('root' in parent) {
    const child: RootPolicy = { ...parent, readOnly: parent.readOnly || readOnly };
    if (restrict) child.restrict = restrict;
    else delete child.restrict;
    return child;
  }
  const paths: Record<string, PathConfig> = {};
  for (const [name, c] of Object.entries(parent.paths)) paths[name] = readOnly ? { ...c, mode: 'ro' } : { ...c };
  return restrict ? { paths, restrict } : { paths };
}

function summary(policy: FilePolicy): Record<string, unknown> {
  return { readable: readableRoots(policy), writable: writableRoots(policy) };
}

function unique(values: string[]): string[] {
  return [...new Set(values)];
}
