import { z } from 'zod';
import { WarrenError, type WarrenErrorCode } from '../errors.js';

/** Options every tool run takes. */
export interface ToolRunOptions {
  /** Aborting cancels the sandbox calls the tool makes; the run then resolves to a `CANCELLED` error result. */
  signal?: AbortSignal | undefined;
}

/**
 * Codes an error result can carry: every SDK error code, plus the tool layer's own:
 * `UNKNOWN_TOOL` (a call named no tool of the set), `INVALID_ARGUMENTS` (the arguments did not
 * match the tool's schema, or were not JSON) and `NOT_AVAILABLE` (the sandbox this tool runs on
 * lacks an operation it needs).
 */
export type ToolErrorCode = WarrenErrorCode | 'UNKNOWN_TOOL' | 'INVALID_ARGUMENTS' | 'NOT_AVAILABLE';

/**
 * A failure, reported as a result a model can act on rather than thrown. `error` says what failed,
 * `suggestion` what to do instead. Tool sets whose seed defines an error dictionary (Toolsmith) add
 * that dictionary's fields next to these.
 *
 * @example
 * const result = await tool.run({ path: 'missing.py' });
 * if (isToolError(result)) console.log(result.code, result.error);
 */
export interface ToolError {
  isError: true;
  code: ToolErrorCode;
  error: string;
  suggestion?: string | undefined;
  [field: string]: unknown;
}

/** A JSON Schema object, as LLM APIs take it for a tool's input. */
export type JsonSchema = { type: 'object'; [key: string]: unknown };

/** How a result becomes the text a model reads: `text` results are strings, `json` results are serialised. */
export type ToolOutputKind = 'text' | 'json';

/**
 * One piece of what a model reads: text, or an image (base64) for the APIs whose tool results
 * carry images (Anthropic, MCP). The others read {@link Tool.toText}.
 */
export type ToolContent = { type: 'text'; text: string } | { type: 'image'; mimeType: string; data: string };

/**
 * One tool: data an LLM API can be given (`name`, `description`, `jsonSchema`) and a `run` that
 * never throws. `run` checks its arguments against `inputSchema` first; whatever fails (bad
 * arguments, a sandbox error, a cancelled signal) comes back as a {@link ToolError}.
 *
 * @example
 * const [readFile] = codinTools(sandbox);
 * const text = readFile.toText(await readFile.run({ path: 'a.py', start_line: 10, end_line: 20 }));
 */
// `any` by default so that tools of different inputs fit one list (`Tool[]`); each tool checks its input.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export interface Tool<Input = any, Output = unknown> {
  readonly name: string;
  /** Written for a model: what the tool does, its defaults and limits. */
  readonly description: string;
  /** The zod schema of the arguments (strict: unknown keys are refused). */
  readonly inputSchema: z.ZodType<Input>;
  /** The JSON Schema of the arguments, derived from `inputSchema`. */
  readonly jsonSchema: JsonSchema;
  readonly output: ToolOutputKind;
  run(args: unknown, options?: ToolRunOptions): Promise<Output | ToolError>;
  /** The text a model reads for a result of this tool. */
  toText(result: Output | ToolError): string;
  /** Text and images for APIs whose tool results carry images; absent, the adapters send {@link toText}. */
  toContent?(result: Output): ToolContent[];
}

/** A tool set: the tools of one seed system, in the seed's order. */
export type ToolSet = readonly Tool[];

/** What {@link defineTool} takes. */
export interface ToolDefinition<S extends z.ZodType, Output> {
  name: string;
  description: string;
  input: S;
  output?: ToolOutputKind;
  execute(args: z.output<S>, options: ToolRunOptions): Promise<Output | ToolError>;
  /** Turns a failure into this tool's error result; the default is {@link toolErrorFrom}. */
  onError?: (error: ToolError, args: unknown) => ToolError;
  /** Renders a result as text; the default prints strings as they are and serialises objects as JSON. */
  toText?: (result: Output | ToolError) => string;
  /** Renders a successful result as text and images (see {@link Tool.toContent}). */
  toContent?: (result: Output) => ToolContent[];
}

/**
 * Builds a {@link Tool}: derives its JSON Schema, validates arguments, and turns every failure into
 * an error result.
 *
 * @example
 * const echo = defineTool({
 *   name: 'echo',
 *   description: 'Returns its text argument unchanged.',
 *   input: z.strictObject({ text: z.string() }),
 *   execute: async ({ text }) => text,
 * });
 */
