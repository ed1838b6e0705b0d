export { startController, type Controller, type StartControllerOptions } from './controller.js';
export { loadConfig, readConfigFile, defaultStateDir, ConfigFile, type ControllerConfig } from './config.js';
export { Credentials, API_KEY_HASH_FILE } from './credentials.js';
export { DockerProvider, containerCreateBody, sandboxLabels, LABELS, WORKSPACE, type SandboxContainerSpec } from './docker.js';
export { planSandbox, type SandboxPlan, type PlanContext } from './sandbox-plan.js';
export { Metrics } from './metrics.js';
export { WarmPool } from './pool.js';
export { SandboxService, type SandboxRecord } from './sandboxes.js';
export { errorBody } from './http.js';
