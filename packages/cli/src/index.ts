export { serve, sdkExample } from './serve.js';
export { buildProgram } from './program.js';
export { completionScript, completionTree, COMPLETION_SHELLS, type CompletionShell, type CompletionNode } from './completion.js';
export { formatError, table, keyValues, timeLeft, CliError, formatBytes, progressLine } from './output.js';
export { parseDuration, parseRemote, collectKeyValue } from './args.js';
export { exitCodeOf } from './exec.js';
export { languageOf } from './run-code.js';
export { CLI_VERSION } from './version.js';
