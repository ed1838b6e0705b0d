import { createHash, randomBytes } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { CodedError } from '@warren/protocol';
import type { Logger } from '../logger.js';
/** One rule of an OCI seccomp profile, as Docker and Podman write them. */
export interface SeccompRule {
  names?: string[];
  name?: string;
  action: string;
  errnoRet?: number;
  args?: { index: number; value: number; valueTwo?: number; op: string }[] | null;
  includes?: Record<string, unknown>;
  excludes?: Record<string, unknown>;
  [key: string]: unknown;
}

/** An OCI seccomp profile (Podman's `/usr/share/containers/seccomp.json`, Docker's default). */
export interface SeccompProfile {
  defaultAction: string;
  syscalls: SeccompRule[];
  [key: string]: unknown;
}

/** Where Podman keeps its default profile on the engine's host (containers-common). */
export const PODMAN_DEFAULT_SECCOMP = '/usr/share/containers/seccomp.json';

/** CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID and NEWNET: the flags of a clone that makes namespaces. */
const NAMESPACE_CLONE_FLAGS = 0x7e020000;
const EPERM = 1;
const ENOSYS = 38;

/**
 * Podman's default profile with namespaces closed the way Docker's default closes them:
 * `unshare` refused, `clone` allowed only without namespace flags, `clone3` answered ENOSYS (so
 * the C library falls back to `clone`, whose flags can be checked); a `clone` with namespace
 * flags gets the profile's default action, which must refuse. Podman allows all three to
 * anyone, so sandbox code without any capability can make a user namespace and reach kernel code
 * written for root inside it; Docker's default does not. Other rules are kept as they are.
 *
 * @example
 * const profile = closeNamespaces(JSON.parse(readFileSync(PODMAN_DEFAULT_SECCOMP, 'utf8')));
 */
export function closeNamespaces(profile: SeccompProfile): SeccompProfile {
  if (!/ERRNO|KILL|TRAP/.test(profile.defaultAction))
    throw new Error(`A seccomp profile whose default action is ${profile.defaultAction} cannot refuse a clone with namespace flags.`);
  const closed = new Set(['unshare', 'clone', 'clone3']);
  const syscalls = profile.syscalls
    .map((rule) => {
      const names = rule.names ?? (rule.name === undefined ? [] : [rule.name]);
      if (!names.some((n) => closed.has(n))) return rule;
      const { name: _name, ...rest } = rule;
      return { ...rest, names: names.filter((n) => !closed.has(n)) };
    })
    .filter((rule) => (rule.names ?? []).length > 0 || rule.name !== undefined);
  return {
    ...profile,
    syscalls: [
      ...syscalls,
      { names: ['unshare'], action: 'SCMP_ACT_ERRNO', errnoRet: EPERM },
      { names: ['clone'], action: 'SCMP_ACT_ALLOW', args: [{ index: 0, value: NAMESPACE_CLONE_FLAGS, valueTwo: 0, op: 'SCMP_CMP_MASKED_EQ' }] },
      { names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS },
    ],
  };
}

/**
 * Writes Podman's default seccomp profile with namespaces closed ({@link closeNamespaces}) into
 * the state folder and returns its path, which Podman reads on its own host (its API takes a
 * path, not the profile). Without it sandbox code could make user namespaces, which Docker's
 * default refuses; so a Podman whose host this controller does not share is refused.
 */
export async function writePodmanSeccompProfile(stateDir: string, sharesFolders: boolean, logger: Logger | undefined): Promise<string> {
  let base: SeccompProfile;
  try {
    if (!sharesFolders) throw new Error("the engine does not see this controller's folders");
    base = JSON.parse(await readFile(PODMAN_DEFAULT_SECCOMP, 'utf8')) as SeccompProfile;
  } catch (err) {
    throw new CodedError(
      'NOT_SUPPORTED',
      `Podman's default seccomp profile lets sandbox code make user namespaces, and Warren closes them with a profile file on the engine's host; it cannot here (${(err as Error).message}). ` +
        `Run the controller on the Podman host with ${PODMAN_DEFAULT_SECCOMP} present (the containers-common package), or use Docker (docs/install.md, Podman).`,
    );
  }
  const text = `${JSON.stringify(closeNamespaces(base))}\n`;
  const file = path.join(stateDir, `seccomp-podman-${createHash('sha256').update(text).digest('hex').slice(0, 16)}.json`);
  await mkdir(stateDir, { recursive: true });
  // Written aside and renamed in: a controller sharing this state folder may be starting a container with it.
  const aside = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`;
  await writeFile(aside, text, { mode: 0o644 });
  await rename(aside, file);
  logger?.info({ seccompProfile: file }, 'engine.seccomp-profile');
  return file;
}
