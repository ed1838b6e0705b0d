import { createHash } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { CodedError, EGRESS_RELAY_PORT, EGRESS_TRUST_DIR, type EgressPolicy, type SecretBinding } from '@warren/protocol';
import type { Logger } from '../logger.js';
import type { DaemonEndpoint } from '../provider.js';
import type { EgressLog } from './egress-log.js';
import type { EgressStoreLike, StoredEgress } from './egress-store.js';
import type { SharedEgressStore } from '../provider.js';
import type { EgressGateway, SandboxEgressHandle } from './gateway.js';
import type { BrokeredSecret } from './secrets.js';
import { EgressTunnel, type EgressTunnelOptions } from './tunnel.js';

/** Options of {@link SandboxEgress.create}. */
export interface SandboxEgressOptions {
  gateway: EgressGateway;
  /** The interception CA's certificate (never its key), installed in each sandbox's trust stores. */
  caPem?: string | undefined;
  /** Relayed connections one sandbox may hold (the gateway's own per-sandbox cap applies as well). */
  maxConnections: number;
  /** The loopback port of the relay inside sandboxes. */
  relayPort?: number;
  /**
   * The transparent path for clients that ignore proxy variables: the relay answers DNS on this
   * loopback address and takes :80 and :443 there; `resolvConf` points the sandbox's resolver at
   * it; `ports` replaces 53/80/443 (tests). Off when undefined.
   */
  transparent?: { address: string; resolvConf: boolean; ports?: { dns: number; http: number; tls: number } } | undefined;
  logger?: Logger | undefined;
  /** The sandboxes' egress log: a removed sandbox's events are dropped from it. */
  log?: EgressLog | undefined;
  /**
   * Where each sandbox's policy and brokered secrets are kept so they survive a controller
   * restart ({@link SandboxEgress.restore}); without it they live in memory only.
   */
  store?: EgressStoreLike | undefined;
  /** With a shared store: how long a policy update on a replica that does not serve the relay waits for the serving one to enforce it (default 10 s). */
  ackTimeoutMs?: number | undefined;
  /** Opens a tunnel; {@link EgressTunnel.open} by default. */
  openTunnel?: (options: EgressTunnelOptions) => Promise<EgressTunnel>;
}

interface Attached {
  /** The brokered secrets, kept for the store (the gateway holds the same). */
  secrets: readonly BrokeredSecret[];
  socketPath: string;
  /** The sandbox's SNI listener and DNS-stream listener (the transparent path). */
  tlsPath?: string | undefined;
  dnsPath?: string | undefined;
  tunnel?: EgressTunnel | undefined;
  reconnect?: NodeJS.Timeout | undefined;
  channel?: { endpoint: DaemonEndpoint; secret: string } | undefined;
  /** With a shared store: the stored egress is bound to its sandbox, so this replica follows it (policy updates, removal). */
  following?: boolean;
}

/**
 * The environment a sandbox with egress gets: the proxy variables (lower and upper case, since
 * tools differ), loopback exempt, Node's switch to honour them, the trust-store variables when
 * the gateway can intercept, and the secret placeholders.
 *
 * @example
 * egressEnvironment(3128, true, { OPENAI_API_KEY: 'WARREN_SECRET_...' }).HTTPS_PROXY; // 'http://127.0.0.1:3128'
 */
export function egressEnvironment(port: number, withCa: boolean, placeholders: Record<string, string>): Record<string, string> {
  const proxy = `http://127.0.0.1:${port}`;
  const noProxy = 'localhost,127.0.0.1,::1';
  const env: Record<string, string> = {
    HTTP_PROXY: proxy,
    HTTPS_PROXY: proxy,
    ALL_PROXY: proxy,
    http_proxy: proxy,
    https_proxy: proxy,
    all_proxy: proxy,
    NO_PROXY: noProxy,
    no_proxy: noProxy,
    NODE_USE_ENV_PROXY: '1',
  };
  if (withCa) {
    const bundle = `${EGRESS_TRUST_DIR}/bundle.pem`;
    Object.assign(env, {
      NODE_EXTRA_CA_CERTS: `${EGRESS_TRUST_DIR}/ca.pem`,
      SSL_CERT_FILE: bundle,
      REQUESTS_CA_BUNDLE: bundle,
      CURL_CA_BUNDLE: bundle,
      GIT_SSL_CAINFO: bundle,
      PIP_CERT: bundle,
    });
  }
  return { ...env, ...placeholders };
}

