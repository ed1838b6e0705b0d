import { SnapshotService } from './snapshots.js';
import { VolumeService } from './volumes.js';
import { SnapshotStore } from './snapshot-store.js';
import { once } from 'node:events';
import { CodedError, EGRESS_TRANSPARENT_ADDRESS, type ParamsIn } from '@warren/protocol';
import { callAgent } from './agent-link.js';
import { loadConfig, type ControllerConfig } from './config.js';
import { Credentials } from './credentials.js';
import Docker from 'dockerode';
import { DockerProvider } from './docker.js';
import { KubernetesProvider } from './kubernetes/provider.js';
import { resolveEngine } from './engine-endpoint.js';
import { checkLimitsEnforced } from './engine-kind.js';
import { EngineWatch } from './engine-watch.js';
import { createLogger, type Logger } from './logger.js';
import { createHttpServer, serverUrl } from './http.js';
import { Metrics } from './metrics.js';
import { WarmPool } from './pool.js';
import type { SandboxProvider } from './provider.js';
import { collectRuntime } from './runtime.js';
import { SandboxService } from './sandboxes.js';
import { ImageService } from './image-service.js';
import { EgressCa } from './egress/ca.js';
import { EgressLog } from './egress/egress-log.js';
import { EgressStore } from './egress/egress-store.js';
import { EgressGateway } from './egress/gateway.js';
import { SandboxEgress } from './egress/sandbox-egress.js';
import { egressEventSink } from './egress/sink.js';

export interface StartControllerOptions {
  config?: Partial<ControllerConfig>;
  /** Where sandboxes run; the local Docker engine by default. */
  provider?: SandboxProvider;
  credentials?: Credentials;
  /**
   * Where the controller logs (JSON lines with levels, access lines included); by default a
   * logger at the configured `logLevel` on standard error.
   */
  logger?: Logger;
  /** Certificates (PEM) the egress gateway trusts for upstream servers it intercepts; Node's bundled roots by default (tests bring their own). */
  egressUpstreamCa?: string[] | undefined;
}

/** A running controller. Dispose it to stop serving; sandboxes keep running. */
export interface Controller extends AsyncDisposable {
  url: string;
  config: ControllerConfig;
  sandboxes: SandboxService;
  /** Snapshots and forks (docs/state.md). */
  snapshots: SnapshotService;
  metrics: Metrics;
  /** The warm pool, when `poolSize` is above 0. */
  pool?: WarmPool | undefined;
  /** Set only on the start that generated the API key, so it is printed once. */
  generatedApiKey?: string | undefined;
  close(): Promise<void>;
}

/**
 * Starts the controller: checks Docker, fills the runtime volume, rebuilds the sandbox table from
 * container labels, serves the REST API and the WebSocket relay, and reaps expired sandboxes.
 *
 * @example
 * await using controller = await startController({ config: { port: 0 } });
 * console.log(controller.url);
 */
