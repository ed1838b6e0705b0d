import { describe, expect, it } from '@jest/globals';
import { z } from 'zod';
import { NotFoundError } from '../../src/errors.js';
import {
  builtinTools,
  callMCPTool,
  codinTools,
  defineTool,
  dispatchAnthropicToolUse,
  dispatchOpenAIToolCall,
  isToolError,
  runToolCall,
  filesystemTools,
  partialReadTools,
  toAnthropicTools,
  toMCPTools,
  toolsmithTools,
  toOpenAITools,
  toVercelAITools,
  type ToolSet,
} from '../../src/index.js';
import { fakeContext } from './fakes.js';

const readTool = defineTool({
  name: 'read_it',
  description: 'Reads a file.',
  input: z.strictObject({
    path: z.string().min(1).describe('Path to the file'),
    max_lines: z.number().int().min(1).default(1000).describe('Maximum lines'),
  }),
  execute: async ({ path, max_lines }) => {
    if (path === 'missing') throw new NotFoundError(`No file at '${path}'.`);
    if (path === 'boom') throw new Error('disk on fire');
    return `${path}:${max_lines}`;
  },
});
const tools: ToolSet = [readTool];

describe('a tool is data', () => {
  it('derives an input-side JSON Schema from its zod schema: defaulted fields optional, no $schema, unknown keys refused', () => {
    expect(readTool.jsonSchema).toEqual({
      type: 'object',
      properties: {
        path: { type: 'string', minLength: 1, description: 'Path to the file' },
        max_lines: { type: 'integer', minimum: 1, default: 1000, description: 'Maximum lines' },
      },
      required: ['path'],
      additionalProperties: false,
    });
  });

  it('applies defaults and runs', async () => {
    await expect(readTool.run({ path: 'a.py' })).resolves.toBe('a.py:1000');
  });

  it('answers bad arguments with an error result naming the field, never a throw', async () => {
    const result = await readTool.run({ path: '', extra: 1 });
    expect(isToolError(result)).toBe(true);
    expect(result).toMatchObject({ isError: true, code: 'INVALID_ARGUMENTS' });
    expect((result as { error: string }).error).toContain('path');
    expect((result as { error: string }).error).toContain('extra');
  });

  it('turns an SDK error into an error result with its code and suggestion', async () => {
    const result = await readTool.run({ path: 'missing' });
    expect(result).toEqual({
      isError: true,
      code: 'NOT_FOUND',
      error: "No file at 'missing'.",
      suggestion: 'Check the path; list the parent folder to see what exists.',
    });
    expect(readTool.toText(result)).toBe("Error: No file at 'missing'.\nCheck the path; list the parent folder to see what exists.");
  });

  it('turns any other exception into an INTERNAL error result', async () => {
    await expect(readTool.run({ path: 'boom' })).resolves.toMatchObject({ isError: true, code: 'INTERNAL', error: 'disk on fire' });
  });

  it('answers an already-aborted signal with CANCELLED', async () => {
    await expect(readTool.run({ path: 'a' }, { signal: AbortSignal.abort() })).resolves.toMatchObject({ isError: true, code: 'CANCELLED' });
  });
});

describe('OpenAI adapter', () => {
  it('matches the Chat Completions function tool format', () => {
    // https://platform.openai.com/docs/guides/function-calling: { type: "function", function: { name, description, parameters } }
    expect(toOpenAITools(tools)).toEqual([{ type: 'function', function: { name: 'read_it', description: 'Reads a file.', parameters: readTool.jsonSchema } }]);
  });

  it('matches the Responses API function tool format', () => {
    // Responses API: { type: "function", name, description, parameters, strict }
    expect(toOpenAITools(tools, { api: 'responses' })).toEqual([
      { type: 'function', name: 'read_it', description: 'Reads a file.', parameters: readTool.jsonSchema, strict: false },
    ]);
  });

  it('answers a Chat Completions tool_call with a role "tool" message', async () => {
    const call = { id: 'call_abc123', type: 'function' as const, function: { name: 'read_it', arguments: '{"path":"a.py","max_lines":5}' } };
    await expect(dispatchOpenAIToolCall(tools, call)).resolves.toEqual({ role: 'tool', tool_call_id: 'call_abc123', content: 'a.py:5' });
  });

  it('answers a Responses API function_call with a function_call_output item', async () => {
    const call = { type: 'function_call' as const, id: 'fc_1', call_id: 'call_xyz', name: 'read_it', arguments: '{"path":"b.py"}' };
    await expect(dispatchOpenAIToolCall(tools, call)).resolves.toEqual({ type: 'function_call_output', call_id: 'call_xyz', output: 'b.py:1000' });
  });

  it('answers arguments that are not JSON, and unknown tools, with text the model can act on', async () => {
    const bad = await dispatchOpenAIToolCall(tools, { id: 'c1', type: 'function', function: { name: 'read_it', arguments: '{path:' } });
    expect(bad.content).toMatch(/^Error: The arguments of read_it are not valid JSON/);
    const unknown = await dispatchOpenAIToolCall(tools, { id: 'c2', type: 'function', function: { name: 'rm_rf', arguments: '{}' } });
    expect(unknown.content).toBe("Error: There is no tool named 'rm_rf'.\nCall one of: read_it.");
  });
});

