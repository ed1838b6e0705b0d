import { FileKeyStorage, MemoryKeyStorage, type KeyStorage } from './key-storage.js';
import { TenantLimits } from './limits.js';
import { createHash, randomBytes } from 'node:crypto';
import path from 'node:path';
import { CodedError } from '@warren/protocol';
import { z } from 'zod';

/** What a key may be: an admin reaches every tenant and manages keys; a member reaches its own tenant only. */
export type Role = 'admin' | 'member';

/**
 * The rights a member key can be narrowed to. A key without a `scopes` list has every scope but
 * `network:bridge`; an admin key has all of them.
 */
export const SCOPES = {
  'sandboxes:create': 'Create sandboxes (from images, snapshots and the warm pool).',
  exec: 'Run commands, processes, terminals and code in its sandboxes.',
  'files:write': 'Write, move and delete files in its sandboxes.',
  lifecycle: 'Kill, pause, resume, hibernate and extend its sandboxes.',
  snapshots: 'Take, list, restore, fork and delete snapshots.',
  volumes: 'Create, list and delete named volumes.',
  images: 'Pull and build images.',
  'ports:public': 'Open a sandbox port to anyone without a credential.',
  'egress:open': "Give a sandbox egress mode 'open' (any host the operator's maxMode allows).",
  'network:bridge': "Put a sandbox on Docker's bridge network, past the egress gateway (needs allowBridgeNetwork).",
} as const;

export type Scope = keyof typeof SCOPES;
export const SCOPE_NAMES = Object.keys(SCOPES) as Scope[];

/** Scopes from a comma-separated label; unknown names are dropped (so a tampered label only narrows). */
export function parseScopes(text: string): Scope[] {
  return text.split(',').filter((s): s is Scope => Object.hasOwn(SCOPES, s));
}

/** The scopes of a member key that names none. */
export const DEFAULT_MEMBER_SCOPES: readonly Scope[] = SCOPE_NAMES.filter((s) => s !== 'network:bridge');

/** The tenant of the keys a deployment had before tenants: `WARREN_API_KEY`, `apiKeyHashes`, the generated key. */
export const DEFAULT_TENANT = 'default';

/**
 * A tenant's name: lowercase ASCII letters, digits and `-`, starting with a letter or digit, at
 * most 63 characters. No path characters and no look-alikes: `acme` and `аcme` (Cyrillic a) can
 * never both be tenants, since only the first is a name.
 */
export const TenantName = z.string().regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'lowercase letters, digits and -, at most 63, starting with a letter or digit');

/** Who a presented API key is. */
export interface Principal {
  /** The key's id: the first 16 hex digits of its SHA-256 digest when it was made. Never the secret. */
  keyId: string;
  tenant: string;
  role: Role;
  /** What it may do; every scope for an admin. */
  scopes: readonly Scope[];
  /** Epoch milliseconds after which the key is refused; absent: never. */
  expiresAt?: number | undefined;
}

/** A key as `/v1/keys` lists it: never its secret. */
export interface KeyInfo {
  id: string;
  name?: string | undefined;
  tenant: string;
  role: Role;
  scopes: Scope[];
  createdAt: string;
  expiresAt?: string | undefined;
  revokedAt?: string | undefined;
  /** Keys from the environment or the configuration file: admins that `/v1/keys` cannot change. */
  configured?: true;
}

/** What `POST /v1/keys` takes. */
export const CreateKeyRequest = z
  .object({
    tenant: TenantName,
    role: z.enum(['admin', 'member']).default('member'),
    name: z.string().max(128).optional(),
    scopes: z
      .array(z.enum(SCOPE_NAMES as [Scope, ...Scope[]]))
      .max(SCOPE_NAMES.length)
      .optional(),
    /** Seconds from now until the key is refused; absent: never. */
    expiresInSeconds: z
      .number()
      .int()
      .positive()
      .max(10 * 365 * 86_400)
      .optional(),
  })
  .strict();
export type CreateKeyRequest = z.input<typeof CreateKeyRequest>;

