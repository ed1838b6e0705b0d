import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { CodedError, CreateVolumeRequest, VolumeName, issueText, type VolumeInfo } from '@warren/protocol';
import { z } from 'zod';
import type { ControllerConfig } from './config.js';
import { requireCapability, type SandboxProvider } from './provider.js';
import type { SandboxService } from './sandboxes.js';
import type { Owner } from './tenancy/owner.js';

/** The most volumes one tenant may keep unless its limits say otherwise (`maxVolumes`). */
export const MAX_VOLUMES_PER_TENANT = 64;

const VolumeRecord = z.object({
  id: z.string().regex(/^v[0-9a-f]{40}$/),
  name: z.string(),
  /** The key that made it; volumes made before tenants belong to this key's tenant. */
  ownerKeyId: z.string(),
  /** The tenant it belongs to (absent in records of before tenants: see {@link VolumeService.recover}). */
  tenant: z.string().optional(),
  createdAt: z.string(),
  labels: z.record(z.string(), z.string()),
  sizeMb: z.number(),
  quota: z.boolean(),
});
type VolumeRecord = z.infer<typeof VolumeRecord>;

/**
 * The storage id of a tenant's volume: a digest of the tenant and the name, so two tenants' volumes
 * of one name never meet, and the id is letters and digits whatever the name (it names host files).
 * (Volumes made before tenants keep the id they had, a digest of their key's id and the name.)
 */
export function volumeId(tenant: string, name: string): string {
  return `v${createHash('sha256').update(`tenant\0${tenant}\0${name}`).digest('hex').slice(0, 40)}`;
}

/**
 * Named volumes (docs/state.md#volumes): storage that outlives sandboxes, owned by a tenant,
 * mounted by any number of that tenant's sandboxes at once. The provider keeps the data (an ext4
 * image with a size limit each where the host gives quotas); this service keeps who owns which
 * name in `<stateDir>/volumes/meta/<id>.json` (written then renamed).
 *
 * @example
 * const volumes = new VolumeService({ sandboxes, provider, config });
 * await volumes.recover();
 * await volumes.create({ tenant: 'acme', keyId }, { name: 'pip-cache', sizeMb: 2048 });
 */
export class VolumeService {
  private readonly records = new Map<string, VolumeRecord>();
  private readonly dir: string;

  constructor(
    private readonly options: {
      sandboxes: SandboxService;
      provider: SandboxProvider;
      config: ControllerConfig;
      /** The tenant of a key id, for volumes made before tenants (they belong to their key's tenant). */
      tenantOfKey?: (keyId: string) => string | undefined;
      /** The most volumes a tenant may keep. */
      maxVolumes?: (tenant: string) => number;
    },
  ) {
    this.dir = path.join(options.config.stateDir, 'volumes', 'meta');
  }

