import { realpath, stat } from 'node:fs/promises';
import { customAlphabet } from 'nanoid';
import {
  CodedError,
  encodeGrant,
  GRANT_HEADER,
  type ConnectionGrant,
  type CreateSandboxResponse,
  type EgressPolicy,
  type SandboxInfo,
  type SandboxMetrics,
  type SandboxSettings,
} from '@warren/protocol';
import { probeAgent } from './agent-link.js';
import { systemClock, type Clock } from './clock.js';
import type { ControllerConfig } from './config.js';
import type { Credentials } from './credentials.js';
import { effectiveEgressPolicy } from './egress/decide.js';
import type { SandboxEgress } from './egress/sandbox-egress.js';
import { DEFAULT_POLICY } from './grants.js';
import { FrozenMarks, IdleFreezer } from './idle-freezer.js';
import { ImageService } from './image-service.js';
import { LABELS, sandboxLabels } from './labels.js';
import type { Metrics } from './metrics.js';
import type { DaemonEndpoint, ProvidedSandbox, SandboxProvider, SandboxSpec, SharedRecords, SharedState } from './provider.js';
import { Slots, type WaitLimits } from './limiter.js';
import { Reaper } from './reaper.js';
import { UsageHistory } from './usage-history.js';
import { RecordStore, type StoredRecord } from './record-store.js';
import { isBelow, planSandbox, type SandboxPlan } from './sandbox-plan.js';
import { describe, recordFromLabels, SandboxTable, toState, type ListFilter, type SandboxRecord } from './sandbox-table.js';
import { RestartSupervisor } from './supervisor.js';

export type { ListFilter, SandboxRecord } from './sandbox-table.js';

// 24 characters of a 62-letter alphabet: 142 bits of randomness, safe in URLs and container names.
export const newId = customAlphabet('0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ', 24);

/** Where the warm pool plugs into creates: it may hand over a ready sandbox for a plan. */
export interface PoolSource {
  take(plan: SandboxPlan): { agentId: string; containerId: string; image: string; settings: SandboxSettings } | undefined;
  /** True when a member made from the pool's template would serve `plan`. */
  matches(plan: SandboxPlan): boolean;
  readonly readyCount: number;
}

export interface SandboxServiceOptions {
  provider: SandboxProvider;
  credentials: Credentials;
  config: ControllerConfig;
  metrics?: Metrics | undefined;
  clock?: Clock | undefined;
  /** Told of each restart after a sandbox died: `error` null when it is back, else why an attempt failed. */
  onRestart?: ((id: string, error: string | null) => void) | undefined;
  /** Makes the warm pool for this service, when there is one. */
  pool?: ((service: SandboxService) => PoolSource) | undefined;
  /** Pulls the images creates name when the engine lacks them; one over `provider` and `config.images` by default. */
  images?: ImageService | undefined;
  /**
   * A real call to a daemon (`hello` + `system.info`), with the upgrade's extra headers (a grant);
   * unit tests with a fake provider replace it.
   */
  probe?: ((endpoint: DaemonEndpoint, secret: string, timeoutMs: number, headers?: Record<string, string>) => Promise<unknown>) | undefined;
  /** Connects sandboxes with an egress policy or secrets to the egress gateway; absent, such creates are refused. */
  egress?: SandboxEgress | undefined;
  /** Told of an idle freeze or thaw that failed. */
  onFreezeError?: ((id: string, doing: 'freeze' | 'thaw', error: unknown) => void) | undefined;
}

/** The most ports one sandbox may have open to anyone at once. */
const MAX_PUBLIC_PORTS = 16;

/**
 * The sandbox service: creates, finds, pauses, kills sandboxes, written once against
 * {@link SandboxProvider}. It composes one part per job: the {@link SandboxTable} of records, the
 * {@link RecordStore} of moved expiries and pool claims, the {@link RestartSupervisor} and the
 * {@link Reaper}. Identity, owner, expiry and settings are in the sandbox's labels;
 * {@link SandboxService.recover} rebuilds the table from those and the stored records after a
 * restart.
 *
 * @example
 * const sandboxes = new SandboxService({ provider, credentials, config });
 * await sandboxes.recover();
 * const created = await sandboxes.create({ image: 'warren/sandbox:latest' });
 */
export class SandboxService {
  readonly provider: SandboxProvider;
  readonly credentials: Credentials;
  readonly config: ControllerConfig;
  readonly table = new SandboxTable();
  readonly supervisor: RestartSupervisor;
  readonly reaper: Reaper;
  /** Freezes idle sandboxes and thaws them on use (`freezeAfterIdleSeconds`). */
  readonly freezer: IdleFreezer;
  readonly pool: PoolSource | undefined;
  readonly images: ImageService;
  private readonly store: Pick<SharedRecords, 'readAll' | 'write' | 'remove'>;
  /** The backend's own records, shared with other controller replicas, when it keeps them. */
  private readonly shared: SharedRecords | undefined;
  /** What the backend shares with other replicas besides records (egress, the sandbox count), when it does. */
  readonly sharedState: SharedState | undefined;
  /** A sync with the backend's sandboxes under way (see {@link SandboxService.ensureKnown}). */
  private syncing: Promise<void> | undefined;
  private readonly frozenMarks: FrozenMarks;
  private readonly metrics: Metrics | undefined;
  private readonly clock: Clock;
  private readonly probe: NonNullable<SandboxServiceOptions['probe']>;
  /** The egress gateway's wiring, when this controller runs one. */
  readonly egress: SandboxEgress | undefined;
  /** Creates under way or waiting for a slot (they count towards maxSandboxes). */
  private creating = 0;
  /** The last samples of each sandbox's use (the CPU share between two samples, the short history). */
  readonly usageHistory: UsageHistory;
  /** At most `maxConcurrentCreates` cold creates at once; more wait in a bounded queue. */
  private readonly createSlots: Slots;
  private readonly createQueueLimits: WaitLimits;
  private runtimeNames: string[] = ['runc'];
  private networklessRuntimes: string[] = [];
  private noDiskQuota: string | undefined;

