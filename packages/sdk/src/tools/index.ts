export {
  defineTool,
  errorText,
  isToolError,
  type JsonSchema,
  toJsonSchema,
  type Tool,
  type ToolContent,
  type ToolDefinition,
  toolError,
  type ToolError,
  type ToolErrorCode,
  toolErrorFrom,
  type ToolOutputKind,
  type ToolRunOptions,
  type ToolSet,
} from './tool.js';
export {
  type AnthropicRichToolResultBlock,
  type AnthropicTool,
  type AnthropicToolResultBlock,
  type AnthropicToolResultContent,
  type AnthropicToolUseBlock,
  callMCPTool,
  dispatchAnthropicToolUse,
  dispatchOpenAIToolCall,
  type MCPCallToolResult,
  type MCPTool,
  type OpenAIChatTool,
  type OpenAIChatToolCall,
  type OpenAIChatToolMessage,
  type OpenAIResponsesFunctionCall,
  type OpenAIResponsesFunctionCallOutput,
  type OpenAIResponsesTool,
  runToolCall,
  toAnthropicTools,
  toMCPTools,
  type ToolCallOutcome,
  toOpenAITools,
  toVercelAITools,
  type VercelAITool,
} from './adapters.js';
export { type AnchoredEdit, need, notAvailable, type ToolCommandResult, type ToolCommands, type ToolContext, type ToolFiles } from './context.js';
export { asToolContext, toolContext, type SandboxLike, type ToolTarget } from './sandbox-context.js';
export {
  CODIN_DEFAULT_EXEC_TIMEOUT_SECONDS,
  CODIN_DEFAULT_MAX_FILES,
  CODIN_DEFAULT_MAX_LINES,
  type CodinReadRange,
  codinTools,
  formatCodinExec,
  formatCodinList,
  formatCodinRead,
} from './codin.js';
export { FILESYSTEM_DEFAULT_MAX_CHARS, filesystemErrorClass, filesystemErrorText, filesystemTools, type ReadResult } from './filesystem.js';
export {
  type PytestReport,
  summariseFailures,
  summarisePytest,
  TOOLSMITH_DEFAULT_SANDBOX_DIR,
  TOOLSMITH_TIMEOUTS_MS,
  type ToolsmithAction,
  toolsmithError,
  toolsmithExceptionName,
  type ToolsmithLogEntry,
  type ToolsmithOptions,
  toolsmithTools,
  toSandboxPath,
} from './toolsmith.js';
export {
  excludedExtensionOf,
  formatCharSegment,
  formatFailedSegment,
  formatLineSegment,
  parseExcludedExtensions,
  PARTIAL_READ_MAX_CHARACTERS,
  PARTIAL_READ_MAX_LINES,
  type PartialReadOptions,
  type PartialReadRequest,
  partialReadTools,
} from './partial-read.js';
export { BUILTIN_DEFAULT_BASH_TIMEOUT_SECONDS, BuiltinEdits, builtinTools, formatAnchoredLines, formatBashOutput, parseEditsJson } from './builtin.js';
export { type ToolDocument, toolSetsDocument } from './document.js';
export { type CodeInterpreterTarget, codeInterpreterTools, formatCodeResult, RUN_CODE_DEFAULT_TIMEOUT_SECONDS } from './code-interpreter.js';