  async recover(): Promise<number> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    for (const file of await readdir(this.dir)) {
      if (file.endsWith('.tmp')) {
        await rm(path.join(this.dir, file), { force: true });
        continue;
      }
      const parsed = VolumeRecord.safeParse(await readFile(path.join(this.dir, file), 'utf8').then(JSON.parse, () => undefined));
      if (parsed.success) {
        const record = parsed.data;
        record.tenant ??= this.options.tenantOfKey?.(record.ownerKeyId) ?? `key-${record.ownerKeyId}`;
        this.records.set(record.id, record);
      }
    }
    return this.records.size;
  }

  async create(owner: Owner | undefined, body: unknown): Promise<VolumeInfo> {
    const { tenant, keyId } = requireOwner(owner);
    const volumes = requireCapability(this.options.provider, 'volumes', 'create a named volume');
    const parsed = CreateVolumeRequest.safeParse(body ?? {});
    if (!parsed.success)
      throw new CodedError(
        'INVALID_PARAMS',
        `Invalid volume request: ${parsed.error.issues.map(issueText).join('; ')}. Send { "name": "<letters, digits, . _ ->", "sizeMb"?: <n> }.`,
        {
          field: parsed.error.issues[0]?.path.join('.') || 'body',
        },
      );
    const { name, labels } = parsed.data;
    const id = volumeId(tenant, name);
    if (this.find(tenant, name))
      throw new CodedError('ALREADY_EXISTS', `This tenant already has a volume named '${name}'; choose another name or delete that one.`, { field: 'name' });
    const maxVolumes = this.options.maxVolumes?.(tenant) ?? MAX_VOLUMES_PER_TENANT;
    if (this.mine(tenant).length >= maxVolumes)
      throw new CodedError('RESOURCE_EXHAUSTED', `Tenant '${tenant}' already keeps ${maxVolumes} volumes (its maxVolumes); delete one first.`, {
        limit: 'maxVolumes',
        max: maxVolumes,
      });
    const max = this.options.config.maxLimits.diskMb;
    const sizeMb = parsed.data.sizeMb ?? Math.min(this.options.config.limits.diskMb, max);
    if (sizeMb > max)
      throw new CodedError('INVALID_PARAMS', `sizeMb ${sizeMb} is above this controller's maximum of ${max} (maxLimits.diskMb); ask for at most ${max}.`, {
        field: 'sizeMb',
        max,
      });
    const { quota } = await volumes.create(id, sizeMb * 1024 * 1024);
    const record: VolumeRecord = { id, name, ownerKeyId: keyId, tenant, createdAt: new Date().toISOString(), labels: labels ?? {}, sizeMb, quota };
    try {
      const file = path.join(this.dir, `${id}.json`);
      await writeFile(`${file}.tmp`, JSON.stringify(record), { mode: 0o600 });
      await rename(`${file}.tmp`, file);
    } catch (err) {
      await volumes.remove(id).catch(() => undefined);
      throw err;
    }
    this.records.set(id, record);
    return this.describe(record);
  }

  async list(owner: Owner | undefined): Promise<VolumeInfo[]> {
    const mine = this.mine(requireOwner(owner).tenant).sort((a, b) => a.name.localeCompare(b.name));
    return Promise.all(mine.map((r) => this.describe(r)));
  }

  /** How many volumes a tenant keeps (for `GET /v1/tenant`). */
  count(tenant: string): number {
    return this.mine(tenant).length;
  }

  async get(owner: Owner | undefined, name: string): Promise<VolumeInfo> {
    return this.describe(this.require(requireOwner(owner).tenant, name));
  }

  /** Deletes a volume and its data; CONFLICT while a sandbox mounts it. */
  async remove(owner: Owner | undefined, name: string): Promise<void> {
    const record = this.require(requireOwner(owner).tenant, name);
    const users = this.mountedBy(record.id);
    if (users.length > 0)
      throw new CodedError('CONFLICT', `Volume '${name}' is mounted by ${users.length} sandbox(es) (${users.join(', ')}); kill them first.`, {
        sandboxes: users,
      });
    await rm(path.join(this.dir, `${record.id}.json`), { force: true });
    this.records.delete(record.id);
    await this.options.provider.volumes?.remove(record.id);
  }

  /** The storage ids of the tenant's volumes a create names, by name; VOLUME_NOT_FOUND for one the tenant does not have. */
  resolve(owner: Owner | undefined, names: readonly string[]): Map<string, string> {
    if (names.length === 0) return new Map();
    const { tenant } = requireOwner(owner);
    return new Map(names.map((name) => [name, this.require(tenant, name).id]));
  }

  private mine(tenant: string): VolumeRecord[] {
    return [...this.records.values()].filter((r) => r.tenant === tenant);
  }

  private find(tenant: string, name: string): VolumeRecord | undefined {
    return this.mine(tenant).find((r) => r.name === name);
  }

  /** A tenant's volume by name; another tenant's is VOLUME_NOT_FOUND exactly as one that does not exist. */
  private require(tenant: string, name: string): VolumeRecord {
    if (!VolumeName.safeParse(name).success) throw badVolumeName(name);
    const record = this.find(tenant, name);
    if (!record)
      throw new CodedError('VOLUME_NOT_FOUND', `No volume '${name}' of this tenant; create it with POST /v1/volumes (warren volume create ${name}).`, {
        volume: name,
      });
    return record;
  }

  private mountedBy(id: string): string[] {
    return this.options.sandboxes
      .list()
      .filter((r) => r.settings.volumes?.some((v) => v.id === id))
      .map((r) => r.id);
  }

  private async describe(record: VolumeRecord): Promise<VolumeInfo> {
    const used = await this.options.provider.volumes?.usage(record.id).catch(() => undefined);
    return {
      name: record.name,
      createdAt: record.createdAt,
      labels: record.labels,
      ...(record.quota ? { sizeMb: record.sizeMb } : {}),
      quota: record.quota,
      ...(used === undefined ? {} : { usedBytes: used }),
      sandboxes: this.mountedBy(record.id),
    };
  }
}

function requireOwner(owner: Owner | undefined): Owner {
  if (owner === undefined) throw new CodedError('FORBIDDEN', "Only an API key may use named volumes: they belong to its tenant, not to one sandbox's token.");
  return owner;
}

/**
 * The refusal of a volume name that is not one path-free word (INVALID_PARAMS, saying what a name may hold).
 *
 * @example
 * throw badVolumeName('../etc');
 */
export function badVolumeName(name: string): CodedError {
  return new CodedError(
    'INVALID_PARAMS',
    `'${name.slice(0, 80)}' is not a volume name: 1-63 letters, digits, . _ - starting with a letter or digit, never a path.`,
    {
      field: 'volume',
    },
  );
}