  constructor(options: SandboxServiceOptions) {
    this.provider = options.provider;
    this.credentials = options.credentials;
    this.config = options.config;
    this.metrics = options.metrics;
    this.clock = options.clock ?? systemClock;
    this.probe = options.probe ?? ((endpoint, secret, timeoutMs, headers) => probeAgent(endpoint, secret, timeoutMs, headers));
    this.egress = options.egress;
    this.images = options.images ?? new ImageService({ provider: this.provider, settings: options.config.images });
    this.shared = options.provider.sharedRecords;
    this.sharedState = options.provider.sharedState;
    this.store = this.shared ?? new RecordStore(options.config.stateDir);
    this.frozenMarks = new FrozenMarks(options.config.stateDir);
    this.usageHistory = new UsageHistory(options.config.usage.historySamples);
    this.createSlots = new Slots(options.config.maxConcurrentCreates);
    const { maxQueuedCreates, createQueueTimeoutMs } = options.config;
    this.createQueueLimits = {
      maxWaiting: maxQueuedCreates,
      timeoutMs: createQueueTimeoutMs,
      refuse: (why) =>
        new CodedError(
          'RESOURCE_EXHAUSTED',
          why === 'queue-full'
            ? `${maxQueuedCreates} creates are already waiting for one of this controller's ${options.config.maxConcurrentCreates} create slots (maxQueuedCreates); retry after a few seconds.`
            : `This create waited ${createQueueTimeoutMs} ms for one of this controller's ${options.config.maxConcurrentCreates} create slots (maxConcurrentCreates) and gave up; retry after a few seconds.`,
          { retryAfterSeconds: Math.max(1, Math.ceil(createQueueTimeoutMs / 10_000)) },
        ),
    };
    this.supervisor = new RestartSupervisor({
      provider: this.provider,
      table: this.table,
      clock: this.clock,
      bringBack: (record) => this.bringBack(record),
      onRestart: options.onRestart,
    });
    this.reaper = new Reaper({
      provider: this.provider,
      table: this.table,
      supervisor: this.supervisor,
      clock: this.clock,
      orphanGraceSeconds: options.config.orphanGraceSeconds,
      isMine: (labels) => this.isMine(labels),
      kill: (id) => this.reap(id),
    });
    this.freezer = new IdleFreezer({
      idleSeconds: options.config.freezeAfterIdleSeconds,
      table: this.table,
      provider: this.provider,
      clock: this.clock,
      metrics: this.metrics,
      busy: (record) => (this.egress?.has(record.agentId) ? this.egress.openConnections(record.agentId) > 0 : false),
      onError: options.onFreezeError,
      marks: this.frozenMarks,
    });
    this.pool = options.pool?.(this);
  }

  /** How the relay reaches a sandbox's daemon, by public id. */
  daemonEndpoint(id: string): DaemonEndpoint {
    return this.provider.daemon(this.table.require(id).agentId);
  }

  /** The secret that opens a sandbox's daemon, by public id. */
  agentSecret(id: string): string {
    return this.credentials.agentSecret(this.table.require(id).agentId);
  }

  /** Runtimes the backend offers; read at {@link SandboxService.recover}. */
  get runtimes(): readonly string[] {
    return this.runtimeNames;
  }

  /** True while the backend does not answer (connections are told to retry). */
  get engineAway(): boolean {
    return this.supervisor.engineAway;
  }

  /**
   * Rebuilds the table from this controller's sandboxes (owner label = its instance id) and the
   * stored records. Unclaimed warm-pool members are returned for the pool to replace; sandboxes of
   * other controllers are left to the reaper.
   */
  async recover(): Promise<{ recovered: number; poolMembers: { agentId: string; containerId: string; labels: Record<string, string> }[] }> {
    const runtimes = await this.provider.runtimes();
    this.runtimeNames = runtimes.map((r) => r.name);
    this.networklessRuntimes = runtimes.filter((r) => r.args.includes('--network=none')).map((r) => r.name);
    const { diskQuota } = await this.provider.isolation();
    this.noDiskQuota = diskQuota.quota ? undefined : (diskQuota.reason ?? 'no quota');
    const stored = await this.store.readAll();
    const byAgent = new Map([...stored.values()].map((s) => [s.agentId, s]));
    const poolMembers: { agentId: string; containerId: string; labels: Record<string, string> }[] = [];
    for (const sandbox of await this.provider.list()) {
      const agentId = sandbox.labels[LABELS.sandbox];
      if (!agentId || !this.isMine(sandbox.labels)) continue;
      const claim = byAgent.get(agentId);
      if (sandbox.labels[LABELS.pool] && !claim) {
        poolMembers.push({ agentId, containerId: sandbox.handle, labels: sandbox.labels });
        continue;
      }
      this.table.set(recordOf(agentId, sandbox, claim));
    }
    // A paused sandbox that the freezer had frozen (its mark says so) is running for the API again, and its next call thaws it.
    const marked = await this.frozenMarks.list();
    for (const record of this.table.list()) {
      if (!marked.delete(record.containerId)) continue;
      if (record.state === 'paused') {
        record.state = 'running';
        record.frozen = true;
      } else await this.frozenMarks.clear(record.containerId);
    }
    for (const handle of marked) await this.frozenMarks.clear(handle);
    // Stored records whose sandbox is gone belong to sandboxes killed while the controller was down.
    for (const [id, s] of stored) if (!this.table.has(id) && !poolMembers.some((m) => m.agentId === s.agentId)) await this.store.remove(id);
    await this.recoverEgress();
    return { recovered: this.table.size, poolMembers };
  }