/**
 * Connects sandboxes to the egress gateway. Per sandbox: {@link register} gives it a policy, its
 * secret bindings and a gateway listener on a unix socket in a folder only the controller can
 * enter (mode 0700, never mounted anywhere), and returns the environment the container is created
 * with; {@link connect}, once the daemon answers, opens the {@link EgressTunnel} that carries each
 * connection a sandbox process makes to its loopback relay into that listener. The listener a
 * connection arrives on is the sandbox's identity, so no sandbox can speak as another. A tunnel
 * that drops is opened again while the sandbox is registered.
 *
 * @example
 * const egress = await SandboxEgress.create({ gateway, caPem: ca.certPem, maxConnections: 64 });
 * const env = await egress.register(id, { mode: 'allow', rules: [{ host: 'registry.npmjs.org' }] }, []);
 * // ... create the container with env, wait for the daemon ...
 * await egress.connect(id, provider.daemon(id), secret);
 */
export class SandboxEgress {
  readonly #attached = new Map<string, Attached>();
  /** Each sandbox's last store operation: writes and the removal run one after another, in order. */
  readonly #storeQueue = new Map<string, Promise<void>>();
  readonly #options: SandboxEgressOptions;
  readonly #socketDir: string;
  #following = false;

  private constructor(options: SandboxEgressOptions, socketDir: string) {
    this.#options = options;
    this.#socketDir = socketDir;
  }

  static async create(options: SandboxEgressOptions): Promise<SandboxEgress> {
    // Short, so socket paths stay under the 108-byte limit; mkdtemp makes it 0700 and ours.
    const dir = await mkdtemp(path.join(os.tmpdir(), 'warren-egress-'));
    return new SandboxEgress(options, dir);
  }

  get gateway(): EgressGateway {
    return this.#options.gateway;
  }

  /** The loopback address the transparent path answers DNS on inside sandboxes, when it is on. */
  get transparentAddress(): string | undefined {
    return this.#options.transparent?.address;
  }

  /** Whether a sandbox (by agent id) has egress through the gateway. */
  has(agentId: string): boolean {
    return this.#attached.has(agentId);
  }

  /** Registers a sandbox and its gateway listener; returns the environment to create its container with. */
  async register(agentId: string, policy: EgressPolicy, secrets: readonly SecretBinding[]): Promise<Record<string, string>> {
    const handle = this.gateway.addSandbox(agentId, policy, secrets);
    try {
      await this.#stored(agentId, (store) => store.write(agentId, { policy, version: 1, secrets: [...handle.secrets] }));
    } catch (err) {
      await this.gateway.removeSandbox(agentId);
      await this.#stored(agentId, (store) => store.remove(agentId)).catch(() => undefined);
      throw err;
    }
    try {
      return await this.#listen(agentId, handle);
    } catch (err) {
      await this.#stored(agentId, (store) => store.remove(agentId)).catch(() => undefined);
      throw err;
    }
  }

  /**
   * Registers a sandbox again from its stored egress after a controller restart (the same policy,
   * version and placeholders its container was created with); false when nothing is stored for
   * it. {@link connect} then opens its tunnel again.
   */
  async restore(agentId: string): Promise<boolean> {
    if (this.#attached.has(agentId)) return true;
    const stored = await this.#options.store?.read(agentId);
    if (!stored) return false;
    return this.#restoreFrom(agentId, stored);
  }

  async #restoreFrom(agentId: string, stored: StoredEgress): Promise<boolean> {
    try {
      await this.#listen(agentId, this.gateway.restoreSandbox(agentId, stored.policy, stored.version, stored.secrets));
    } catch (err) {
      this.#options.logger?.warn({ sandboxId: agentId, err: (err as Error).message }, 'egress.restore-failed');
      return false;
    }
    return true;
  }

