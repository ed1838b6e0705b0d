/**
 * An agent loop with the Vercel AI SDK (`ai` on npm): `generateText` runs the model and Warren's
 * Codin tool set (seed 000) until the model answers, with `toVercelAITools` turning the tools into
 * the AI SDK's shape. Run: `node examples/run.mjs vercel-ai` (needs a running Warren:
 * `scripts/start`, then WARREN_URL and WARREN_API_KEY). The model is the AI SDK's own scripted
 * test model, so it runs offline; put any AI SDK provider's model in its place for a real one.
 */
import { codinTools, Sandbox, toVercelAITools, type ControllerOptions } from '@warren/sdk';
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { show } from './lib/models.js';

/** What the scripted model does, one step at a time: tool calls, then an answer. */
const STEPS: ({ call: string; args: Record<string, unknown> } | { answer: string })[] = [
  { call: 'sandbox_write_file', args: { path: 'primes.py', content: 'print([n for n in range(2, 30) if all(n % d for d in range(2, n))])\n' } },
  { call: 'sandbox_exec', args: { cmd: 'python3 primes.py' } },
  { answer: 'The primes below 30 are 2, 3, 5, 7, 11, 13, 17, 19, 23 and 29.' },
];

const usage = {
  inputTokens: { total: 0, noCache: 0, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 0, text: 0, reasoning: 0 },
};

/** The AI SDK's test model, answering each step from {@link STEPS}. */
function scriptedModel(): MockLanguageModelV3 {
  let step = 0;
  return new MockLanguageModelV3({
    doGenerate: async () => {
      const next = STEPS[step++] ?? { answer: 'done' };
      if ('answer' in next) return { content: [{ type: 'text', text: next.answer }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] };
      return {
        content: [{ type: 'tool-call', toolCallId: `call-${step}`, toolName: next.call, input: JSON.stringify(next.args) }],
        finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
        usage,
        warnings: [],
      };
    },
  });
}

/** Runs the loop; returns each tool result's text and the model's answer. */
export async function main(controller: ControllerOptions = {}): Promise<{ toolResults: string[]; answer: string }> {
  await using sandbox = await Sandbox.create(controller);
  const result = await generateText({
    model: scriptedModel(),
    tools: toVercelAITools(codinTools(sandbox)),
    stopWhen: stepCountIs(10),
    system: 'You write and run small Python programs in a sandbox. Use the tools.',
    prompt: 'Which numbers below 30 are prime? Compute it.',
  });
  const toolResults = result.steps.flatMap((step) => step.toolResults.map((r) => String(r.output)));
  for (const step of result.steps) for (const r of step.toolResults) show(`${r.toolName}(${JSON.stringify(r.input)})`, String(r.output));
  show('model:', result.text);
  return { toolResults, answer: result.text };
}
