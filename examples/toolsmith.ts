/**
 * The Toolsmith "complete workflow" (seed 002) as an orchestrator loop with the OpenAI Chat
 * Completions format: pylint and pytest run inside the sandbox, every operation is logged.
 * Run: `node examples/run.mjs toolsmith` (needs a running Warren).
 */
import { dispatchOpenAIToolCall, Sandbox, toolsmithTools, toOpenAITools, type ControllerOptions, type ToolsmithLogEntry } from '@warren/sdk';
import { chatModel, show, type ChatMessage, type ScriptedTurn } from './lib/models.js';

const BAD = 'import os\ndef calculate_sum(a,b):\n    return a+b\n';
const FIXED = '"""Sums."""\n\n\ndef calculate_sum(first: int, second: int) -> int:\n    """Calculate the sum of two numbers."""\n    return first + second\n';
const TEST = 'from bad_code import calculate_sum\n\n\ndef test_addition():\n    assert calculate_sum(2, 3) == 5\n';

const SCRIPT: ScriptedTurn[] = [
  {
    calls: [
      { name: 'write_file', args: { file_path: './sandbox/dataset/bad_code.py', content: BAD } },
      { name: 'write_file', args: { file_path: './sandbox/dataset/test_bad_code.py', content: TEST } },
    ],
  },
  { calls: [{ name: 'list_files', args: { directory: './sandbox/dataset' } }] },
  {
    calls: [
      { name: 'run_pylint_analysis', args: { file_path: './sandbox/dataset/bad_code.py' } },
      { name: 'add_docstring', args: { file_path: './sandbox/dataset/bad_code.py' } },
    ],
  },
  { calls: [{ name: 'validate_python_syntax', args: { code: FIXED } }] },
  { calls: [{ name: 'apply_fix', args: { file_path: './sandbox/dataset/bad_code.py', fixed_code: FIXED } }] },
  {
    calls: [
      { name: 'run_pylint_analysis', args: { file_path: './sandbox/dataset/bad_code.py' } },
      { name: 'run_pytest', args: { directory: './sandbox/dataset' } },
    ],
  },
  { answer: 'bad_code.py now scores 10/10 and its tests pass.' },
];

/** Runs the loop and returns the tool results in order. */
export async function main(controller: ControllerOptions = {}): Promise<string[]> {
  await using sandbox = await Sandbox.create(controller);
  const log: ToolsmithLogEntry[] = [];
  const tools = toolsmithTools(sandbox, { onLog: (entry) => log.push(entry) });
  const model = chatModel(SCRIPT);
  const messages: ChatMessage[] = [{ role: 'user', content: 'Raise the pylint score of ./sandbox/dataset/bad_code.py without breaking its tests.' }];
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
  show('operation log:', log.map((e) => `${e.timestamp} ${e.agent} ${e.action} ${e.operation} ${e.status}`).join('\n'));
  return transcript;
}