  /** Removes the stored egress of sandboxes that are gone (killed while the controller was down). */
  async forgetStoredExcept(keep: ReadonlySet<string>): Promise<void> {
    const store = this.#options.store;
    if (!store) return;
    // Shared: the stored egress of other replicas' sandboxes is theirs; bound entries go with their pods.
    if (store.shared) return store.removeTemporary();
    for (const id of await store.ids()) if (!keep.has(id)) await store.remove(id);
    await store.removeTemporary();
  }

  /** Opens a registered sandbox's gateway listeners; returns the environment its container is (or was) created with. */
  async #listen(agentId: string, handle: SandboxEgressHandle): Promise<Record<string, string>> {
    const base = path.join(this.#socketDir, createHash('sha256').update(agentId).digest('hex').slice(0, 24));
    const attached: Attached = { secrets: handle.secrets, socketPath: `${base}.sock` };
    const transparent = this.#options.transparent;
    try {
      await rm(attached.socketPath, { force: true });
      await this.gateway.listenProxy(agentId, { path: attached.socketPath });
      if (transparent) {
        attached.tlsPath = `${base}.tls.sock`;
        attached.dnsPath = `${base}.dns.sock`;
        await rm(attached.tlsPath, { force: true });
        await rm(attached.dnsPath, { force: true });
        await this.gateway.listenTransparentTls(agentId, { path: attached.tlsPath });
        await this.gateway.listenDnsStream(agentId, { path: attached.dnsPath }, transparent.address);
      }
    } catch (err) {
      await this.gateway.removeSandbox(agentId);
      throw err;
    }
    this.#attached.set(agentId, attached);
    return egressEnvironment(this.#options.relayPort ?? EGRESS_RELAY_PORT, this.#options.caPem !== undefined, handle.env);
  }

  /**
   * Starts the sandbox's relay over its daemon channel (again, after a restart of the sandbox);
   * resolves once the daemon listens on the sandbox's loopback.
   */
  async connect(agentId: string, endpoint: DaemonEndpoint, secret: string): Promise<void> {
    const attached = this.#attached.get(agentId);
    if (!attached) return;
    attached.channel = { endpoint, secret };
    clearTimeout(attached.reconnect);
    attached.tunnel?.close('replaced');
    const open = this.#options.openTunnel ?? ((o: EgressTunnelOptions) => EgressTunnel.open(o));
    const tunnel = await open({
      endpoint,
      secret,
      connectGateway: (kind) =>
        net.connect(kind === 'tls' && attached.tlsPath ? attached.tlsPath : kind === 'dns' && attached.dnsPath ? attached.dnsPath : attached.socketPath),
      transparent: this.#options.transparent,
      port: this.#options.relayPort ?? EGRESS_RELAY_PORT,
      maxConnections: this.#options.maxConnections,
      caPem: this.#options.caPem,
    });
    if (this.#attached.get(agentId) !== attached) return void tunnel.close('sandbox removed');
    attached.tunnel = tunnel;
    void tunnel.closed.then((reason) => this.#onTunnelClosed(agentId, attached, tunnel, reason, 0));
  }

  /**
   * {@link connect}, tried again with backoff while the sandbox is registered: after a controller
   * restart its daemon may still be closing the relay of the controller that died.
   */
  async connectWithRetry(agentId: string, endpoint: DaemonEndpoint, secret: string, attempts = 6): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.connect(agentId, endpoint, secret);
      } catch (err) {
        if (attempt + 1 >= attempts || !this.#attached.has(agentId)) {
          this.#options.logger?.warn({ sandboxId: agentId, err: (err as Error).message }, 'egress.reconnect-failed');
          throw err;
        }
        await new Promise((r) => setTimeout(r, 250 * 2 ** attempt).unref());
      }
    }
  }