export async function startController(options: StartControllerOptions = {}): Promise<Controller> {
  const config = loadConfig(process.env, options.config);
  const logger = options.logger ?? createLogger({ level: config.logLevel });
  let generatedApiKey: string | undefined;
  let credentials = options.credentials;
  if (!credentials) {
    const loaded = await Credentials.load(config.stateDir, config.apiKey, config.apiKeyHashes);
    credentials = loaded.credentials;
    generatedApiKey = loaded.generatedApiKey;
  }
  // The engine as the docker command finds it (DOCKER_HOST, the current context), said at start.
  const endpoint = options.provider || config.provider !== 'docker' ? undefined : resolveEngine(process.env);
  const provider: SandboxProvider =
    options.provider ??
    (config.provider === 'kubernetes'
      ? await KubernetesProvider.load({ ...config.kubernetes, daemonSecret: (agentId) => credentials.agentSecret(agentId), logger })
      : new DockerProvider({
          docker: new Docker(endpoint!.options),
          stateDir: config.stateDir,
          workspaceQuota: config.workspaceQuota,
          workspaceReserveMb: config.workspaceReserveMb,
          daemonChannel: config.daemonChannel,
          processLimit: config.engine.processLimit,
          logger,
        }));
  await provider.ping();
  const runtime = await collectRuntime(config.agentBundlePath);
  const { oldRuntimesRemoved } = await provider.prepare(runtime, config.defaultImage);
  const isolation = await provider.isolation();
  if (!isolation.limitsEnforced) {
    const reason = isolation.limitsNotEnforced ?? 'the engine accepts memory, CPU and pids limits without enforcing them';
    checkLimitsEnforced(reason, config.engine.allowUnenforcedLimits);
    logger.warn({ warning: `${reason}; sandboxes are not bounded (engine.allowUnenforcedLimits is on)` }, 'engine.limits-not-enforced');
  }
  const metrics: Metrics = new Metrics(() => sandboxes.countByState());
  // The egress gateway: every way out of a sandbox with an egress policy, reached through each
  // sandbox's relay over its daemon channel (docs/network.md). Its events go to the metrics, the
  // log and the sandbox's egress log.
  // Replicas on one cluster share the CA (first writer wins) and each sandbox's stored egress, so any of them can serve its relay.
  const shared = provider.sharedState;
  const egressCa = shared ? await EgressCa.shared(shared) : await EgressCa.loadOrCreate(config.stateDir);
  const egressLog = new EgressLog();
  const egress = await SandboxEgress.create({
    gateway: new EgressGateway({
      operator: config.egress,
      ca: egressCa,
      upstreamCa: options.egressUpstreamCa,
      onEvent: egressEventSink({ metrics, logger, forward: (event) => egressLog.add(event) }),
    }),
    caPem: egressCa.certPem,
    maxConnections: config.egress.maxConnectionsPerSandbox,
    // Clients that ignore the proxy variables: DNS and :80/:443 on a loopback address of the sandbox's own.
    transparent: { address: EGRESS_TRANSPARENT_ADDRESS, resolvConf: true },
    logger,
    log: egressLog,
    store: shared ? shared.egressStore : new EgressStore(config.stateDir),
    ackTimeoutMs: 5 * (config.egress.followIntervalMs ?? 2000),
  });
  const sandboxes: SandboxService = new SandboxService({
    egress,
    provider,
    credentials,
    config,
    metrics,
    images: new ImageService({ provider, settings: config.images, logger }),
    onRestart: (sandboxId, error) =>
      error === null ? logger.info({ sandboxId }, 'sandbox.restarted') : logger.error({ sandboxId, error }, 'sandbox.restart-failed'),
    pool: config.poolSize > 0 ? (service) => new WarmPool(service, config.poolSize, logger) : undefined,
    onFreezeError: (sandboxId, doing, error) => logger.warn({ sandboxId, error: String(error) }, `sandbox.${doing}-failed`),
  });
  const pool = sandboxes.pool as WarmPool | undefined;
  const { recovered, poolMembers } = await sandboxes.recover();
  // Snapshots after the sandboxes: what a killed controller half-wrote goes, the rest is kept.
  const volumes = new VolumeService({ sandboxes, provider, config });
  await volumes.recover();
  const snapshots = new SnapshotService({ sandboxes, provider, store: new SnapshotStore(config.stateDir), limits: config.snapshots, logger, volumes });
  const snapshotsRecovered = await snapshots.recover();
  logger.info(snapshotsRecovered, 'snapshots.recovered');
  // Unclaimed pool members of the previous run may be from an older runtime: replace them.
  for (const member of poolMembers) await sandboxes.removePoolMember(member.agentId, member.containerId);
  pool?.fill();

  // Sandboxes whose containers stopped while no controller watched (an engine restart, a host
  // reboot) come back now; from here on the watch restarts them whenever the engine does.
  const restartedAtStart = await sandboxes.restartStopped();
  const engine = new EngineWatch(provider, sandboxes.supervisor, pool, logger);
  await engine.start();

  const readiness = async () => {
    await provider.ping();
    if (engine.recovering) throw new Error('the Docker engine restarted and Warren is still starting the sandboxes that stopped with it');
    if (!(await provider.hasImage(config.defaultImage)))
      throw new Error(`the default image ${config.defaultImage} is not on the Docker engine; build it with scripts/build-images`);
    return {
      [provider.name]: 'ok',
      provider: provider.name,
      defaultImage: config.defaultImage,
      runtimes: sandboxes.runtimes,
      isolation,
      hardening: sandboxHardening(config),
      images: { pull: config.images.pull, allowedRegistries: config.images.allowedRegistries, buildNetwork: config.images.buildNetwork },
    };
  };
  const audit = async (id: string, query: URLSearchParams) => {
    const params: ParamsIn<'audit.list'> = {};
    const number = (name: string) => {
      const raw = query.get(name);
      if (raw === null) return undefined;
      const value = Number(raw);
      if (!Number.isInteger(value) || value < 0) throw new CodedError('INVALID_PARAMS', `?${name}= must be a whole number, got '${raw}'.`);
      return value;
    };
    const since = number('since');
    const limit = number('limit');
    if (since !== undefined) params.since = since;
    if (limit !== undefined) params.limit = limit;
    if (sandboxes.record(id).state === 'paused') throw new CodedError('SANDBOX_NOT_READY', `Sandbox '${id}' is paused; resume it to read its audit log.`);
    await sandboxes.wake(id);
    return callAgent(sandboxes.daemonEndpoint(id), sandboxes.agentSecret(id), 'audit.list', params);
  };
  const { server, wss } = createHttpServer({ sandboxes, snapshots, volumes, credentials, config, metrics, logger, readiness, audit, egressLog });
  server.listen(config.port, config.host);
  await once(server, 'listening');
  const url = serverUrl(server, config.host);
  logger.info(
    {
      url,
      provider: provider.name,
      ...(endpoint ? { engine: `${endpoint.address} (from ${endpoint.source})` } : {}),
      recovered,
      restarted: restartedAtStart.restarted.length,
      restartFailed: restartedAtStart.failed,
      oldRuntimesRemoved,
    },
    'controller.started',
  );

  const reaper = setInterval(() => {
    pool?.fill();
    sandboxes
      .refreshStates()
      .then(() => sandboxes.reapExpired())
      .then((ids: string[]) => ids.length > 0 && logger.info({ ids }, 'sandboxes.reaped'))
      .then(() => sandboxes.hibernateIdle())
      .then((ids: string[]) => ids.length > 0 && logger.info({ ids }, 'sandboxes.hibernated'))
      .then(() => snapshots.collect())
      .catch((err: unknown) => logger.error({ error: String(err) }, 'reaper.failed'));
  }, config.reapIntervalMs);
  reaper.unref();
  // Idle sandboxes are frozen (freezeAfterIdleSeconds); a round never overlaps the one before.
  let freezing = false;
  const freezer = sandboxes.freezer.enabled
    ? setInterval(() => {
        if (freezing) return;
        freezing = true;
        sandboxes.freezer
          .check()
          .then((ids) => ids.length > 0 && logger.info({ ids }, 'sandboxes.frozen'))
          .catch((err: unknown) => logger.error({ error: String(err) }, 'freezer.failed'))
          .finally(() => (freezing = false));
      }, sandboxes.freezer.checkIntervalMs)
    : undefined;
  freezer?.unref();
  // Per-sandbox metrics: a background sample of every running sandbox (the short history and the
  // Prometheus series), and the series only while their label cardinality stays bounded.
  const { usage } = config;
  metrics.sandboxSamples = () =>
    usage.perSandboxSeries === 'on' || (usage.perSandboxSeries === 'auto' && sandboxes.list().length <= usage.perSandboxSeriesMax)
      ? sandboxes.usageHistory.latest()
      : [];
  let sampling = false;
  const sampler =
    usage.sampleSeconds > 0
      ? setInterval(() => {
          if (sampling) return; // a slow engine: skip a round rather than pile them up
          sampling = true;
          void sandboxes.sampleUsage().finally(() => (sampling = false));
        }, usage.sampleSeconds * 1000)
      : undefined;
  sampler?.unref();

  // Replicas: take over the relays of egress sandboxes no replica serves (one whose replica died), and enforce policies stored by others.
  let following = false;
  const egressFollower = shared
    ? setInterval(() => {
        if (following) return;
        following = true;
        void sandboxes.followSharedEgress().finally(() => (following = false));
      }, config.egress.followIntervalMs ?? 2000)
    : undefined;
  egressFollower?.unref();

  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    clearInterval(egressFollower);
    clearInterval(reaper);
    clearInterval(freezer);
    clearInterval(sampler);
    engine.close();
    await pool?.close();
    if (config.killOnShutdown) for (const record of sandboxes.list()) await sandboxes.kill(record.id).catch(() => undefined);
    for (const ws of wss.clients) ws.terminate();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await egress.close();
  };
  return { url, config, sandboxes, snapshots, metrics, pool, generatedApiKey, close, [Symbol.asyncDispose]: close };
}

/** The hardening every sandbox gets unless its create asks otherwise, for `/readyz`. */
function sandboxHardening(config: ControllerConfig) {
  const { tmpMb, openFiles, fileSizeMb, memoryMb, pidsLimit } = config.limits;
  return { daemonSeparateFromSandboxUser: true, readOnlyRootfs: true, tmpMb, openFiles, fileSizeMb, memoryMb, pidsLimit, network: 'none' };
}
