export { Sandbox, type SandboxCreateOptions, type SandboxConnectOptions } from './sandbox.js';
export { Files, checkArchive, extractArchive, type ReadOptions, type WriteOptions, type LineSlice, type CharSlice, type DownloadedArchive } from './files.js';
export { Commands, type CommandResult, type CommandEvent, type RunOptions, type StartOptions } from './commands.js';
export { ProcessHandle, type AttachEvent, type AttachOptions, type OutputEvent } from './process-handle.js';
export { ShellSession, type ShellRunResult, type ShellOpenOptions, type ShellRunOptions } from './shell-session.js';
export { Connection, type CallOptions, type ApprovalHandler } from './connection.js';
export { RestClient, DEFAULT_BASE_URL, type ControllerOptions } from './rest.js';
export * from './errors.js';
export * from './tools/index.js';
