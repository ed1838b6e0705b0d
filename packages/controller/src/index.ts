export { startController, type Controller, type StartControllerOptions } from './controller.js';
export {
  loadConfig,
  readConfigFile,
  readFlags,
  redactConfig,
  defaultStateDir,
  defaultAgentBundlePath,
  DEFAULT_EGRESS,
  ConfigFile,
  type ControllerConfig,
  type ImageSettings,
  type EngineSettings,
} from './config.js';
export { createLogger, silentLogger, LOG_LEVELS, REDACTED, type Logger, type LogLevel, type LoggerOptions } from './logger.js';
export { Credentials, API_KEY_HASH_FILE } from './credentials.js';
export { AgentDirs } from './agent-dir.js';
export { CpuCgroups, cpuHierarchy, CPU_CGROUP_IN_SANDBOX, DAEMON_CPUS } from './cpu-cgroups.js';
export {
  DockerProvider,
  chooseChannel,
  containerCreateBody,
  engineError,
  engineIsolation,
  statsFromEngine,
  WORKSPACE,
  type DaemonChannel,
  type SandboxContainerSpec,
} from './docker.js';
export { closeNamespaces, PODMAN_DEFAULT_SECCOMP, type SeccompProfile, type SeccompRule } from './seccomp.js';
export { LABELS, sandboxLabels } from './labels.js';
export type {
  SandboxProvider,
  SandboxSpec,
  SandboxStats,
  ProvidedSandbox,
  ProvidedSnapshot,
  ProviderState,
  ProviderIsolation,
  DaemonEndpoint,
  PullOptions,
  PullProgress,
  BuildOptions,
  ProvidedImage,
  SharedRecords,
} from './provider.js';
export type { StoredRecord } from './record-store.js';
export { ImageService, BUILD_LABEL, type ImageServiceOptions, type ImageWatch } from './image-service.js';
export { parseImageRef, parseAllowList, isAllowed, checkAllowed, buildTag, DOCKER_HUB, type ImageRef, type AllowedRegistry } from './image-ref.js';
export { dockerfileNeeds, type DockerfileNeeds } from './dockerfile-check.js';
export { systemClock, type Clock } from './clock.js';
export { collectRuntime, type AgentRuntime } from './runtime.js';
export { planSandbox, type SandboxPlan, type PlanContext } from './sandbox-plan.js';
export { Metrics } from './metrics.js';
export { WarmPool } from './pool.js';
export { SandboxService, type SandboxRecord, type SandboxServiceOptions } from './sandboxes.js';
export { RestartSupervisor, MAX_RESTARTS, RESTART_WINDOW_MS } from './supervisor.js';
export { Reaper } from './reaper.js';
export { errorBody, requestIdOf, REQUEST_ID_HEADER } from './http.js';
export { ROUTES, type Route, type RouteAccess, type HttpMethod } from './routes.js';
export { openApiDocument, apiDocumentFiles, REST_API_VERSION } from './openapi.js';
export { openWorkspaceStore, type WorkspaceStore, type WorkspaceStoreOptions, type WorkspaceStoreDescription, type WorkspaceUsage } from './workspace-store.js';
export { EgressGateway, type EgressGatewayOptions, type SandboxEgressHandle } from './egress/gateway.js';
export { EgressCa, EGRESS_CA_CERT_FILE, EGRESS_CA_KEY_FILE } from './egress/ca.js';
export { AddressFloor, parseLabCidrs, hostAddresses, type FloorClass, type LabCidr } from './egress/address-floor.js';
export {
  decideEgress,
  decideEgressName,
  effectiveEgressPolicy,
  type EgressDecision,
  type EgressDenyReason,
  type EgressOperatorConfig,
  type EgressQuery,
} from './egress/decide.js';
export { DnsResolver, type EgressResolver } from './egress/resolver.js';
export { egressEventSink } from './egress/sink.js';
export { EgressTunnel, type EgressTunnelOptions } from './egress/tunnel.js';
export { SandboxEgress, egressEnvironment, type SandboxEgressOptions } from './egress/sandbox-egress.js';
export { EgressLog, type EgressLogEntry } from './egress/egress-log.js';
export type { EgressEvent, EgressKind } from './egress/events.js';
export { callAgent, openAgentSocket, probeAgent } from './agent-link.js';
export { resolveEngine, type EngineEndpoint } from './engine-endpoint.js';
export {
  detectEngine,
  unenforcedLimits,
  checkLimitsEnforced,
  hardLimits,
  processLimitCandidates,
  type EngineKind,
  type EngineName,
  type EngineVersionAnswer,
  type EngineLimitsInfo,
} from './engine-kind.js';
export {
  KubernetesProvider,
  defaultDaemonChannel,
  podState,
  lostNode,
  startVerdict,
  warrenLabels,
  type KubernetesDaemonChannel,
  type KubernetesProviderOptions,
  type StartVerdict,
} from './kubernetes/provider.js';
export {
  sandboxPod,
  sandboxSecret,
  podName,
  selectableLabels,
  SECRET_DIR_IN_SANDBOX,
  SECRET_KEY,
  LABELS_ANNOTATION,
  MANAGED_BY,
  EXPIRES_LABEL,
  CLAIM_ANNOTATION,
  UNCLAIMED,
  type SandboxPodInput,
} from './kubernetes/pod-spec.js';
export { PodRecords, recordOf as podRecord, RECORD_ANNOTATION } from './kubernetes/records.js';
export { kubeError, readRefusal, type ApiRefusal } from './kubernetes/errors.js';
export { runtimeImageTar, runtimeImageName } from './kubernetes/runtime-image.js';
export { DaemonSessionPool, PortTunnel } from './ports/tunnel.js';