  /**
   * Gives the recovered sandboxes their egress again: the stored policy, version and brokered
   * secrets go back to the gateway before this returns, and the relay of each running sandbox is
   * opened again in the background (retried for a few seconds, so a wedged daemon cannot hold up
   * the controller's start); a paused one gets it on resume, a stopped one when the supervisor
   * starts it. Until its relay is open a sandbox has no way out (egress fails closed). Stored
   * egress of sandboxes that are gone is deleted.
   */
  private async recoverEgress(): Promise<void> {
    const egress = this.egress;
    if (!egress) return;
    const records = this.list();
    await egress.forgetStoredExcept(new Set(records.map((r) => r.agentId)));
    // Shared by replicas: another one may serve these relays now; the follower takes over those none serves.
    if (this.sharedState) return void this.followSharedEgress();
    for (const record of records) {
      if (!(await egress.restore(record.agentId)) || record.state !== 'running') continue;
      // Logged by connectWithRetry when it gives up.
      void egress.connectWithRetry(record.agentId, this.provider.daemon(record.agentId), this.credentials.agentSecret(record.agentId)).catch(() => undefined);
    }
  }

  /**
   * Makes sure the table knows `id` where the backend shares records with other controller
   * replicas: a sandbox another replica created (or claimed from the pool) since this one last
   * looked is adopted from the backend. Without shared records it does nothing.
   */
  async ensureKnown(id: string): Promise<void> {
    if (this.shared && !this.table.has(id)) await this.sync();
  }

  /**
   * Brings the table in line with the backend's sandboxes and shared records: adopts the
   * sandboxes of other replicas and takes up expiries, labels and ports they moved. One at a time;
   * callers during a sync share it.
   */
  private sync(): Promise<void> {
    const shared = this.shared;
    if (!shared) return Promise.resolve();
    this.syncing ??= (async () => {
      try {
        const [sandboxes, stored] = await Promise.all([this.provider.list(), shared.readAll()]);
        const byAgent = new Map([...stored.values()].map((r) => [r.agentId, r]));
        for (const sandbox of sandboxes) {
          const agentId = sandbox.labels[LABELS.sandbox];
          if (!agentId || !this.isMine(sandbox.labels)) continue;
          const claim = byAgent.get(agentId);
          if (sandbox.labels[LABELS.pool] && !claim) continue;
          const known = this.table.byHandle(sandbox.handle);
          if (!known) this.table.set(recordOf(agentId, sandbox, claim));
          else if (claim) applyClaim(known, claim, sandbox.labels);
        }
      } finally {
        this.syncing = undefined;
      }
    })();
    return this.syncing;
  }

  /** Takes up what another replica stored for one sandbox (a moved expiry, public ports). */
  private async refreshShared(record: SandboxRecord): Promise<void> {
    const claim = await this.shared?.read(record.agentId);
    if (claim && claim.id === record.id) applyClaim(record, claim, undefined);
  }

  /**
   * The reaper's kill: where other replicas may have moved the expiry, the shared record is read
   * first and a sandbox that is not expired after all is left (refused with CONFLICT, so the reaper
   * does not count it).
   */
  private async reap(id: string): Promise<void> {
    const record = this.table.find(id);
    if (record && this.shared && record.state !== 'gone') {
      await this.refreshShared(record);
      if (record.expiresAt.getTime() > this.clock.now())
        throw new CodedError('CONFLICT', `Sandbox '${id}' had its expiry moved by another controller replica.`);
    }
    // A sandbox the backend lost (its node went away): calls to it say so after it is gone.
    const lost = record?.state === 'gone' ? this.provider.lostReason?.(record.containerId) : undefined;
    await this.kill(id);
    if (lost !== undefined) this.table.markLost(id, lost);
  }

  /**
   * A ready warm-pool member for a plan: this controller's own first, then, where records are
   * shared, any replica's unclaimed member of the same settings. With shared records each is claimed
   * by a conditional write, so two replicas never hand out one member; a member lost to another
   * replica is skipped. Returns the claimed record.
   */
  private async claimPooled(plan: SandboxPlan): Promise<SandboxRecord | undefined> {
    const recordFor = (member: { agentId: string; containerId: string; image: string; settings: SandboxSettings }): SandboxRecord => {
      const createdAt = new Date(this.clock.now());
      const record: SandboxRecord = {
        id: newId(),
        agentId: member.agentId,
        containerId: member.containerId,
        image: member.image,
        createdAt,
        expiresAt: new Date(createdAt.getTime() + plan.settings.ttlSeconds * 1000),
        labels: plan.labels,
        settings: { ...member.settings, ttlSeconds: plan.settings.ttlSeconds },
        state: 'running',
        pooled: true,
      };
      if (plan.policy !== undefined) record.policy = plan.policy;
      return record;
    };
    for (let member = this.pool?.take(plan); member; member = this.pool?.take(plan)) {
      const record = recordFor(member);
      if (!this.shared) {
        await this.storeRecord(record);
        return record;
      }
      if (await this.shared.claim(member.containerId, storedRecord(record))) return record;
    }
    // The request must fit the pool's template (no env of its own, the default settings), and the
    // member must have been made from the same template by whichever replica made it.
    if (!this.shared || !this.pool?.matches(plan)) return undefined;
    for (const other of await this.shared.unclaimed()) {
      if (this.table.byHandle(other.handle) || !this.isMine(other.labels)) continue;
      const { image, settings } = recordFromLabels(other.agentId, other.handle, other.labels, 'running');
      if (image !== plan.image || !this.pool.matches({ ...plan, image, settings: { ...settings, ttlSeconds: plan.settings.ttlSeconds } })) continue;
      const record = recordFor({ agentId: other.agentId, containerId: other.handle, image, settings });
      if (await this.shared.claim(other.handle, storedRecord(record))) return record;
    }
    return undefined;
  }

