import type { z } from 'zod';
import { isToolError, toolError, type JsonSchema, type Tool, type ToolContent, type ToolError, type ToolRunOptions, type ToolSet } from './tool.js';

/** One tool in the OpenAI Chat Completions `tools` array. */
export interface OpenAIChatTool {
  type: 'function';
  function: { name: string; description: string; parameters: JsonSchema; strict?: boolean };
}

/** One tool in the OpenAI Responses API `tools` array. */
export interface OpenAIResponsesTool {
  type: 'function';
  name: string;
  description: string;
  parameters: JsonSchema;
  strict: boolean;
}

/** A function call from a Chat Completions assistant message (`message.tool_calls[i]`). */
export interface OpenAIChatToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** A `function_call` output item of the Responses API. */
export interface OpenAIResponsesFunctionCall {
  type: 'function_call';
  call_id: string;
  name: string;
  arguments: string;
  id?: string;
}

/** The Chat Completions message that answers a tool call. */
export interface OpenAIChatToolMessage {
  role: 'tool';
  tool_call_id: string;
  content: string;
}

/** The Responses API input item that answers a function call. */
export interface OpenAIResponsesFunctionCallOutput {
  type: 'function_call_output';
  call_id: string;
  output: string;
}

/** One tool in the Anthropic Messages API `tools` array. */
export interface AnthropicTool {
  name: string;
  description: string;
  input_schema: JsonSchema;
}

/** A `tool_use` content block of an Anthropic assistant message. */
export interface AnthropicToolUseBlock {
  type: 'tool_use';
  id: string;
  name: string;
  input: unknown;
}

/** A text or base64 image block inside an Anthropic `tool_result`. */
export type AnthropicToolResultContent = { type: 'text'; text: string } | { type: 'image'; source: { type: 'base64'; media_type: string; data: string } };

/** The `tool_result` content block that answers a `tool_use` (sent in the next user message). */
export interface AnthropicToolResultBlock {
  type: 'tool_result';
  tool_use_id: string;
  content: string;
  is_error?: true;
}

/** A `tool_result` block whose content may be a list of text and image blocks (`dispatchAnthropicToolUse(..., { images: true })`). */
export interface AnthropicRichToolResultBlock {
  type: 'tool_result';
  tool_use_id: string;
  content: string | AnthropicToolResultContent[];
  is_error?: true;
}

/** A tool in the Vercel AI SDK's `tool()` shape (`generateText({ tools })`). */
export interface VercelAITool {
  description: string;
  inputSchema: z.ZodType;
  execute(input: unknown, options: { abortSignal?: AbortSignal | undefined; toolCallId?: string }): Promise<string>;
}

/** One tool in an MCP `tools/list` answer. */
export interface MCPTool {
  name: string;
  description: string;
  inputSchema: JsonSchema;
}

/** An MCP `tools/call` result: text (and image) content, `isError` when the tool failed. */
export interface MCPCallToolResult {
  content: ({ type: 'text'; text: string } | { type: 'image'; data: string; mimeType: string })[];
  isError?: true;
}

/** The outcome of one dispatched call: the tool's result, its text, and whether it failed. */
export interface ToolCallOutcome {
  tool: Tool | undefined;
  result: unknown;
  text: string;
  isError: boolean;
}

/**
 * The tool set as the OpenAI `tools` parameter. `api: 'chat'` (the default) gives the Chat
 * Completions shape `{ type: 'function', function: { name, description, parameters } }`;
 * `api: 'responses'` the Responses API shape `{ type: 'function', name, description, parameters, strict }`.
 * Strict mode is off: optional parameters stay optional, as the seeds define them.
 *
 * @example
 * const response = await openai.chat.completions.create({ model, messages, tools: toOpenAITools(codinTools(sandbox)) });
 */
