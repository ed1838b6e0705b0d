export { startAgentServer, createHandlers, type AgentServer, type AgentServerOptions } from './server.js';
export { serveConnection, AGENT_VERSION } from './connection.js';
export { resolvePath, isWithin, DEFAULT_POLICY, type FilePolicy, type ResolvedPath } from './policy.js';
export type { Handler, Handlers, CallContext, HandlerReturn } from './dispatch.js';