/** One stored key: its digest, never its secret. */
const StoredKeySchema = z.object({
  id: z.string().regex(/^[0-9a-f]{16}$/),
  digest: z.string().regex(/^[0-9a-f]{64}$/),
  name: z.string().optional(),
  tenant: TenantName,
  role: z.enum(['admin', 'member']),
  scopes: z.array(z.enum(SCOPE_NAMES as [Scope, ...Scope[]])).optional(),
  createdAt: z.string(),
  expiresAt: z.string().optional(),
  revokedAt: z.string().optional(),
});
type StoredKey = z.infer<typeof StoredKeySchema>;

/** The answer for a key id no key has. */
export function keyNotFound(keyId: string): CodedError {
  return new CodedError('KEY_NOT_FOUND', `No key '${keyId.slice(0, 64)}'. List them with GET /v1/keys.`, { keyId: keyId.slice(0, 64) });
}

/** The file `/v1/keys` keeps its keys in, in the state folder (mode 0600). */
export const KEYS_FILE = 'keys.json';

/** Why a credential stopped working, for the listeners that end what it opened: a key revoked or rotated, or one derived token revoked. */
export type KeyEnd = 'revoked' | 'rotated' | 'token-revoked';

/** What the keys made through `/v1/keys` are kept as: one JSON document. */
interface KeyDocument {
  keys: StoredKey[];
  /** Derived tokens revoked one by one: token id to when it would have expired anyway. */
  revokedTokens: Record<string, number>;
  /** Limits an admin set per tenant (`POST /v1/tenants/{tenant}/limits`), over the configured ones. */
  tenantLimits: Record<string, TenantLimits>;
}

/**
 * Every API key the controller accepts and who each one is. Keys from the environment and the
 * configuration file are admins of the {@link DEFAULT_TENANT}; keys made through `/v1/keys` are
 * kept in a {@link KeyStorage} as SHA-256 digests, so a stolen state folder holds no usable key. A
 * lookup is one hash and one map read of the last document seen; every change is written through
 * the storage first and then taken up, and replicas sharing a storage take up each other's changes
 * by {@link KeyStore.refresh}. A key revoked or rotated (here or on another replica) is refused from
 * the next request, and the listeners end what it already opened (WebSockets, console sessions).
 */
export class KeyStore {
  private readonly configured = new Map<string, Principal>();
  private document: KeyDocument = { keys: [], revokedTokens: {}, tenantLimits: {} };
  private readonly stored = new Map<string, StoredKey>();
  /** Digest (hex) to key id, for every key that authenticates now. */
  private readonly byDigest = new Map<string, string>();
  private readonly listeners = new Set<(keyId: string, why: KeyEnd) => void>();
  private poll: NodeJS.Timeout | undefined;

  private constructor(
    private storage: KeyStorage,
    private readonly now: () => number,
  ) {}

  /**
   * The keys of a controller: the configured admins' digests, and the stored keys of `stateDir`
   * (none when it is undefined: keys made then live in memory only).
   */
  static async load(configuredDigests: readonly string[], stateDir: string | undefined, now: () => number = Date.now): Promise<KeyStore> {
    const storage = stateDir === undefined ? new MemoryKeyStorage() : new FileKeyStorage(path.join(stateDir, KEYS_FILE));
    const store = new KeyStore(storage, now);
    for (const hex of configuredDigests) store.addConfigured(hex);
    await store.refresh();
    return store;
  }

  /** For tests and embedding: configured admins only, nothing written. */
  static inMemory(configuredDigests: readonly string[], now: () => number = Date.now): KeyStore {
    const store = new KeyStore(new MemoryKeyStorage(), now);
    for (const hex of configuredDigests) store.addConfigured(hex);
    return store;
  }

  /**
   * Moves the keys to a storage other replicas share: what this store holds and the shared one
   * lacks is added to it, then the shared document is the one, read again every `pollMs` (so a key
   * made, rotated or revoked on any replica holds on this one within that time).
   */
  async share(storage: KeyStorage, pollMs: number): Promise<void> {
    const mine = this.document;
    await storage.update((current) => serialize(mergeDocuments(parseDocument(current), mine)));
    this.storage = storage;
    await this.refresh();
    this.poll = setInterval(() => void this.refresh().catch(() => undefined), pollMs);
    this.poll.unref();
  }