describe('Anthropic adapter', () => {
  it('matches the Messages API tool format', () => {
    // https://docs.anthropic.com/en/docs/build-with-claude/tool-use: { name, description, input_schema }
    expect(toAnthropicTools(tools)).toEqual([{ name: 'read_it', description: 'Reads a file.', input_schema: readTool.jsonSchema }]);
    expect(toAnthropicTools(tools)[0]!.input_schema.type).toBe('object');
  });

  it('answers a tool_use block with a tool_result block, is_error on failure', async () => {
    const ok = await dispatchAnthropicToolUse(tools, { type: 'tool_use', id: 'toolu_01', name: 'read_it', input: { path: 'a.py' } });
    expect(ok).toEqual({ type: 'tool_result', tool_use_id: 'toolu_01', content: 'a.py:1000' });
    const failed = await dispatchAnthropicToolUse(tools, { type: 'tool_use', id: 'toolu_02', name: 'read_it', input: { path: 'missing' } });
    expect(failed).toEqual({
      type: 'tool_result',
      tool_use_id: 'toolu_02',
      content: "Error: No file at 'missing'.\nCheck the path; list the parent folder to see what exists.",
      is_error: true,
    });
  });
});

describe('Vercel AI SDK adapter', () => {
  it('gives the tool() shape keyed by name: description, zod inputSchema, execute(input, { abortSignal })', async () => {
    const shaped = toVercelAITools(tools);
    expect(Object.keys(shaped)).toEqual(['read_it']);
    expect(shaped['read_it']!.description).toBe('Reads a file.');
    expect(shaped['read_it']!.inputSchema).toBe(readTool.inputSchema);
    await expect(shaped['read_it']!.execute({ path: 'c.py' }, { toolCallId: 't1', abortSignal: new AbortController().signal })).resolves.toBe('c.py:1000');
  });
});

describe('runToolCall', () => {
  it('finds the tool by name and reports the outcome', async () => {
    const outcome = await runToolCall(tools, 'read_it', { path: 'x' });
    expect(outcome).toMatchObject({ result: 'x:1000', text: 'x:1000', isError: false });
  });
});

describe('MCP adapter', () => {
  it('lists tools as { name, description, inputSchema } and answers tools/call with text content', async () => {
    expect(toMCPTools(tools)).toEqual([{ name: 'read_it', description: 'Reads a file.', inputSchema: readTool.jsonSchema }]);
    await expect(callMCPTool(tools, 'read_it', { path: 'a' })).resolves.toEqual({ content: [{ type: 'text', text: 'a:1000' }] });
    await expect(callMCPTool(tools, 'read_it', { path: 'missing' })).resolves.toEqual({
      content: [{ type: 'text', text: "Error: No file at 'missing'.\nCheck the path; list the parent folder to see what exists." }],
      isError: true,
    });
  });
});

describe("every tool of the five sets fits both providers' published constraints", () => {
  const context = fakeContext();
  const sets: Record<string, ToolSet> = {
    codin: codinTools(context),
    filesystem: filesystemTools(context),
    toolsmith: toolsmithTools(context),
    partial_read: partialReadTools(context),
    builtin: builtinTools(context),
  };

  it.each(Object.entries(sets))('%s', (_name, set) => {
    const names = new Set<string>();
    for (const tool of set) {
      // OpenAI and Anthropic: names of 1-64 letters, digits, underscores or dashes, unique in a request.
      expect(tool.name).toMatch(/^[a-zA-Z0-9_-]{1,64}$/);
      expect(names.has(tool.name)).toBe(false);
      names.add(tool.name);
      expect(tool.description.length).toBeGreaterThan(20);
      // Both take a JSON Schema object for the input; Anthropic requires type "object" at the top.
      expect(tool.jsonSchema.type).toBe('object');
      expect(tool.jsonSchema).not.toHaveProperty('$schema');
      expect(typeof tool.jsonSchema['properties']).toBe('object');
      expect(tool.jsonSchema['additionalProperties']).toBe(false);
      expect(JSON.parse(JSON.stringify(tool.jsonSchema))).toEqual(tool.jsonSchema);
    }
  });
});
