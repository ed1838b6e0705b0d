import { lstat, realpath } from 'node:fs/promises';
import path from 'node:path';
import { CodedError } from '@warren/protocol';

/**
 * The sandbox's file policy: which folder the file tools may touch. Relative paths are taken from
 * the root; absolute paths must lie inside it. This is the boundary of the file methods only: a
 * shell command is bound by the kernel (the container), not by this.
 */
export interface FilePolicy {
  root: string;
  readOnly: boolean;
}

export const DEFAULT_POLICY: FilePolicy = { root: '/workspace', readOnly: false };

/** A path that passed the policy: absolute, normalised, inside the root. */
export interface ResolvedPath {
  absolute: string;
  /** As shown to callers: relative to the root, `.` for the root itself. */
  display: string;
}

/**
 * Resolves a caller's path against the policy. Lexical containment is checked first (so `..`,
 * `/workspace2` against `/workspace`, and foreign absolute paths fail without touching the disk),
 * then the deepest existing ancestor's real path is checked, so a symlink inside the root that
 * points outside is refused too.
 */
export async function resolvePath(policy: FilePolicy, input: string, intent: 'read' | 'write'): Promise<ResolvedPath> {
  if (input.includes('\0')) throw new CodedError('PATH_NOT_IN_SANDBOX', 'Path contains a NUL byte.', { path: input });
  const absolute = path.resolve(policy.root, input);
  if (!isWithin(policy.root, absolute)) throw notInSandbox(policy, input);
  if (intent === 'write' && policy.readOnly) {
    throw new CodedError('PATH_NOT_WRITABLE', `'${input}' is read-only: this sandbox's root ${policy.root} is read-only.`, { path: input, root: policy.root });
  }
  const real = await realpathOfDeepestExisting(absolute);
  if (!isWithin(await realpath(policy.root), real)) throw notInSandbox(policy, input);
  return { absolute, display: path.relative(policy.root, absolute) || '.' };
}

function notInSandbox(policy: FilePolicy, input: string): CodedError {
  return new CodedError('PATH_NOT_IN_SANDBOX', `'${input}' is outside the sandbox. Allowed: paths inside ${policy.root} (relative paths are taken from there).`, {
    path: input,
    root: policy.root,
  });
}

/** True when `candidate` is `root` or below it, by whole path components. */
export function isWithin(root: string, candidate: string): boolean {
  const rel = path.relative(root, candidate);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

async function realpathOfDeepestExisting(absolute: string): Promise<string> {
  let current = absolute;
  const missing: string[] = [];
  for (;;) {
    try {
      await lstat(current);
      return path.join(await realpath(current), ...missing.reverse());
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      const parent = path.dirname(current);
      if (parent === current) return absolute;
      missing.push(path.basename(current));
      current = parent;
    }
  }
}
