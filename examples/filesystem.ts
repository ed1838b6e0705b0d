/**
 * An orchestrator loop on the FileSystemToolset tool set (seed 001) with the OpenAI Chat
 * Completions format, on a sandbox whose file policy only allows Markdown and JSON files.
 * Run: `node examples/run.mjs filesystem` (needs a running Warren).
 */
import { dispatchOpenAIToolCall, filesystemTools, Sandbox, toOpenAITools, type ControllerOptions } from '@warren/sdk';
import { chatModel, show, type ChatMessage, type ScriptedTurn } from './lib/models.js';

const SCRIPT: ScriptedTurn[] = [
  { calls: [{ name: 'write', args: { path: 'notes/plan.md', content: '# Plan\n\n- draft\n- review\n' } }] },
  { calls: [{ name: 'read', args: { path: 'notes/plan.md', max_chars: 10 } }] },
  { calls: [{ name: 'edit', args: { path: 'notes/plan.md', old_text: '- review\n', new_text: '- review\n- ship\n' } }] },
  {
    calls: [
      { name: 'copy', args: { source: 'notes/plan.md', destination: 'archive/plan-v1.md' } },
      { name: 'write', args: { path: 'run.sh', content: 'rm -rf /' } },
    ],
  },
  { calls: [{ name: 'list_files', args: { pattern: '**/*.md' } }] },
  { answer: 'The plan now ends with "ship"; a copy is in archive/.' },
];

/** Runs the loop and returns the tool results in order. */
export async function main(controller: ControllerOptions = {}): Promise<string[]> {
  await using sandbox = await Sandbox.create({ ...controller, policy: { root: '/workspace', suffixes: ['.md', '.json'] } });
  const tools = filesystemTools(sandbox);
  const model = chatModel(SCRIPT);
  const messages: ChatMessage[] = [{ role: 'user', content: 'Add a "ship" step to notes/plan.md and keep a copy of it.' }];
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