  /** True when labels say this controller made the sandbox (or one from before owner labels existed). */
  isMine(labels: Record<string, string>): boolean {
    const owner = labels[LABELS.owner];
    return owner === undefined || owner === this.credentials.instanceId;
  }

  private async storeRecord(record: SandboxRecord): Promise<void> {
    await this.store.write(storedRecord(record));
  }

  /** Checks a create request against this controller's rules and fills in the defaults. */
  plan(body: unknown): SandboxPlan {
    const uid = process.getuid?.();
    return planSandbox(body, {
      config: this.config,
      runtimes: this.runtimeNames,
      networklessRuntimes: this.networklessRuntimes,
      reservedUid: uid === 0 ? undefined : uid,
      noDiskQuota: this.noDiskQuota,
    });
  }

  /**
   * Creates a sandbox and answers once its daemon has answered a real call: from the warm pool
   * when the request matches its settings, cold otherwise. An image the engine lacks is pulled
   * first (see {@link ImageService.ensure}); the create waits for the pull, and concurrent
   * creates of the same image share it.
   */
  async create(
    body: unknown,
    extras: { restore?: SandboxSpec['restore']; volumeIds?: Map<string, string>; relay?: boolean } = {},
  ): Promise<CreateSandboxResponse> {
    const { restore } = extras;
    const started = performance.now();
    if (restore === undefined && body !== null && typeof body === 'object' && Object.hasOwn(body, 'snapshot'))
      throw new CodedError(
        'INVALID_PARAMS',
        "A create from a snapshot goes through POST /v1/sandboxes with the API key that took it ('snapshot': its id or name).",
        {
          field: 'snapshot',
        },
      );
    const plan = this.plan(body);
    if (restore !== undefined) plan.restore = restore;
    if (extras.relay === true) plan.relay = true;
    for (const volume of plan.settings.volumes ?? []) {
      const id = extras.volumeIds?.get(volume.name);
      if (id === undefined)
        throw new CodedError(
          'VOLUME_NOT_FOUND',
          `No volume '${volume.name}' of this API key; create it first (POST /v1/volumes), with the key that creates the sandbox.`,
          {
            volume: volume.name,
          },
        );
      volume.id = id;
    }
    await this.checkMountsOnHost(plan);
    // With state shared by several replicas the limit is the cluster's: every replica's sandboxes count.
    // (Checked again exactly once the pod exists: see startContainer.)
    if (this.sharedState ? (await this.sharedState.countSandboxes()) >= this.config.maxSandboxes : this.table.size + this.creating >= this.config.maxSandboxes)
      throw this.tooMany();
    const withEgress = usesEgress(plan);
    if (withEgress && !this.egress)
      throw new CodedError('INVALID_PARAMS', 'This controller runs no egress gateway, so egress and secrets cannot be enforced; leave them out.', {
        field: 'egress',
      });
    // Pool members were made without a relay or placeholders: a sandbox with egress is always cold.
    const record = withEgress || plan.restore || plan.settings.volumes ? undefined : await this.claimPooled(plan);
    if (record) {
      this.table.set(record);
      return this.created(record, started, 'pool');
    }
    this.creating++;
    try {
      if (!plan.restore) await this.images.ensure(plan.image);
      else if (!(await this.provider.hasImage(plan.restore.image)))
        throw new CodedError(
          'SNAPSHOT_NOT_FOUND',
          `The snapshot's image ${plan.restore.image} is gone from the engine; the snapshot cannot be restored. Delete it and take a new one.`,
        );
      return await this.createSlots.run(() => this.createCold(plan, started), this.createQueueLimits);
    } catch (err) {
      this.metrics?.creates.inc({ source: 'cold', outcome: 'error' });
      throw err;
    } finally {
      this.creating--;
    }
  }

  private tooMany(): CodedError {
    return new CodedError(
      'RESOURCE_EXHAUSTED',
      this.sharedState
        ? `The controllers on this cluster already run their maximum of ${this.config.maxSandboxes} sandboxes together (maxSandboxes counts every replica's); kill one you no longer need, or raise maxSandboxes.`
        : `This controller already runs its maximum of ${this.config.maxSandboxes} sandboxes (maxSandboxes); kill one you no longer need, or raise maxSandboxes.`,
    );
  }

  /** A cold create: a new sandbox from the provider, answered once its daemon has answered. */
  private async createCold(plan: SandboxPlan, started: number): Promise<CreateSandboxResponse> {
    {
      const id = newId();
      const createdAt = new Date(this.clock.now());
      const expiresAt = new Date(createdAt.getTime() + plan.settings.ttlSeconds * 1000);
      const containerId = await this.startContainer(id, plan, { createdAt, expiresAt });
      const record: SandboxRecord = {
        id,
        agentId: id,
        containerId,
        image: plan.image,
        createdAt,
        expiresAt,
        labels: plan.labels,
        settings: plan.settings,
        state: 'running',
        pooled: false,
      };
      if (plan.policy !== undefined) record.policy = plan.policy;
      this.table.set(record);
      return this.created(record, started, 'cold');
    }
  }

  private created(record: SandboxRecord, started: number, source: 'pool' | 'cold'): CreateSandboxResponse {
    const seconds = (performance.now() - started) / 1000;
    this.freezer.touch(record.id);
    this.metrics?.creates.inc({ source, outcome: 'ok' });
    this.metrics?.createSeconds.observe({ source }, seconds);
    return { ...describe(record), token: this.credentials.sandboxToken(record.id), readyMs: Math.round(seconds * 1000), pooled: source === 'pool' };
  }

