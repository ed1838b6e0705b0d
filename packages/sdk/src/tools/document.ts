import { builtinTools } from './builtin.js';
import { codinTools } from './codin.js';
import type { ToolContext } from './context.js';
import { filesystemTools } from './filesystem.js';
import { partialReadTools } from './partial-read.js';
import type { JsonSchema, ToolOutputKind, ToolSet } from './tool.js';
import { toolsmithTools } from './toolsmith.js';

/** One tool as data: what a client in another language needs to offer it to a model. */
export interface ToolDocument {
  name: string;
  description: string;
  output: ToolOutputKind;
  inputSchema: JsonSchema;
}

// Tool sets are built on a target but only call it when a tool runs: describing them calls nothing.
const UNUSED: ToolContext = {
  files: {
    readText: () => Promise.reject(new Error('describing a tool set runs nothing')),
    write: () => Promise.reject(new Error('describing a tool set runs nothing')),
  },
  commands: { run: () => Promise.reject(new Error('describing a tool set runs nothing')) },
};

const SETS: Readonly<Record<string, (target: ToolContext) => ToolSet>> = {
  builtin: builtinTools,
  codin: codinTools,
  filesystem: filesystemTools,
  partialRead: partialReadTools,
  toolsmith: toolsmithTools,
};

/**
 * The five seed tool sets as one JSON document (checked in as docs/toolsets.json, written by
 * `pnpm openapi`): each tool's name, description, output kind and input JSON Schema, in the seed's
 * order. Clients in other languages (packages/sdk-python) generate their tool definitions from it,
 * so a model is offered the same tools whichever SDK runs them.
 *
 * @example
 * const { builtin } = toolSetsDocument(); // [{ name: 'read_file', description: '...', output: 'text', inputSchema: {...} }, ...]
 */
export function toolSetsDocument(): Record<string, ToolDocument[]> {
  return Object.fromEntries(
    Object.entries(SETS).map(([set, make]) => [
      set,
      make(UNUSED).map((tool) => ({ name: tool.name, description: tool.description, output: tool.output, inputSchema: tool.jsonSchema })),
    ]),
  );
}
