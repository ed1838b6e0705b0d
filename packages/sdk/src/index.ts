export { Network, Sandbox, Snapshots, Volumes, type SandboxCreateOptions, type SandboxConnectOptions } from './sandbox.js';
export {
  Files,
  WRITE_CHUNK_BYTES,
  WRITE_PIECE_BYTES,
  WRITE_PIECES_IN_FLIGHT,
  UPLOAD_ONE_FRAME_BYTES,
  checkArchive,
  extractArchive,
  type ReadOptions,
  type WriteOptions,
  type FileOperations,
  type LineRange,
  type LineSlice,
  type CharSlice,
  type ListedEntry,
  type DownloadedArchive,
} from './files.js';
export { Commands, type CommandResult, type CommandEvent, type RunOptions, type StartOptions } from './commands.js';
export {
  Code,
  displayImage,
  type DisplayImage,
  type CodeRunResult,
  type CodeRunOptions,
  type CodeContextOptions,
  type CodeContextInfo,
  type CodeDisplay,
  type CodeError,
  type CodeLanguage,
} from './code.js';
export { Pty, Terminal, type PtyCreateOptions, type PtyExit } from './pty.js';
export { Ports, PortConnection } from './ports.js';
export { Watcher, type WatchEvent, type WatchOptions, type WatchChange } from './watch.js';
export { ProcessHandle, type AttachEvent, type AttachOptions, type OutputEvent } from './process-handle.js';
export { ShellSession, type ShellRunResult, type ShellOpenOptions, type ShellRunOptions } from './shell-session.js';
export { TRANSFER_IDLE_MS, UPLOAD_PIECES_IN_FLIGHT, type TransferOptions, type TransferProgress } from './transfer.js';
export { Connection, type CallOptions, type ApprovalHandler } from './connection.js';
export { MAX_REPEATS, ReconnectingChannel, type Channel, type ReconnectOptions } from './channel.js';
export { RestClient, DEFAULT_BASE_URL, type ControllerOptions } from './rest.js';
export { Images, type BuildImageOptions, type PullImageOptions, type PullProgressEvent } from './images.js';
export { packBuildContext, DEFAULT_MAX_CONTEXT_BYTES, type PackContextOptions, type PackedContext } from './build-context.js';
export * from './errors.js';
export * from './tools/index.js';
