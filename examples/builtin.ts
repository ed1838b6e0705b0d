/**
 * An orchestrator loop on the BuiltinToolsSkill tool set (seed 004) with the Anthropic Messages
 * format: read with LINE#ID anchors, edit by anchors, verify with bash.
 * Run: `node examples/run.mjs builtin` (needs a running Warren). The model is scripted unless
 * WARREN_EXAMPLE_REAL=1 and ANTHROPIC_API_KEY are set.
 */
import { builtinTools, dispatchAnthropicToolUse, Sandbox, toAnthropicTools, type ControllerOptions } from '@warren/sdk';
import { anthropicModel, show, type AnthropicMessage, type ScriptedTurn } from './lib/models.js';

/** The anchor of the line of a read_file result whose content is `text`, as a model would copy it. */
const anchorOf = (readResult: string, text: string) => {
  const line = readResult.split('\n').find((l) => l.slice(l.indexOf('|') + 1) === text);
  if (!line) throw new Error(`no line '${text}' in the read_file result`);
  return line.slice(0, line.indexOf('|'));
};

const SCRIPT: ScriptedTurn[] = [
  { calls: [{ name: 'write_file', args: { path: 'greet.py', content: 'def greet(name):\n    return "Hello " + name\n\nprint(greet("world"))\n' } }] },
  { calls: [{ name: 'read_file', args: { path: 'greet.py' } }] },
  {
    calls: [
      (results) => ({
        name: 'edit_file',
        args: {
          file_path: 'greet.py',
          edits_json: JSON.stringify([
            { op: 'replace', pos: anchorOf(results.at(-1)!, '    return "Hello " + name'), lines: ['    return f"Hello, {name}!"'] },
            { op: 'prepend', pos: anchorOf(results.at(-1)!, 'def greet(name):'), lines: ['"""Greetings."""', ''] },
          ]),
        },
      }),
    ],
  },
  { calls: [{ name: 'bash', args: { command: 'python3 greet.py' } }] },
  { answer: 'greet.py now prints "Hello, world!".' },
];

/** Runs the loop and returns the tool results in order. */
export async function main(controller: ControllerOptions = {}): Promise<string[]> {
  await using sandbox = await Sandbox.create(controller);
  const tools = builtinTools(sandbox);
  const model = anthropicModel(SCRIPT);
  const messages: AnthropicMessage[] = [{ role: 'user', content: 'Make greet.py print "Hello, world!".' }];
  const transcript: string[] = [];
  for (let turn = 0; turn < 20; turn++) {
    const response = await model.create({ system: 'You edit code in a sandbox with hash-anchored edits.', messages, tools: toAnthropicTools(tools) });
    messages.push({ role: 'assistant', content: response.content });
    if (response.stop_reason !== 'tool_use') {
      show('model:', response.content.map((b) => (b.type === 'text' ? b.text : '')).join(''));
      break;
    }
    const results = [];
    for (const block of response.content) {
      if (block.type !== 'tool_use') continue;
      const result = await dispatchAnthropicToolUse(tools, block);
      show(`${block.name}(${JSON.stringify(block.input)})`, result.content);
      transcript.push(result.content);
      results.push(result);
    }
    messages.push({ role: 'user', content: results });
  }
  return transcript;
}