  /** Stops reading a shared storage. */
  close(): void {
    clearInterval(this.poll);
  }

  /** Reads the storage again and takes up what changed (another replica's keys, revocations and limits). */
  async refresh(): Promise<void> {
    this.apply(parseDocument(await this.storage.read()));
  }

  private addConfigured(hex: string): void {
    const keyId = hex.slice(0, 16);
    this.configured.set(keyId, { keyId, tenant: DEFAULT_TENANT, role: 'admin', scopes: SCOPE_NAMES });
    this.byDigest.set(hex, keyId);
  }

  /** Makes `document` the one this store answers from, and tells the listeners what it ended. */
  private apply(document: KeyDocument): void {
    const before = new Map(this.stored);
    const revokedBefore = new Set(Object.keys(this.document.revokedTokens));
    this.document = document;
    for (const key of before.values()) if (this.byDigest.get(key.digest) === key.id) this.byDigest.delete(key.digest);
    this.stored.clear();
    for (const key of document.keys) {
      this.stored.set(key.id, key);
      if (key.revokedAt === undefined && !this.configured.has(key.id)) this.byDigest.set(key.digest, key.id);
    }
    for (const [id, old] of before) {
      const now = this.stored.get(id);
      if (old.revokedAt !== undefined || !now) continue;
      if (now.revokedAt !== undefined) this.notify(id, 'revoked');
      else if (now.digest !== old.digest) this.notify(id, 'rotated');
    }
    for (const tokenId of Object.keys(document.revokedTokens)) if (!revokedBefore.has(tokenId)) this.notify(tokenId, 'token-revoked');
  }

  /** Writes a change through the storage (on the newest document there) and takes up the result. */
  private async change(edit: (document: KeyDocument) => void): Promise<void> {
    let written: KeyDocument | undefined;
    await this.storage.update((current) => {
      const document = parseDocument(current);
      edit(document);
      written = document;
      return serialize(document);
    });
    if (written) this.apply(written);
  }

  /** Who `presented` is, or undefined when it is no key, or a revoked or expired one. */
  principal(presented: string): Principal | undefined {
    const keyId = this.byDigest.get(digestHex(presented));
    return keyId === undefined ? undefined : this.byId(keyId);
  }

  /** The principal of a key id while the key is valid (not revoked, not expired): tokens a key minted live only as long. */
  byId(keyId: string): Principal | undefined {
    const configured = this.configured.get(keyId);
    if (configured) return configured;
    const key = this.stored.get(keyId);
    if (!key || key.revokedAt !== undefined) return undefined;
    const expiresAt = key.expiresAt === undefined ? undefined : Date.parse(key.expiresAt);
    if (expiresAt !== undefined && expiresAt <= this.now()) return undefined;
    return {
      keyId,
      tenant: key.tenant,
      role: key.role,
      scopes: key.role === 'admin' ? SCOPE_NAMES : (key.scopes ?? DEFAULT_MEMBER_SCOPES),
      expiresAt,
    };
  }

  /**
   * Whether a key id names a key made through `/v1/keys` that is revoked or expired: what it
   * minted (derived tokens, its sandboxes' own tokens, console sessions) ends with it. A key id
   * this store does not hold (a configured key of before, or none) ends nothing.
   */
  ended(keyId: string): boolean {
    return this.stored.has(keyId) && this.byId(keyId) === undefined;
  }

  /** Whether a derived token was revoked by its id (`POST /v1/sandboxes/{id}/tokens/revoke`). */
  tokenRevoked(tokenId: string): boolean {
    return Object.hasOwn(this.document.revokedTokens, tokenId);
  }

  /**
   * The id of a sandbox's own token as it is now: `wst:<sandbox>:<generation>`, the generation
   * counting the rotations so far (each rotation revokes the token of the one before).
   */
  sandboxTokenId(sandboxId: string): string {
    let generation = 0;
    while (this.tokenRevoked(`wst:${sandboxId}:${generation}`)) generation++;
    return `wst:${sandboxId}:${generation}`;
  }

