export * from './tool.js';
export * from './adapters.js';
export * from './context.js';
export { asToolContext, toolContext, type SandboxLike, type ToolTarget } from './sandbox-context.js';
export * from './codin.js';
export * from './filesystem.js';
export * from './toolsmith.js';
export * from './partial-read.js';
export * from './builtin.js';
