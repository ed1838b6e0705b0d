/**
 * An orchestrator loop on the ReadPartialFilesTool tool set (seed 003) with the OpenAI Responses
 * API format. The same tools in the Vercel AI SDK's shape are one call away:
 * `generateText({ model, tools: toVercelAITools(tools), prompt })`.
 * Run: `node examples/run.mjs partial-read` (needs a running Warren).
 */
import { dispatchOpenAIToolCall, partialReadTools, Sandbox, toOpenAITools, type ControllerOptions } from '@warren/sdk';
import { responsesModel, show, type ResponsesItem, type ScriptedTurn } from './lib/models.js';

const SCRIPT: ScriptedTurn[] = [
  {
    calls: [
      {
        name: 'read_partial_files',
        args: {
          requests: [
            { path: 'logs/app.log', start_line: 498, line_count: 5 },
            { path: 'dist/app.min.js', start_character: 0, length: 60 },
            { path: 'secrets/prod.key', start_line: 1, line_count: 1 },
          ],
        },
      },
    ],
  },
  { answer: 'The error is at line 500 of logs/app.log.' },
];

/** Runs the loop and returns the tool results in order. */
export async function main(controller: ControllerOptions = {}): Promise<string[]> {
  await using sandbox = await Sandbox.create(controller);
  const log = Array.from({ length: 600 }, (_, i) => (i === 499 ? 'ERROR disk full\n' : `INFO request ${i + 1} ok\n`)).join('');
  await sandbox.files.write('logs/app.log', log);
  await sandbox.files.write('dist/app.min.js', 'function a(b){return b*2}'.repeat(200));
  await sandbox.files.write('secrets/prod.key', 'do-not-show');

  const tools = partialReadTools(sandbox, { excludedFileExtensions: 'key,pem' });
  const model = responsesModel(SCRIPT);
  const input: ResponsesItem[] = [{ role: 'user', content: 'Find the error near line 500 of logs/app.log.' }];
  const transcript: string[] = [];
  for (let turn = 0; turn < 20; turn++) {
    const { output } = await model.create({ input, tools: toOpenAITools(tools, { api: 'responses' }) });
    input.push(...output);
    const calls = output.filter((item): item is Extract<ResponsesItem, { type: 'function_call' }> => 'type' in item && item.type === 'function_call');
    if (calls.length === 0) {
      show('model:', output.map((item) => ('type' in item && item.type === 'message' ? item.content.map((c) => c.text).join('') : '')).join(''));
      break;
    }
    for (const call of calls) {
      const reply = await dispatchOpenAIToolCall(tools, call);
      show(`${call.name}(${call.arguments})`, reply.output);
      transcript.push(reply.output);
      input.push(reply);
    }
  }
  return transcript;
}