  /** Revokes one derived token by its id until `until` (its own expiry, or forever); revocations past their end are dropped. */
  async revokeToken(tokenId: string, until: number | undefined): Promise<void> {
    const now = this.now();
    await this.change((document) => {
      for (const [id, end] of Object.entries(document.revokedTokens)) if (end <= now) delete document.revokedTokens[id];
      document.revokedTokens[tokenId] = until ?? Number.MAX_SAFE_INTEGER;
    });
  }

  /** The tenant of a key id, valid or not (what its objects of before belong to), or undefined for an unknown id. */
  tenantOf(keyId: string): string | undefined {
    return this.configured.get(keyId)?.tenant ?? this.stored.get(keyId)?.tenant;
  }

  /** Makes a key; the secret is in the answer only, never stored. */
  async create(request: unknown): Promise<{ key: string; info: KeyInfo }> {
    return this.add(newSecret(), request);
  }

  /**
   * For embedding and tests: keeps a key whose secret was made elsewhere (a secret manager), as
   * {@link create} keeps the ones it makes: its digest only.
   */
  async add(secret: string, request: unknown): Promise<{ key: string; info: KeyInfo }> {
    const parsed = CreateKeyRequest.safeParse(request ?? {});
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw new CodedError(
        'INVALID_PARAMS',
        `Invalid key: ${issue.path.join('.') || 'body'}: ${issue.message}. Fields: tenant, role, name, scopes, expiresInSeconds.`,
        {
          field: issue.path.join('.'),
        },
      );
    }
    const { tenant, role, name, scopes, expiresInSeconds } = parsed.data;
    const hex = digestHex(secret);
    const key: StoredKey = {
      id: hex.slice(0, 16),
      digest: hex,
      tenant,
      role,
      createdAt: new Date(this.now()).toISOString(),
      ...(name === undefined ? {} : { name }),
      ...(scopes === undefined || role === 'admin' ? {} : { scopes: [...new Set(scopes)] }),
      ...(expiresInSeconds === undefined ? {} : { expiresAt: new Date(this.now() + expiresInSeconds * 1000).toISOString() }),
    };
    await this.change((document) => void document.keys.push(key));
    return { key: secret, info: describeStored(key) };
  }

  /**
   * A new secret for a key: the old one stops working at once; the key keeps its id, tenant,
   * role and scopes, so what it owns stays its own. Tokens minted with the old secret are ended.
   */
  async rotate(keyId: string): Promise<{ key: string; info: KeyInfo }> {
    this.requireStored(keyId);
    const secret = newSecret();
    let rotated: StoredKey | undefined;
    await this.change((document) => {
      const key = document.keys.find((k) => k.id === keyId);
      if (!key) throw keyNotFound(keyId);
      if (key.revokedAt !== undefined) throw new CodedError('INVALID_PARAMS', `Key '${keyId}' is revoked; create a new key instead.`, { keyId });
      key.digest = digestHex(secret);
      rotated = key;
    });
    return { key: secret, info: describeStored(rotated!) };
  }

  /** Ends a key for good: the next request with it is refused, and what it opened is closed. */
  async revoke(keyId: string): Promise<KeyInfo> {
    this.requireStored(keyId);
    let revoked: StoredKey | undefined;
    await this.change((document) => {
      const key = document.keys.find((k) => k.id === keyId);
      if (!key) throw keyNotFound(keyId);
      key.revokedAt ??= new Date(this.now()).toISOString();
      revoked = key;
    });
    return describeStored(revoked!);
  }

  /** Every key (of one tenant when given), configured ones first; never a secret. */
  list(tenant?: string): KeyInfo[] {
    const configured: KeyInfo[] = [...this.configured.values()].map((p) => ({
      id: p.keyId,
      tenant: p.tenant,
      role: p.role,
      scopes: [...p.scopes],
      createdAt: new Date(0).toISOString(),
      configured: true,
    }));
    const all = [...configured, ...[...this.stored.values()].map(describeStored)];
    return tenant === undefined ? all : all.filter((k) => k.tenant === tenant);
  }

  /** One key's description, or undefined. */
  info(keyId: string): KeyInfo | undefined {
    return this.list().find((k) => k.id === keyId);
  }

  /** The limits an admin set for a tenant, if any. */
  limitsOf(tenant: string): TenantLimits | undefined {
    return Object.hasOwn(this.document.tenantLimits, tenant) ? this.document.tenantLimits[tenant] : undefined;
  }

  /** Sets (replaces) the limits of a tenant an admin chose; kept with the keys. */
  async setLimits(tenant: string, limits: TenantLimits): Promise<void> {
    await this.change((document) => void (document.tenantLimits[tenant] = limits));
  }

  /** Calls `listener` with the key's id when a key is revoked or rotated, and with the token's id when a derived token is; returns what stops it. */
  onEnd(listener: (keyId: string, why: KeyEnd) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private notify(keyId: string, why: KeyEnd): void {
    for (const listener of this.listeners) listener(keyId, why);
  }

  private requireStored(keyId: string): StoredKey {
    const key = this.stored.get(keyId);
    if (key) return key;
    if (this.configured.has(keyId))
      throw new CodedError(
        'FORBIDDEN',
        `Key '${keyId}' comes from the controller's environment or configuration file; change it there (WARREN_API_KEY, apiKeyHashes) and restart.`,
        { keyId },
      );
    throw keyNotFound(keyId);
  }
}