export function toOpenAITools(tools: ToolSet, options?: { api?: 'chat' }): OpenAIChatTool[];
export function toOpenAITools(tools: ToolSet, options: { api: 'responses' }): OpenAIResponsesTool[];
export function toOpenAITools(tools: ToolSet, options: { api?: 'chat' | 'responses' } = {}): OpenAIChatTool[] | OpenAIResponsesTool[] {
  if (options.api === 'responses') {
    return tools.map((tool) => ({ type: 'function', name: tool.name, description: tool.description, parameters: tool.jsonSchema, strict: false }));
  }
  return tools.map((tool) => ({ type: 'function', function: { name: tool.name, description: tool.description, parameters: tool.jsonSchema } }));
}

/**
 * The tool set as the Anthropic Messages API `tools` parameter: `{ name, description, input_schema }`.
 *
 * @example
 * const message = await anthropic.messages.create({ model, max_tokens, messages, tools: toAnthropicTools(builtinTools(sandbox)) });
 */
export function toAnthropicTools(tools: ToolSet): AnthropicTool[] {
  return tools.map((tool) => ({ name: tool.name, description: tool.description, input_schema: tool.jsonSchema }));
}

/**
 * The tool set in the Vercel AI SDK's `tool()` shape, keyed by name: `{ description, inputSchema,
 * execute }`, where `inputSchema` is the zod schema (the AI SDK takes zod 4 schemas) and `execute`
 * resolves to the text the model should read (an error result's text too, so the model can act on it).
 *
 * @example
 * const { text } = await generateText({ model, tools: toVercelAITools(partialReadTools(sandbox)), prompt });
 */
export function toVercelAITools(tools: ToolSet): Record<string, VercelAITool> {
  const out: Record<string, VercelAITool> = {};
  for (const tool of tools) {
    out[tool.name] = {
      description: tool.description,
      inputSchema: tool.inputSchema,
      execute: async (input, options) => tool.toText(await tool.run(input, { signal: options?.abortSignal })),
    };
  }
  return out;
}

/**
 * The tool set as an MCP server lists it (`tools/list`): `{ name, description, inputSchema }`.
 *
 * @example
 * server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: toMCPTools(tools) }));
 */
export function toMCPTools(tools: ToolSet): MCPTool[] {
  return tools.map((tool) => ({ name: tool.name, description: tool.description, inputSchema: tool.jsonSchema }));
}

/**
 * Answers an MCP `tools/call` request: the tool's text as one text content item, with `isError: true`
 * when it failed (MCP reports tool failures in the result, not as protocol errors).
 *
 * @example
 * server.setRequestHandler(CallToolRequestSchema, (request) => callMCPTool(tools, request.params.name, request.params.arguments));
 */
export async function callMCPTool(tools: ToolSet, name: string, args: unknown, options: ToolRunOptions = {}): Promise<MCPCallToolResult> {
  const outcome = await runToolCall(tools, name, args ?? {}, options);
  if (outcome.isError) return { content: [{ type: 'text', text: outcome.text }], isError: true };
  const rich = richContent(outcome);
  return { content: rich ?? [{ type: 'text', text: outcome.text }] };
}

/**
 * Runs one call by tool name with already-parsed arguments. An unknown name is an error result
 * that lists the tools there are.
 *
 * @example
 * const { text, isError } = await runToolCall(tools, 'sandbox_exec', { cmd: 'ls' });
 */
export async function runToolCall(tools: ToolSet, name: string, args: unknown, options: ToolRunOptions = {}): Promise<ToolCallOutcome> {
  const tool = tools.find((candidate) => candidate.name === name);
  if (!tool) {
    const result = toolError('UNKNOWN_TOOL', `There is no tool named '${name}'.`, `Call one of: ${tools.map((t) => t.name).join(', ')}.`);
    return { tool, result, text: `Error: ${result.error}\n${result.suggestion}`, isError: true };
  }
  const result = await tool.run(args, options);
  return { tool, result, text: tool.toText(result), isError: isToolError(result) };
}