  /**
   * Starts one sandbox for a plan and waits for its daemon; on any failure nothing is left
   * behind. The warm pool uses it too, with `pool: true`.
   */
  async startContainer(agentId: string, plan: SandboxPlan, times: { createdAt: Date; expiresAt: Date }, pool = false): Promise<string> {
    const egress = usesEgress(plan) ? this.egress : undefined;
    // The egress environment (proxy, trust stores, placeholders) goes last: a create's env cannot point the proxy elsewhere.
    const env = egress ? { ...plan.env, ...(await egress.register(agentId, plan.egress, plan.secrets)) } : plan.env;
    let handle: string;
    try {
      handle = await this.provider.create({
        agentId,
        image: plan.image,
        env,
        labels: sandboxLabels({
          id: agentId,
          owner: this.credentials.instanceId,
          image: plan.image,
          ...times,
          settings: plan.settings,
          policy: plan.policy,
          labels: plan.labels,
          pool,
        }),
        settings: plan.settings,
        daemonSecret: this.credentials.agentSecret(agentId),
        ...(egress?.transparentAddress === undefined ? {} : { nameserver: egress.transparentAddress }),
        ...(plan.restore === undefined ? {} : { restore: plan.restore }),
      });
    } catch (err) {
      await egress?.remove(agentId);
      throw err;
    }
    try {
      // Replicas share maxSandboxes: of creates racing on several replicas at the limit, those whose
      // pods do not come first (creation time; ties count against each other) back out.
      if (!pool && this.sharedState && ((await this.sharedState.rankOf(handle)) ?? Infinity) > this.config.maxSandboxes) throw this.tooMany();
      await this.waitUntilReady(agentId, handle);
      await egress?.connect(agentId, this.provider.daemon(agentId), this.credentials.agentSecret(agentId));
      await egress?.bind(agentId);
      return handle;
    } catch (err) {
      await egress?.remove(agentId);
      await this.provider.remove(handle, agentId).catch(() => undefined);
      throw err;
    }
  }

  /** Swaps a sandbox's egress policy at once (within the operator's maximum); see {@link SandboxEgress.update}. */
  async updateEgress(id: string, policy: EgressPolicy): Promise<{ policy: EgressPolicy; version: number }> {
    await this.ensureKnown(id);
    const record = this.table.require(id);
    if (!this.egress || !(await this.egress.known(record.agentId)))
      throw new CodedError(
        'INVALID_PARAMS',
        `Sandbox '${id}' was created without egress, so it has no relay to the gateway; create a sandbox with an egress policy (even { mode: 'none' } with secrets) to update it later.`,
        { field: 'egress' },
      );
    const effective = effectiveEgressPolicy(policy, { defaultPolicy: policy, maxMode: this.config.egress.maxMode });
    return await this.egress.update(record.agentId, effective);
  }

  /** A sandbox's egress policy and version as enforced now (with replicas: as stored for the one serving its relay), or undefined without egress. */
  async networkOf(id: string): Promise<{ policy: EgressPolicy; version: number } | undefined> {
    await this.ensureKnown(id);
    const record = this.table.require(id);
    return this.egress?.currentPolicy(record.agentId);
  }

  /**
   * One round of following the egress other replicas share (see {@link SandboxEgress.follow}):
   * this replica takes over the relay of egress sandboxes no replica serves, and enforces policies
   * other replicas stored. Nothing without state shared by the provider.
   */
  async followSharedEgress(): Promise<void> {
    if (!this.sharedState || !this.egress) return;
    await this.egress.follow((agentId) => ({ endpoint: this.provider.daemon(agentId), secret: this.credentials.agentSecret(agentId) }));
  }

  /** A sandbox's egress policy and version, or undefined when it has none through the gateway. */
  egressOf(id: string): { policy: EgressPolicy; version: number } | undefined {
    const record = this.table.require(id);
    return this.egress?.has(record.agentId) ? this.egress.policyOf(record.agentId) : undefined;
  }

  /**
   * The host side of mount checks: each path must exist, resolve (symlinks followed) below an
   * allowed folder, and not be a socket.
   */
  private async checkMountsOnHost(plan: SandboxPlan): Promise<void> {
    if (plan.settings.mounts.length === 0) return;
    const roots = await Promise.all(this.config.allowedMountRoots.map((r) => realpath(r).catch(() => r)));
    for (const mount of plan.settings.mounts) {
      const real = await realpath(mount.hostPath).catch(() => {
        throw new CodedError('INVALID_PARAMS', `Cannot mount '${mount.hostPath}': it does not exist on the controller's host. Create the folder first.`, {
          field: 'mounts',
          hostPath: mount.hostPath,
        });
      });
      if (!roots.some((root) => isBelow(real, root))) {
        throw new CodedError(
          'FORBIDDEN',
          `Refused mount of '${mount.hostPath}': it resolves to '${real}', which is not below a folder this controller allows (${this.config.allowedMountRoots.join(', ')}).`,
          { field: 'mounts', hostPath: mount.hostPath },
        );
      }
      if ((await stat(real)).isSocket()) {
        throw new CodedError('FORBIDDEN', `Refused mount of '${mount.hostPath}': it is a socket, and host sockets are never passed into a sandbox.`, {
          field: 'mounts',
          hostPath: mount.hostPath,
        });
      }
      mount.hostPath = real;
    }
  }

