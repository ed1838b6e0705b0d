export { Sandbox, type SandboxCreateOptions, type SandboxConnectOptions } from './sandbox.js';
export { Files, type ReadOptions, type WriteOptions } from './files.js';
export { Commands, type CommandResult, type RunOptions } from './commands.js';
export { Connection, type CallOptions } from './connection.js';
export { RestClient, DEFAULT_BASE_URL, type ControllerOptions } from './rest.js';
export * from './errors.js';
export * from './tools/index.js';