/**
 * Dispatches an OpenAI function call to its tool and answers in the shape the same API expects
 * back: a Chat Completions `tool_call` gets a `{ role: 'tool', tool_call_id, content }` message, a
 * Responses API `function_call` item gets a `{ type: 'function_call_output', call_id, output }` item.
 * Arguments that are not JSON come back as an error the model can read.
 *
 * @example
 * for (const call of response.choices[0].message.tool_calls ?? []) {
 *   messages.push(await dispatchOpenAIToolCall(tools, call));
 * }
 */
export function dispatchOpenAIToolCall(tools: ToolSet, call: OpenAIChatToolCall, options?: ToolRunOptions): Promise<OpenAIChatToolMessage>;
export function dispatchOpenAIToolCall(tools: ToolSet, call: OpenAIResponsesFunctionCall, options?: ToolRunOptions): Promise<OpenAIResponsesFunctionCallOutput>;
export async function dispatchOpenAIToolCall(
  tools: ToolSet,
  call: OpenAIChatToolCall | OpenAIResponsesFunctionCall,
  options: ToolRunOptions = {},
): Promise<OpenAIChatToolMessage | OpenAIResponsesFunctionCallOutput> {
  const { name, rawArguments } =
    'function' in call ? { name: call.function.name, rawArguments: call.function.arguments } : { name: call.name, rawArguments: call.arguments };
  const parsed = parseArguments(name, rawArguments);
  const text = 'error' in parsed ? `Error: ${parsed.error.error}\n${parsed.error.suggestion}` : (await runToolCall(tools, name, parsed.args, options)).text;
  return 'function' in call ? { role: 'tool', tool_call_id: call.id, content: text } : { type: 'function_call_output', call_id: call.call_id, output: text };
}

/**
 * Dispatches an Anthropic `tool_use` block to its tool and answers with the `tool_result` block
 * to send back in the next user message; failures set `is_error: true`. With `images: true`, a
 * result that holds images (`run_code`'s charts) answers with text and image blocks.
 *
 * @example
 * const results = await Promise.all(message.content.filter((b) => b.type === 'tool_use').map((b) => dispatchAnthropicToolUse(tools, b)));
 * messages.push({ role: 'user', content: results });
 */
export function dispatchAnthropicToolUse(
  tools: ToolSet,
  block: AnthropicToolUseBlock,
  options?: ToolRunOptions & { images?: false },
): Promise<AnthropicToolResultBlock>;
export function dispatchAnthropicToolUse(
  tools: ToolSet,
  block: AnthropicToolUseBlock,
  options: ToolRunOptions & { images: true },
): Promise<AnthropicRichToolResultBlock>;
export async function dispatchAnthropicToolUse(
  tools: ToolSet,
  block: AnthropicToolUseBlock,
  options: ToolRunOptions & { images?: boolean } = {},
): Promise<AnthropicToolResultBlock | AnthropicRichToolResultBlock> {
  const outcome = await runToolCall(tools, block.name, block.input, { signal: options.signal });
  if (outcome.isError) return { type: 'tool_result', tool_use_id: block.id, content: outcome.text, is_error: true };
  const rich = options.images ? richContent(outcome) : undefined;
  if (!rich) return { type: 'tool_result', tool_use_id: block.id, content: outcome.text };
  const content = rich.map((part): AnthropicToolResultContent =>
    part.type === 'text' ? part : { type: 'image', source: { type: 'base64', media_type: part.mimeType, data: part.data } },
  );
  return { type: 'tool_result', tool_use_id: block.id, content };
}

/** The text and images of a successful result, when its tool has them and there is an image among them. */
function richContent(outcome: ToolCallOutcome): ToolContent[] | undefined {
  const content = outcome.tool?.toContent?.(outcome.result);
  return content?.some((part) => part.type === 'image') ? content : undefined;
}

function parseArguments(name: string, raw: string): { args: unknown } | { error: ToolError } {
  if (raw.trim() === '') return { args: {} };
  try {
    return { args: JSON.parse(raw) };
  } catch (err) {
    return {
      error: toolError(
        'INVALID_ARGUMENTS',
        `The arguments of ${name} are not valid JSON (${(err as Error).message}).`,
        `Call ${name} again with a JSON object that matches its schema.`,
      ),
    };
  }
}