  /** Waits until the daemon answers a real call; the backend's log tail goes into the error otherwise. */
  private async waitUntilReady(agentId: string, handle: string): Promise<void> {
    const deadline = this.clock.now() + this.config.readyTimeoutMs;
    let lastError: unknown;
    for (let attempt = 0; this.clock.now() < deadline; attempt++) {
      try {
        await this.probe(this.provider.daemon(agentId), this.credentials.agentSecret(agentId), Math.max(100, deadline - this.clock.now()));
        return;
      } catch (err) {
        lastError = err;
      }
      // Whether the container still runs, asked of the engine now and then: not within the usual
      // boot (the 5 ms tries below), where it would cost every cold create an inspect.
      if (attempt >= 40 && attempt % 20 === 19 && (await this.provider.inspect(handle)) !== 'running') break;
      // Every 5 ms while a daemon usually starts (its boot is about 100 ms; a refused probe costs
      // little), then less often up to every 50 ms for a slow one.
      await new Promise((r) => setTimeout(r, Math.min(5 + Math.max(0, attempt - 40) * 2, 50)));
    }
    const logs = await this.provider.logsTail(handle);
    throw new CodedError(
      'SANDBOX_NOT_READY',
      `The sandbox daemon did not answer within ${this.config.readyTimeoutMs} ms (${String((lastError as Error)?.message ?? lastError)}).${logs ? ` Container output: ${logs}` : ''}`,
      {
        sandboxId: agentId,
      },
    );
  }

  /** Starts a stopped sandbox again (new secret delivery, same workspace) and waits for its daemon. */
  private async bringBack(record: SandboxRecord): Promise<void> {
    record.frozen = false;
    await this.provider.start(record.containerId, record.agentId, this.credentials.agentSecret(record.agentId));
    await this.waitUntilReady(record.agentId, record.containerId);
    await this.egress?.connect(record.agentId, this.provider.daemon(record.agentId), this.credentials.agentSecret(record.agentId));
  }

  /** A sandbox's description with its current state, from the backend. */
  async get(id: string): Promise<SandboxInfo> {
    await this.ensureKnown(id);
    const record = this.table.require(id);
    if (this.shared) await this.refreshShared(record);
    const starts = this.supervisor.startsOf(id);
    this.supervisor.observe(record, await this.provider.inspect(record.containerId), starts);
    return describe(record);
  }

  /**
   * One sample of what a sandbox uses, from the backend (cgroup counters the engine reads, the
   * workspace disk), with its CPU share since the previous sample taken here, kept in the sandbox's
   * short history. SANDBOX_NOT_READY when it is not running.
   */
  async usage(id: string): Promise<SandboxMetrics> {
    const record = this.table.require(id);
    const stats = await this.provider.stats(record.containerId, record.agentId);
    if (!stats)
      throw new CodedError('SANDBOX_NOT_READY', `Sandbox '${id}' is not running, so it uses nothing to measure; resume or restart it first.`, {
        sandboxId: id,
      });
    // The throttling counter is the idle freezer's, not part of the usage answer.
    const { cpuThrottledPeriods: _throttled, ...measured } = stats;
    return this.usageHistory.add({ sandboxId: id, time: new Date().toISOString(), ...measured });
  }

  /**
   * Samples every running sandbox, a few at a time (the background sampler of `usage.sampleSeconds`);
   * a sandbox that stops or goes away meanwhile is skipped.
   */
  async sampleUsage(concurrency = 4): Promise<void> {
    for (const sample of this.usageHistory.latest()) if (!this.table.has(sample.sandboxId)) this.usageHistory.forget(sample.sandboxId);
    const running = this.table.list().filter((record) => record.state === 'running' && !record.pooled);
    const next = async (): Promise<void> => {
      for (let record = running.shift(); record; record = running.shift()) await this.usage(record.id).catch(() => undefined);
    };
    await Promise.all(Array.from({ length: concurrency }, next));
  }

  /**
   * Opens one port of a sandbox to anyone without a credential, or closes it again; stored with
   * the sandbox's record, so it survives a controller restart. At most 16 ports are public at once.
   */
  async setPortPublic(id: string, port: number, open: boolean): Promise<number[]> {
    const record = this.table.require(id);
    const ports = new Set(record.publicPorts ?? []);
    if (open) ports.add(port);
    else ports.delete(port);
    if (ports.size > MAX_PUBLIC_PORTS)
      throw new CodedError('RESOURCE_EXHAUSTED', `Sandbox '${id}' already has ${MAX_PUBLIC_PORTS} public ports; make one private first.`);
    record.publicPorts = [...ports].sort((a, b) => a - b);
    await this.storeRecord(record);
    return record.publicPorts;
  }

  /** The record of a sandbox, or SANDBOX_NOT_FOUND. */
  record(id: string): SandboxRecord {
    return this.table.require(id);
  }

  /** Every sandbox this controller knows. */
  list(): SandboxRecord[] {
    return this.table.list();
  }

  /** The sandboxes that carry every given label and are in the given state, states fresh from the backend. */
  async find(filter: ListFilter = {}): Promise<SandboxInfo[]> {
    await this.sync();
    await this.reaper.refreshStates();
    return this.table.filter(filter);
  }

  /** Counts by state (and ready pool members), for the metrics gauge. */
  countByState(): Record<string, number> {
    const counts = this.table.countByState();
    if (this.pool) counts.pooled = this.pool.readyCount;
    return counts;
  }

  has(id: string): boolean {
    return this.table.has(id);
  }

  /**
   * The id of the sandbox whose id equals `id` but for case (a host name's label arrives in lower
   * case), or undefined when none or more than one does.
   */
  idIgnoringCase(id: string): string | undefined {
    if (this.table.has(id)) return id;
    const lower = id.toLowerCase();
    const matches = this.table.list().filter((record) => record.id.toLowerCase() === lower);
    return matches.length === 1 ? matches[0]!.id : undefined;
  }

