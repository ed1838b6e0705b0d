export { startAgentServer, createHandlers, type AgentServer, type AgentServerOptions } from './server.js';
export { serveConnection, AGENT_VERSION } from './connection.js';
export { resolvePath, isWithin, defaultWorkingFolder, DEFAULT_POLICY, type FilePolicy, type ResolvedPath } from './policy.js';
export { AuditLog } from './audit.js';
export type { Handler, Handlers, CallContext, HandlerReturn } from './dispatch.js';
export { watchCounts, MAX_DAEMON_WATCHED_FOLDERS } from './services/watch.js';
export { openTunnels } from './services/ports.js';