  /** Reopens a dropped tunnel with backoff, while the sandbox is registered and no newer tunnel replaced it. */
  #onTunnelClosed(agentId: string, attached: Attached, tunnel: EgressTunnel, reason: string, attempt: number): void {
    if (this.#attached.get(agentId) !== attached || attached.tunnel !== tunnel || reason === 'replaced') return;
    this.#options.logger?.warn({ sandboxId: agentId, reason, attempt }, 'egress.tunnel-closed');
    // Shared: another replica may serve the relay now; this one lets go and its follower tries again later.
    if (this.#shared && attached.following) return void this.#detach(agentId).catch(() => undefined);
    const channel = attached.channel;
    if (!channel) return;
    attached.reconnect = setTimeout(
      () => {
        if (this.#attached.get(agentId) !== attached || attached.tunnel !== tunnel) return;
        this.connect(agentId, channel.endpoint, channel.secret).catch(() => this.#onTunnelClosed(agentId, attached, tunnel, reason, attempt + 1));
      },
      Math.min(30_000, 500 * 2 ** Math.min(attempt, 6)),
    );
    attached.reconnect.unref();
  }

  /** The port the sandbox's relay listens on (the configured one; the picked one where it is 0), once connected. */
  relayPort(agentId: string): number | undefined {
    return this.#attached.get(agentId)?.tunnel?.port;
  }

  /** Where the sandbox's transparent path listens (DNS, :80, :443), once connected with it. */
  transparentPorts(agentId: string): { dns: number; http: number; tls: number } | undefined {
    return this.#attached.get(agentId)?.tunnel?.transparentPorts;
  }

  /** How many relayed connections the sandbox holds open now. */
  openConnections(agentId: string): number {
    return this.#attached.get(agentId)?.tunnel?.connections ?? 0;
  }

  /**
   * Swaps a sandbox's policy; open connections it no longer allows are closed before this
   * returns, and the new policy is stored (a controller restart keeps it).
   */
  async update(agentId: string, policy: EgressPolicy): Promise<{ policy: EgressPolicy; version: number }> {
    const shared = this.#shared;
    if (shared && !this.#attached.get(agentId)?.tunnel) return this.#updateElsewhere(shared, agentId, policy);
    const version = this.gateway.setPolicy(agentId, policy);
    const attached = this.#attached.get(agentId);
    // Written from the gateway's state when the write runs, so concurrent updates store the last one.
    if (attached)
      await this.#stored(agentId, async (store) => {
        if (this.#attached.get(agentId) !== attached) return;
        await store.write(agentId, { ...this.gateway.policyOf(agentId), secrets: [...attached.secrets] });
      });
    if (shared && attached) await shared.acknowledge(agentId, version);
    return { policy, version };
  }

  /**
   * A live update on a replica that does not serve the sandbox's relay: the policy is stored on top
   * of what is stored, and the answer waits (up to {@link SandboxEgressOptions.ackTimeoutMs}) until
   * the replica that serves the relay says it enforces it; no replica serving it means no way out
   * at all (egress fails closed), and whichever takes it over reads the stored policy.
   */
  async #updateElsewhere(store: SharedEgressStore, agentId: string, policy: EgressPolicy): Promise<{ policy: EgressPolicy; version: number }> {
    const version = await store.updatePolicy(agentId, policy);
    if (version === undefined)
      throw new CodedError('SANDBOX_NOT_FOUND', `Sandbox '${agentId}' has no stored egress (it is gone, or was created without egress).`);
    const deadline = Date.now() + (this.#options.ackTimeoutMs ?? 10_000);
    while (Date.now() < deadline) {
      if (((await store.applied(agentId)) ?? 0) >= version) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    return { policy, version };
  }

  /** Whether the sandbox has egress here or, with a shared store, on any replica. */
  async known(agentId: string): Promise<boolean> {
    if (this.#attached.has(agentId)) return true;
    return this.#shared ? (await this.#shared.read(agentId)) !== undefined : false;
  }

  /** A sandbox's policy and version from here or, with a shared store, as stored. */
  async currentPolicy(agentId: string): Promise<{ policy: EgressPolicy; version: number } | undefined> {
    if (this.#attached.has(agentId) && (!this.#shared || this.#attached.get(agentId)?.tunnel)) return this.gateway.policyOf(agentId);
    const stored = await this.#shared?.read(agentId);
    return stored ? { policy: stored.policy, version: stored.version } : undefined;
  }

  /** With a shared store: ties a new sandbox's stored egress to it once its relay is served here, so other replicas may take it over. */
  async bind(agentId: string): Promise<void> {
    const shared = this.#shared;
    const attached = this.#attached.get(agentId);
    if (!shared || !attached) return;
    await shared.bind(agentId);
    attached.following = true;
  }

  /**
   * One round of following the shared store (several controller replicas): for each sandbox served
   * here, a policy stored by another replica is enforced and acknowledged, and a sandbox whose
   * stored egress is gone is let go; each bound sandbox served nowhere is taken over (its stored
   * policy and secrets registered, its relay opened). A relay the daemon already serves for
   * another replica is refused by the daemon (one `egress.serve` at a time), so exactly one
   * replica serves it; when that replica dies its connection closes and the next round of a
   * living replica takes it over.
   */
  async follow(channelOf: (agentId: string) => { endpoint: DaemonEndpoint; secret: string } | undefined): Promise<void> {
    const shared = this.#shared;
    if (!shared || this.#following) return;
    this.#following = true;
    try {
      const bound = await shared.readBound();
      for (const [agentId, attached] of this.#attached) {
        // Bound (its creator served it) yet registered here with no tunnel and not followed: a relay
        // this replica failed to open (another served it then); let it go, so it can be taken over below.
        if (!attached.following && !attached.tunnel && bound.has(agentId)) await this.#detach(agentId);
        if (!attached.following) continue;
        const stored = bound.get(agentId);
        if (!stored) {
          await this.#detach(agentId);
          continue;
        }
        if (attached.tunnel && stored.version > this.gateway.policyOf(agentId).version) {
          this.gateway.setPolicy(agentId, stored.policy, stored.version);
          await shared.acknowledge(agentId, stored.version);
        }
      }
      for (const [agentId, stored] of bound) {
        if (this.#attached.has(agentId)) continue;
        const channel = channelOf(agentId);
        if (!channel || !(await this.#restoreFrom(agentId, stored))) continue;
        const attached = this.#attached.get(agentId)!;
        attached.following = true;
        try {
          await this.connect(agentId, channel.endpoint, channel.secret);
          await shared.acknowledge(agentId, stored.version);
          this.#options.logger?.info({ sandboxId: agentId }, 'egress.relay-taken-over');
        } catch {
          // Served by another replica (CONFLICT), or not running: not ours this round.
          await this.#detach(agentId);
        }
      }
    } catch (err) {
      this.#options.logger?.warn({ err: (err as Error).message }, 'egress.follow-failed');
    } finally {
      this.#following = false;
    }
  }

  get #shared(): SharedEgressStore | undefined {
    const store = this.#options.store;
    return store?.shared ? (store as SharedEgressStore) : undefined;
  }

  /** A sandbox's policy and its version. */
  policyOf(agentId: string): { policy: EgressPolicy; version: number } {
    return this.gateway.policyOf(agentId);
  }

  /** Closes a sandbox's tunnel, forgets it at the gateway and deletes its stored egress (the sandbox is gone). */
  async remove(agentId: string): Promise<void> {
    await this.#detach(agentId);
    await this.#stored(agentId, (store) => store.remove(agentId));
  }

  /** Runs a store operation after the sandbox's earlier ones (none without a store). */
  async #stored(agentId: string, operation: (store: EgressStoreLike) => Promise<void>): Promise<void> {
    const store = this.#options.store;
    if (!store) return;
    const previous = this.#storeQueue.get(agentId) ?? Promise.resolve();
    const next = previous.catch(() => undefined).then(() => operation(store));
    this.#storeQueue.set(agentId, next);
    try {
      await next;
    } finally {
      if (this.#storeQueue.get(agentId) === next) this.#storeQueue.delete(agentId);
    }
  }

  /** Closes a sandbox's tunnel and forgets it at the gateway; what is stored stays. */
  async #detach(agentId: string): Promise<void> {
    const attached = this.#attached.get(agentId);
    this.#attached.delete(agentId);
    if (attached) {
      clearTimeout(attached.reconnect);
      attached.tunnel?.close('sandbox removed');
      for (const file of [attached.socketPath, attached.tlsPath, attached.dnsPath]) if (file) await rm(file, { force: true });
    }
    await this.gateway.removeSandbox(agentId);
    this.#options.log?.forget(agentId);
  }

  /** Closes every tunnel and the gateway's listeners; the stored egress stays for the next start. */
  async close(): Promise<void> {
    for (const id of [...this.#attached.keys()]) await this.#detach(id);
    await this.gateway.close();
    await rm(this.#socketDir, { recursive: true, force: true });
  }
}