  /** Moves a sandbox's expiry to `ttlSeconds` from now (shorter or longer), within the maximum. */
  async setTimeout(id: string, ttlSeconds: number): Promise<SandboxInfo> {
    const record = this.table.require(id);
    const max = this.config.maxLimits.ttlSeconds;
    if (ttlSeconds > max)
      throw new CodedError('INVALID_PARAMS', `ttlSeconds ${ttlSeconds} is above this controller's maximum of ${max}; ask for at most ${max}.`, {
        field: 'ttlSeconds',
        max,
      });
    record.expiresAt = new Date(this.clock.now() + ttlSeconds * 1000);
    await this.storeRecord(record);
    return describe(record);
  }

  /** Moves the expiry to the sandbox's own ttl from now; never shortens it. */
  async keepalive(id: string): Promise<SandboxInfo> {
    const record = this.table.require(id);
    const next = new Date(this.clock.now() + record.settings.ttlSeconds * 1000);
    if (next > record.expiresAt) {
      record.expiresAt = next;
      await this.storeRecord(record);
    }
    return describe(record);
  }

  /**
   * Freezes the sandbox's processes; connections to it are refused until it is resumed. A sandbox
   * the idle freezer froze is paused already: it becomes paused on purpose, and no call thaws it.
   */
  async pause(id: string): Promise<SandboxInfo> {
    const record = this.table.require(id);
    await this.freezer.exclusive(id, async () => {
      if (!record.frozen) await this.provider.pause(record.containerId);
      if (record.frozen) await this.frozenMarks.clear(record.containerId);
      record.frozen = false;
      record.state = 'paused';
    });
    return describe(record);
  }

  /**
   * Runs a snapshot's capture of a sandbox: one at a time with the idle freezer's transitions (the
   * capture pauses the container itself), and marked so the engine's listing during that pause is
   * not taken for a pause of the sandbox.
   */
  async whileCapturing<T>(id: string, capture: () => Promise<T>): Promise<T> {
    const record = this.table.require(id);
    record.capturing = (record.capturing ?? 0) + 1;
    try {
      return await this.freezer.exclusive(id, capture);
    } finally {
      record.capturing -= 1;
      if (record.capturing <= 0) delete record.capturing;
    }
  }

  /** Thaws a paused sandbox (or one frozen for being idle). */
  async resume(id: string): Promise<SandboxInfo> {
    const record = this.table.require(id);
    // Frozen for being idle, or hibernated: resuming is waking it (the route leaves that to here).
    if (record.frozen || record.hibernated) {
      await this.wake(id);
      return describe(record);
    }
    await this.freezer.exclusive(id, async () => {
      await this.provider.resume(record.containerId);
      record.state = 'running';
    });
    // Paused when the controller restarted: its relay was not opened then, so it is now.
    if (this.egress?.has(record.agentId) && this.egress.relayPort(record.agentId) === undefined)
      await this.egress
        .connectWithRetry(record.agentId, this.provider.daemon(record.agentId), this.credentials.agentSecret(record.agentId))
        .catch(() => undefined); // logged; the relay stays closed (egress fails closed) until the next start
    this.freezer.touch(id);
    return describe(record);
  }

  /**
   * Hibernates a sandbox: its container is stopped (its memory freed, its files kept: the
   * container's own layer and its workspace), the record stored as hibernated so a restarted
   * controller keeps it so, and the supervisor leaves it stopped. Any call or connection wakes it
   * ({@link SandboxService.wake}) with the same id, token and files; its processes start anew.
   * Expiry still applies.
   */
  async hibernate(id: string): Promise<SandboxInfo> {
    const record = this.table.require(id);
    if (record.hibernated) return describe(record);
    // Frozen for being idle or paused: its processes run again first, so the stop is an ordinary one.
    if (record.frozen) await this.freezer.wake(id);
    // A container that is not paused after all (the record's state is the last one seen) is fine as it is.
    if (record.state === 'paused')
      await this.provider.resume(record.containerId).catch((err: unknown) => {
        if (!(err instanceof CodedError && err.code === 'CONFLICT')) throw err;
      });
    record.hibernated = true;
    await this.storeRecord(record);
    try {
      await this.provider.stop(record.containerId);
    } catch (err) {
      record.hibernated = false;
      await this.storeRecord(record);
      throw err;
    }
    record.state = 'hibernated';
    return describe(record);
  }

  /**
   * Makes sure a sandbox's processes run before a daemon connection or call reaches it, and the
   * caller waits: a hibernated sandbox starts again (concurrent callers share the one start), one
   * the idle freezer froze thaws (counted as activity). A running sandbox is left alone.
   */
  async wake(id: string): Promise<void> {
    const record = this.table.require(id);
    if (record.hibernated) await this.startHibernated(id, record);
    await this.freezer.wake(id);
  }

  private async startHibernated(id: string, record: SandboxRecord): Promise<void> {
    let waking = this.waking.get(id);
    if (!waking) {
      waking = (async () => {
        await this.bringBack(record);
        record.hibernated = false;
        record.state = 'running';
        record.lastActive = this.clock.now();
        await this.storeRecord(record);
      })().finally(() => this.waking.delete(id));
      this.waking.set(id, waking);
    }
    await waking;
  }
  private readonly waking = new Map<string, Promise<void>>();

  /** A call reached the sandbox now (for `hibernateAfterSeconds`). */
  touch(id: string): void {
    const record = this.table.find(id);
    if (record) record.lastActive = this.clock.now();
  }

  /** A connection to the sandbox opened (+1) or closed (-1): a sandbox with one open is never idle. */
  connectionChanged(id: string, delta: 1 | -1): void {
    const record = this.table.find(id);
    if (!record) return;
    record.connections = Math.max(0, (record.connections ?? 0) + delta);
    record.lastActive = this.clock.now();
  }

