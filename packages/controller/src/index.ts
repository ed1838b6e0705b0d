export { startController, type Controller, type StartControllerOptions } from './controller.js';
export {
  loadConfig,
  readConfigFile,
  readFlags,
  redactConfig,
  defaultStateDir,
  defaultAgentBundlePath,
  ConfigFile,
  type ControllerConfig,
  type ImageSettings,
} from './config.js';
export { createLogger, silentLogger, LOG_LEVELS, REDACTED, type Logger, type LogLevel, type LoggerOptions } from './logger.js';
export { Credentials, API_KEY_HASH_FILE } from './credentials.js';
export { AgentDirs } from './agent-dir.js';
export { DockerProvider, chooseChannel, containerCreateBody, statsFromEngine, WORKSPACE, type DaemonChannel, type SandboxContainerSpec } from './docker.js';
export { LABELS, sandboxLabels } from './labels.js';
export type {
  SandboxProvider,
  SandboxSpec,
  SandboxStats,
  ProvidedSandbox,
  ProviderState,
  ProviderIsolation,
  DaemonEndpoint,
  PullOptions,
  PullProgress,
  BuildOptions,
  ProvidedImage,
} from './provider.js';
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
export type { EgressEvent, EgressKind } from './egress/events.js';
export { callAgent, openAgentSocket, probeAgent } from './agent-link.js';
export { resolveEngine, type EngineEndpoint } from './engine-endpoint.js';
export { PortTunnel } from './ports/tunnel.js';
