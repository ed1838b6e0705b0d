import { builtinTools, codinTools, filesystemTools, partialReadTools, toolsmithTools, type Sandbox, type ToolSet } from '@warren/sdk';

// Apart from mcp.ts, so the program can name the tool sets without loading the MCP SDK (which
// `warren mcp` loads on demand): every other command, `warren serve` included, starts without it.
/** The tool sets `warren mcp --toolset` serves, by name. */
export const TOOLSETS = {
  codin: (sandbox: Sandbox) => codinTools(sandbox),
  filesystem: (sandbox: Sandbox) => filesystemTools(sandbox),
  toolsmith: (sandbox: Sandbox) => toolsmithTools(sandbox),
  partial_read: (sandbox: Sandbox) => partialReadTools(sandbox),
  builtin: (sandbox: Sandbox) => builtinTools(sandbox),
} as const satisfies Record<string, (sandbox: Sandbox) => ToolSet>;
export type ToolsetName = keyof typeof TOOLSETS;
export const TOOLSET_NAMES = Object.keys(TOOLSETS) as ToolsetName[];
/** The tool set `warren mcp` serves without `--toolset` (python3 -m warren.mcp too). */
export const DEFAULT_TOOLSET: ToolsetName = 'builtin';