  /** Hibernates every running sandbox idle for its `hibernateAfterSeconds` (no open connection, no call). Returns their ids. */
  async hibernateIdle(now = this.clock.now()): Promise<string[]> {
    const idle = this.table.list().filter((r) => {
      const after = r.settings.hibernateAfterSeconds;
      return (
        after !== undefined &&
        r.state === 'running' &&
        !r.hibernated &&
        (r.connections ?? 0) === 0 &&
        now - (r.lastActive ?? r.createdAt.getTime()) >= after * 1000
      );
    });
    const done: string[] = [];
    for (const record of idle)
      await this.hibernate(record.id).then(
        () => done.push(record.id),
        () => undefined,
      );
    return done;
  }

  /**
   * Warms a ready warm-pool member's daemon for its first client: connections with the grant a
   * claim of the pool's template gets (the API key's or the sandbox token's: the template's policy,
   * exec and audit allowed), each a `hello` and a `system.info`. A fresh daemon's first client
   * connection runs code no call has run yet (the upgrade with a grant, its handler table, the
   * connection's setup), which V8 compiles then: done here, off the claim's path, the claimed
   * sandbox's first connection costs what later ones do. The calls are the probe's own (in the
   * audit log as `system.info`, like the readiness probe); a failure is ignored (the member is
   * ready: its probe answered).
   */
  async warmPoolMember(agentId: string, plan: SandboxPlan, rounds = 2): Promise<void> {
    const grant: ConnectionGrant = { policy: plan.policy ?? DEFAULT_POLICY, allowExec: true, allowAudit: true };
    const headers = { [GRANT_HEADER]: encodeGrant(grant) };
    for (let i = 0; i < rounds; i++) {
      await this.probe(this.provider.daemon(agentId), this.credentials.agentSecret(agentId), 2000, headers).catch(() => undefined);
    }
  }

  /** Removes an unclaimed warm-pool member. */
  async removePoolMember(agentId: string, containerId: string): Promise<void> {
    // With shared records another replica may have claimed it meanwhile: then it serves a sandbox.
    if (this.shared && !(await this.shared.retire(containerId).catch(() => false))) return;
    await this.provider.remove(containerId, agentId).catch(() => undefined);
  }

  /** Kills a sandbox: its container, workspace, daemon channel and stored record are gone afterwards. */
  async kill(id: string): Promise<void> {
    const record = this.table.require(id);
    await this.supervisor.whileKilling(id, async () => {
      // The relay first, so its tunnel ends as closed on purpose rather than as a dropped channel.
      await this.egress?.remove(record.agentId);
      await this.provider.remove(record.containerId, record.agentId);
      await this.store.remove(id);
      await this.frozenMarks.clear(record.containerId);
      this.table.delete(id);
      this.supervisor.forget(id);
      this.usageHistory.forget(id);
      this.freezer.forget(id);
    });
  }

  /** See {@link Reaper.reapExpired}. */
  reapExpired(now?: number): Promise<string[]> {
    return this.reaper.reapExpired(now);
  }

  /** See {@link Reaper.refreshStates}. */
  refreshStates(): Promise<void> {
    return this.reaper.refreshStates();
  }

  /** See {@link RestartSupervisor.restartStopped}. */
  restartStopped(): Promise<{ restarted: string[]; failed: string[] }> {
    return this.supervisor.restartStopped();
  }

  /** See {@link RestartSupervisor.willRestart}. */
  willRestart(id: string): boolean {
    return this.supervisor.willRestart(id);
  }

  /** See {@link RestartSupervisor.isRestarting}. */
  isRestarting(id: string): boolean {
    return this.supervisor.isRestarting(id);
  }
}

/** Whether a plan needs the egress gateway: a policy other than `none`, brokered secrets, or a relay asked for (a later update may open it). */
function usesEgress(plan: SandboxPlan): boolean {
  return plan.egress.mode !== 'none' || plan.secrets.length > 0 || plan.relay === true;
}

/** A sandbox of the backend as a record, with what the stored record says (a claimed pool member's public identity, a moved expiry). */
function recordOf(agentId: string, sandbox: ProvidedSandbox, claim: StoredRecord | undefined): SandboxRecord {
  const record = recordFromLabels(agentId, sandbox.handle, sandbox.labels, toState(sandbox.state));
  if (claim) applyClaim(record, claim, sandbox.labels);
  return record;
}

function applyClaim(record: SandboxRecord, claim: StoredRecord, labels: Record<string, string> | undefined): void {
  record.id = claim.id;
  record.expiresAt = new Date(claim.expiresAt);
  if (claim.createdAt) record.createdAt = new Date(claim.createdAt);
  if (claim.labels) record.labels = claim.labels;
  if (claim.policy !== undefined) record.policy = claim.policy;
  if (claim.ttlSeconds !== undefined) record.settings = { ...record.settings, ttlSeconds: claim.ttlSeconds };
  if (labels) record.pooled = labels[LABELS.pool] === '1';
  if (Array.isArray(claim.publicPorts)) record.publicPorts = claim.publicPorts.filter((p) => Number.isInteger(p) && p >= 1 && p <= 65535);
  // Hibernated: stopped on purpose, so it stays so (the supervisor leaves it) until a call wakes it.
  if (claim.hibernated === true && record.state !== 'running') {
    record.hibernated = true;
    record.state = 'hibernated';
  }
}

/** What is stored of a record besides the backend's labels. */
function storedRecord(record: SandboxRecord): StoredRecord {
  const data: StoredRecord = { id: record.id, agentId: record.agentId, expiresAt: record.expiresAt.toISOString() };
  if (record.agentId !== record.id) {
    data.createdAt = record.createdAt.toISOString();
    data.labels = record.labels;
    data.ttlSeconds = record.settings.ttlSeconds;
    if (record.policy !== undefined) data.policy = record.policy;
  }
  if (record.publicPorts?.length) data.publicPorts = record.publicPorts;
  if (record.hibernated) data.hibernated = true;
  return data;
}
