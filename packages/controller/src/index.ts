export { startController, type Controller, type StartControllerOptions } from './controller.js';
export { loadConfig, defaultStateDir, type ControllerConfig } from './config.js';
export { Credentials } from './credentials.js';
export { DockerProvider, containerCreateBody, LABELS, type SandboxContainerSpec } from './docker.js';
export { SandboxService, type SandboxRecord } from './sandboxes.js';
export { errorBody } from './http.js';
