import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import {
  builtinTools,
  codinTools,
  filesystemTools,
  isToolError,
  partialReadTools,
  runToolCall,
  toolsmithTools,
  type ToolSet,
  type ToolTarget,
} from '@warren/sdk';
import { startTestAgent, type TestAgent } from '../support/fixtures.js';

/**
 * One scripted conversation with a tool set: each step's tool, arguments and the text a model reads.
 * The same files drive the Python SDK's tool sets (packages/sdk-python/tests/test_toolsets.py), so
 * the two SDKs cannot drift. `{root}` stands for the sandbox root; a step with `code` instead of
 * `text` compares only the error code (argument checks are worded by each SDK's validator).
 */
interface Transcript {
  toolSet: string;
  folder: string;
  /** Files written (through the SDK's files.write) before the first step. */
  files?: Record<string, string>;
  steps: { tool: string; args: unknown; text?: string; textStartsWith?: string; isError?: boolean; code?: string }[];
}

const dir = path.resolve(import.meta.dirname, '..', 'fixtures', 'toolsets');
const transcripts = readdirSync(dir)
  .filter((f) => f.endsWith('.json'))
  .map((f) => ({ file: f, transcript: JSON.parse(readFileSync(path.join(dir, f), 'utf8')) as Transcript }));
const SETS: Record<string, (target: ToolTarget) => ToolSet> = {
  builtin: builtinTools,
  codin: codinTools,
  filesystem: filesystemTools,
  partialRead: partialReadTools,
  toolsmith: toolsmithTools,
};

describe('tool-set transcripts shared with the Python SDK', () => {
  let agent: TestAgent;
  beforeAll(async () => {
    agent = await startTestAgent();
  });
  afterAll(async () => {
    await agent?.[Symbol.asyncDispose]();
  });

  it.each(transcripts)('$file', async ({ transcript }) => {
    const tools = SETS[transcript.toolSet]!(agent);
    for (const [file, content] of Object.entries(transcript.files ?? {})) await agent.files.write(file, content);
    for (const step of transcript.steps) {
      const outcome = await runToolCall(tools, step.tool, step.args);
      const seen = { tool: step.tool, isError: outcome.isError, text: outcome.text };
      const code = isToolError(outcome.result) ? outcome.result.code : undefined;
      // WARREN_TRANSCRIPT_DUMP=1 prints what the TypeScript tool sets answer, to write a new step's expected text.
      if (process.env.WARREN_TRANSCRIPT_DUMP) {
        console.log(JSON.stringify({ ...seen, code }));
        continue;
      }
      if (step.text !== undefined) expect(seen).toEqual({ tool: step.tool, isError: step.isError ?? false, text: step.text.replaceAll('{root}', agent.root) });
      else expect(seen).toMatchObject({ tool: step.tool, isError: step.isError ?? false });
      if (step.textStartsWith !== undefined) expect(outcome.text.startsWith(step.textStartsWith)).toBe(true);
      if (step.code !== undefined) expect([step.tool, code]).toEqual([step.tool, step.code]);
    }
  });
});