/** A stored document, read as untrusted: what is not of the right shape is left out. */
function parseDocument(text: string | undefined): KeyDocument {
  const document: KeyDocument = { keys: [], revokedTokens: {}, tenantLimits: {} };
  if (text === undefined || text.trim() === '') return document;
  const raw = JSON.parse(text) as { keys?: unknown; revokedTokens?: unknown; tenantLimits?: unknown };
  for (const key of Array.isArray(raw.keys) ? raw.keys : []) {
    const parsed = StoredKeySchema.safeParse(key);
    if (parsed.success) document.keys.push(parsed.data);
  }
  for (const [id, until] of Object.entries((raw.revokedTokens ?? {}) as Record<string, unknown>))
    if (typeof until === 'number') document.revokedTokens[id] = until;
  for (const [tenant, limits] of Object.entries((raw.tenantLimits ?? {}) as Record<string, unknown>)) {
    const parsed = TenantLimits.safeParse(limits);
    if (parsed.success) document.tenantLimits[tenant] = parsed.data;
  }
  return document;
}

function serialize(document: KeyDocument): string {
  return `${JSON.stringify(document, null, 2)}\n`;
}

/** `shared` with what `mine` has and it lacks (keys by id, token revocations, tenants' limits). */
function mergeDocuments(shared: KeyDocument, mine: KeyDocument): KeyDocument {
  const ids = new Set(shared.keys.map((k) => k.id));
  return {
    keys: [...shared.keys, ...mine.keys.filter((k) => !ids.has(k.id))],
    revokedTokens: { ...mine.revokedTokens, ...shared.revokedTokens },
    tenantLimits: { ...mine.tenantLimits, ...shared.tenantLimits },
  };
}

function describeStored(key: StoredKey): KeyInfo {
  return {
    id: key.id,
    ...(key.name === undefined ? {} : { name: key.name }),
    tenant: key.tenant,
    role: key.role,
    scopes: key.role === 'admin' ? [...SCOPE_NAMES] : [...(key.scopes ?? DEFAULT_MEMBER_SCOPES)],
    createdAt: key.createdAt,
    ...(key.expiresAt === undefined ? {} : { expiresAt: key.expiresAt }),
    ...(key.revokedAt === undefined ? {} : { revokedAt: key.revokedAt }),
  };
}

function newSecret(): string {
  return `wk_${randomBytes(24).toString('base64url')}`;
}

function digestHex(value: string): string {
  return createHash('sha256').update(value).digest('hex');
}

/** An admin of the default tenant with every scope: what a configured key is (for tests and embedding). */
export const DEFAULT_ADMIN: Principal = { keyId: '0000000000000000', tenant: DEFAULT_TENANT, role: 'admin', scopes: SCOPE_NAMES };
