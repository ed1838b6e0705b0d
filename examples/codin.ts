/**
 * An orchestrator loop on the Codin tool set (seed 000) with the OpenAI Chat Completions format.
 * Run: `node examples/run.mjs codin` (needs a running Warren: `scripts/start`, then WARREN_URL
 * and WARREN_API_KEY). The model is scripted unless WARREN_EXAMPLE_REAL=1 and OPENAI_API_KEY are set.
 */
import { codinTools, dispatchOpenAIToolCall, Sandbox, toOpenAITools, type ControllerOptions } from '@warren/sdk';
import { chatModel, show, type ChatMessage, type ScriptedTurn } from './lib/models.js';

const SCRIPT: ScriptedTurn[] = [
  {
    calls: [
      {
        name: 'sandbox_write_file',
        args: { path: 'stats.py', content: 'import sys\nnums = [int(a) for a in sys.argv[1:]]\nprint("mean:", sum(nums) / len(nums))\n' },
      },
    ],
  },
  { calls: [{ name: 'sandbox_exec', args: { cmd: 'python3 stats.py' } }] },
  { calls: [{ name: 'sandbox_read_file', args: { path: 'stats.py', start_line: 2, end_line: 3 } }] },
  {
    calls: [
      {
        name: 'sandbox_write_file',
        args: { path: 'stats.py', content: 'import sys\nnums = [int(a) for a in sys.argv[1:]]\nprint("mean:", sum(nums) / len(nums) if nums else 0)\n' },
      },
    ],
  },
  {
    calls: [
      { name: 'sandbox_exec', args: { cmd: 'python3 stats.py && python3 stats.py 1 2 3' } },
      { name: 'sandbox_list_files', args: {} },
    ],
  },
  { answer: 'stats.py no longer divides by zero on an empty input.' },
];

/** Runs the loop and returns the tool results in order. */
export async function main(controller: ControllerOptions = {}): Promise<string[]> {
  await using sandbox = await Sandbox.create(controller);
  const tools = codinTools(sandbox);
  const model = chatModel(SCRIPT);
  const messages: ChatMessage[] = [
    { role: 'system', content: 'You fix Python scripts in a sandbox. Use the tools.' },
    { role: 'user', content: 'stats.py crashes when called without arguments; fix it.' },
  ];
  const transcript: string[] = [];
  for (let turn = 0; turn < 20; turn++) {
    const { message } = (await model.create({ messages, tools: toOpenAITools(tools) })).choices[0]!;
    messages.push(message);
    if (!message.tool_calls?.length) {
      show('model:', message.content ?? '');
      break;
    }
    for (const call of message.tool_calls) {
      const reply = await dispatchOpenAIToolCall(tools, call);
      show(`${call.function.name}(${call.function.arguments})`, reply.content);
      transcript.push(reply.content);
      messages.push(reply);
    }
  }
  return transcript;
}
