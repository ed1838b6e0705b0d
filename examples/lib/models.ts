/**
 * The "models" the examples talk to. By default a scripted fake: a fixed list of tool calls, as
 * a model would send them, so every example runs offline and gives the same transcript each time.
 * Set WARREN_EXAMPLE_REAL=1 with OPENAI_API_KEY or ANTHROPIC_API_KEY to send the same requests to
 * the real API instead (plain fetch, no client library needed).
 */

/** One scripted tool call; a function sees the texts of every tool result so far (e.g. to copy anchors). */
export type ScriptedCall = { name: string; args: Record<string, unknown> } | ((results: string[]) => { name: string; args: Record<string, unknown> });

/** A scripted turn: some tool calls, or the final answer. */
export type ScriptedTurn = { calls: ScriptedCall[] } | { answer: string };

// ---- OpenAI Chat Completions -------------------------------------------------------------------

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | null;
  tool_calls?: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

export interface ChatModel {
  create(request: { messages: ChatMessage[]; tools: unknown[] }): Promise<{ choices: { message: ChatMessage }[] }>;
}

/** A Chat Completions model that plays `turns` in order. */
export function scriptedChatModel(turns: ScriptedTurn[]): ChatModel {
  let next = 0;
  return {
    async create({ messages }) {
      const turn = turns[next++] ?? { answer: 'Done.' };
      if ('answer' in turn) return { choices: [{ message: { role: 'assistant', content: turn.answer } }] };
      const results = messages.filter((m) => m.role === 'tool').map((m) => m.content ?? '');
      const tool_calls = turn.calls.map((call, i) => {
        const { name, args } = typeof call === 'function' ? call(results) : call;
        return { id: `call_${next}_${i}`, type: 'function' as const, function: { name, arguments: JSON.stringify(args) } };
      });
      return { choices: [{ message: { role: 'assistant', content: null, tool_calls } }] };
    },
  };
}

/** The real Chat Completions API, when WARREN_EXAMPLE_REAL=1 and OPENAI_API_KEY are set. */
export function chatModel(turns: ScriptedTurn[]): ChatModel {
  const key = process.env['OPENAI_API_KEY'];
  if (process.env['WARREN_EXAMPLE_REAL'] !== '1' || !key) return scriptedChatModel(turns);
  return {
    async create({ messages, tools }) {
      // This is where a real model is called: the same messages and the same tools.
      const response = await fetch('https://api.openai.com/v1/chat/completions', {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: process.env['OPENAI_MODEL'] ?? 'gpt-4.1-mini', messages, tools }),
      });
      if (!response.ok) throw new Error(`OpenAI answered ${response.status}: ${await response.text()}`);
      return (await response.json()) as { choices: { message: ChatMessage }[] };
    },
  };
}

// ---- OpenAI Responses API ----------------------------------------------------------------------

export type ResponsesItem =
  | { role: 'user' | 'system'; content: string }
  | { type: 'function_call'; call_id: string; name: string; arguments: string }
  | { type: 'function_call_output'; call_id: string; output: string }
  | { type: 'message'; role: 'assistant'; content: { type: 'output_text'; text: string }[] };

export interface ResponsesModel {
  create(request: { input: ResponsesItem[]; tools: unknown[] }): Promise<{ output: ResponsesItem[] }>;
}

/** A Responses API model that plays `turns` in order. */
export function responsesModel(turns: ScriptedTurn[]): ResponsesModel {
  const key = process.env['OPENAI_API_KEY'];
  if (process.env['WARREN_EXAMPLE_REAL'] === '1' && key) {
    return {
      async create({ input, tools }) {
        const response = await fetch('https://api.openai.com/v1/responses', {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: process.env['OPENAI_MODEL'] ?? 'gpt-4.1-mini', input, tools }),
        });
        if (!response.ok) throw new Error(`OpenAI answered ${response.status}: ${await response.text()}`);
        return (await response.json()) as { output: ResponsesItem[] };
      },
    };
  }
  let next = 0;
  return {
    async create({ input }) {
      const turn = turns[next++] ?? { answer: 'Done.' };
      if ('answer' in turn) return { output: [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: turn.answer }] }] };
      const results = input.flatMap((item) => ('type' in item && item.type === 'function_call_output' ? [item.output] : []));
      return {
        output: turn.calls.map((call, i) => {
          const { name, args } = typeof call === 'function' ? call(results) : call;
          return { type: 'function_call' as const, call_id: `call_${next}_${i}`, name, arguments: JSON.stringify(args) };
        }),
      };
    },
  };
}

// ---- Anthropic Messages API --------------------------------------------------------------------

export type AnthropicBlock =
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; input: unknown }
  | { type: 'tool_result'; tool_use_id: string; content: string; is_error?: true };

export interface AnthropicMessage {
  role: 'user' | 'assistant';
  content: string | AnthropicBlock[];
}

export interface AnthropicModel {
  create(request: {
    system: string;
    messages: AnthropicMessage[];
    tools: unknown[];
  }): Promise<{ content: AnthropicBlock[]; stop_reason: 'tool_use' | 'end_turn' }>;
}

/** An Anthropic Messages model that plays `turns` in order. */
export function anthropicModel(turns: ScriptedTurn[]): AnthropicModel {
  const key = process.env['ANTHROPIC_API_KEY'];
  if (process.env['WARREN_EXAMPLE_REAL'] === '1' && key) {
    return {
      async create({ system, messages, tools }) {
        // This is where a real model is called: the same messages and the same tools.
        const response = await fetch('https://api.anthropic.com/v1/messages', {
          method: 'POST',
          headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
          body: JSON.stringify({ model: process.env['ANTHROPIC_MODEL'] ?? 'claude-sonnet-4-5', max_tokens: 4096, system, messages, tools }),
        });
        if (!response.ok) throw new Error(`Anthropic answered ${response.status}: ${await response.text()}`);
        return (await response.json()) as { content: AnthropicBlock[]; stop_reason: 'tool_use' | 'end_turn' };
      },
    };
  }
  let next = 0;
  return {
    async create({ messages }) {
      const turn = turns[next++] ?? { answer: 'Done.' };
      if ('answer' in turn) return { content: [{ type: 'text', text: turn.answer }], stop_reason: 'end_turn' };
      const results = messages.flatMap((m) => (typeof m.content === 'string' ? [] : m.content.flatMap((b) => (b.type === 'tool_result' ? [b.content] : []))));
      return {
        stop_reason: 'tool_use',
        content: turn.calls.map((call, i) => {
          const { name, args } = typeof call === 'function' ? call(results) : call;
          return { type: 'tool_use' as const, id: `toolu_${next}_${i}`, name, input: args };
        }),
      };
    },
  };
}

/** Prints one step of a transcript. */
export function show(label: string, text: string): void {
  const indented = text
    .split('\n')
    .map((line) => `    ${line}`)
    .join('\n');
  console.log(`  ${label}\n${indented}`);
}