export function defineTool<S extends z.ZodType, Output>(definition: ToolDefinition<S, Output>): Tool<z.input<S>, Output> {
  const output = definition.output ?? 'text';
  const onError = definition.onError ?? ((error: ToolError) => error);
  const toText = definition.toText ?? ((result: Output | ToolError) => defaultText(result, output));
  return {
    name: definition.name,
    description: definition.description,
    inputSchema: definition.input as z.ZodType<z.input<S>>,
    jsonSchema: toJsonSchema(definition.input),
    output,
    toText,
    ...(definition.toContent && { toContent: definition.toContent }),
    async run(args, options = {}) {
      const parsed = definition.input.safeParse(args ?? {});
      if (!parsed.success) return onError(invalidArguments(definition.name, parsed.error), args);
      if (options.signal?.aborted) return onError(toolError('CANCELLED', `${definition.name} was cancelled before it started.`), args);
      try {
        const result = await definition.execute(parsed.data, options);
        return isToolError(result) ? onError(result, args) : result;
      } catch (err) {
        return onError(toolErrorFrom(err), args);
      }
    },
  };
}

/**
 * The JSON Schema of a zod schema as LLM APIs take it: the input side (defaulted fields are
 * optional), without `$schema`.
 *
 * @example
 * toJsonSchema(z.strictObject({ path: z.string() })); // { type: 'object', properties: { path: { type: 'string' } }, ... }
 */
export function toJsonSchema(schema: z.ZodType): JsonSchema {
  const json = z.toJSONSchema(schema, {
    io: 'input',
    unrepresentable: 'any',
    // zod writes the safe-integer bounds on every integer; they say nothing to a model.
    override: ({ jsonSchema }) => {
      if (jsonSchema.maximum === Number.MAX_SAFE_INTEGER) delete jsonSchema.maximum;
      if (jsonSchema.minimum === Number.MIN_SAFE_INTEGER) delete jsonSchema.minimum;
    },
  });
  const { $schema: _drop, ...rest } = json as Record<string, unknown>;
  if (rest['type'] !== 'object') throw new TypeError(`A tool's input schema must be an object schema, got ${JSON.stringify(rest['type'])}.`);
  return rest as JsonSchema;
}

/**
 * True when a tool result is an error result.
 *
 * @example
 * if (isToolError(result)) console.log(result.code);
 */
export function isToolError(value: unknown): value is ToolError {
  return typeof value === 'object' && value !== null && (value as { isError?: unknown }).isError === true;
}

/**
 * Makes an error result.
 *
 * @example
 * return toolError('NOT_FOUND', "No file at 'a.py'.", 'List the folder to see what exists.');
 */
export function toolError(code: ToolErrorCode, error: string, suggestion?: string, extra: Record<string, unknown> = {}): ToolError {
  return suggestion === undefined ? { isError: true, code, error, ...extra } : { isError: true, code, error, suggestion, ...extra };
}

/**
 * Turns anything thrown by a sandbox call into an error result, keeping the SDK error's code and suggestion.
 *
 * @example
 * try { await sandbox.files.read(path); } catch (err) { return toolErrorFrom(err); }
 */
export function toolErrorFrom(err: unknown): ToolError {
  if (isToolError(err)) return err;
  if (err instanceof WarrenError) return toolError(err.code, err.message, err.suggestion);
  if (err instanceof Error && err.name === 'AbortError') return toolError('CANCELLED', 'The call was cancelled.');
  return toolError('INTERNAL', err instanceof Error ? err.message : String(err));
}

function invalidArguments(name: string, error: z.ZodError): ToolError {
  const problems = error.issues.map((issue) => `${issue.path.length ? issue.path.join('.') : '(arguments)'}: ${issue.message}`);
  return toolError(
    'INVALID_ARGUMENTS',
    `Invalid arguments for ${name}: ${problems.join('; ')}.`,
    `Call ${name} again with arguments that match its input schema.`,
  );
}

/**
 * Text form of an error result for tools whose seed returns text: `Error: ...` and the suggestion.
 *
 * @example
 * errorText(toolError('NOT_FOUND', 'No file.', 'List the folder.')); // 'Error: No file.\nList the folder.'
 */
export function errorText(error: ToolError): string {
  return error.suggestion ? `Error: ${error.error}\n${error.suggestion}` : `Error: ${error.error}`;
}

function defaultText(result: unknown, output: ToolOutputKind): string {
  if (isToolError(result)) return errorText(result);
  if (typeof result === 'string' && output === 'text') return result;
  return JSON.stringify(result, null, 2);
}
