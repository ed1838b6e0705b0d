import { chmod, mkdir, readFile, readdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { EgressPolicy, SecretTarget } from '@warren/protocol';
import type { BrokeredSecret } from './secrets.js';

/** What one sandbox's egress is, as kept across controller restarts. */
export interface StoredEgress {
  policy: EgressPolicy;
  /** The policy's version (1 at create, +1 per live update). */
  version: number;
  /** The brokered secrets, real values and placeholders (the placeholders are already in the container's environment). */
  secrets: BrokeredSecret[];
}

/**
 * The file's shape: the policy, and the secrets it brokers as a table keyed by the name the
 * sandbox sees (its environment variable), so the file names each secret once.
 */
const StoredFile = z.strictObject({
  policy: EgressPolicy,
  version: z.number().int().min(1),
  secrets: z.record(
    z.string(),
    z.strictObject({ placeholder: z.string().regex(/^WARREN_SECRET_[0-9a-f]{32}$/), hosts: z.array(z.string()), target: SecretTarget, value: z.string() }),
  ),
});

/** The JSON of a stored egress (the file's and the Kubernetes Secret's content). */
export function serializeStoredEgress(egress: StoredEgress): string {
  const secrets = Object.fromEntries(
    egress.secrets.map((s) => [s.name, { placeholder: s.placeholder, hosts: [...s.hosts], target: s.target, value: s.value }]),
  );
  return JSON.stringify({ policy: egress.policy, version: egress.version, secrets });
}

/** A stored egress from its JSON; undefined when it is not one Warren wrote (the wrong shape, not JSON). */
export function parseStoredEgress(text: string): StoredEgress | undefined {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    return undefined;
  }
  const parsed = StoredFile.safeParse(data);
  if (!parsed.success) return undefined;
  const secrets = Object.entries(parsed.data.secrets).map(([name, s]) => ({ name, ...s }));
  return { policy: parsed.data.policy, version: parsed.data.version, secrets };
}

/**
 * Where {@link SandboxEgress} keeps each sandbox's egress: {@link EgressStore} (the state folder)
 * or, on Kubernetes, one Secret per sandbox shared by every controller replica.
 */
export interface EgressStoreLike {
  /** True where several controller replicas read the same store (then any of them may serve a sandbox's relay). */
  readonly shared?: boolean;
  write(id: string, egress: StoredEgress): Promise<void>;
  read(id: string): Promise<StoredEgress | undefined>;
  ids(): Promise<string[]>;
  removeTemporary(): Promise<void>;
  remove(id: string): Promise<void>;
}

/** Ids are made by the controller (nanoid's alphabet); anything else is never turned into a path. */
const SAFE_ID = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * One JSON file per sandbox with egress in `<stateDir>/egress/` (folder 0700, files 0600, written
 * to a temporary file and renamed, so a crash leaves the old file or the new one): the policy, its
 * version and the brokered secrets with their real values, which the gateway needs again after a
 * controller restart because the placeholders live on in the sandbox's environment. Nothing in it
 * is ever mounted into a sandbox or logged.
 *
 * @example
 * const store = new EgressStore(stateDir);
 * await store.write(id, { policy, version: 1, secrets });
 * const again = await store.read(id);
 */
export class EgressStore implements EgressStoreLike {
  readonly #dir: string;

  constructor(stateDir: string) {
    this.#dir = path.join(stateDir, 'egress');
  }

  #file(id: string): string {
    if (!SAFE_ID.test(id)) throw new Error(`refusing an egress state file for the id ${JSON.stringify(id)}`);
    return path.join(this.#dir, `${id}.json`);
  }

  async write(id: string, egress: StoredEgress): Promise<void> {
    const file = this.#file(id);
    await mkdir(this.#dir, { recursive: true, mode: 0o700 });
    await chmod(this.#dir, 0o700);
    const temp = `${file}.${process.pid}.tmp`;
    await rm(temp, { force: true });
    await writeFile(temp, serializeStoredEgress(egress), { mode: 0o600, flag: 'wx' });
    await rename(temp, file);
  }

  /** A sandbox's stored egress; undefined when there is none or the file is not one this store wrote. */
  async read(id: string): Promise<StoredEgress | undefined> {
    if (!SAFE_ID.test(id)) return undefined;
    let text: string;
    try {
      text = await readFile(this.#file(id), 'utf8');
    } catch {
      return undefined;
    }
    return parseStoredEgress(text);
  }

  /** The ids that have a stored file. */
  async ids(): Promise<string[]> {
    const names = await readdir(this.#dir).catch(() => [] as string[]);
    return names.filter((n) => n.endsWith('.json')).map((n) => n.slice(0, -'.json'.length));
  }

  /** Removes temporary files a crash left between write and rename (only at start, before any write). */
  async removeTemporary(): Promise<void> {
    const names = await readdir(this.#dir).catch(() => [] as string[]);
    for (const name of names) if (/^[A-Za-z0-9_-]{1,64}\.json\.\d+\.tmp$/.test(name)) await rm(path.join(this.#dir, name), { force: true });
  }

  async remove(id: string): Promise<void> {
    if (!SAFE_ID.test(id)) return;
    await rm(this.#file(id), { force: true });
  }
}
