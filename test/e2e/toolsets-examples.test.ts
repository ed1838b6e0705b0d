import '../support/timeouts.js';
import { afterAll, beforeAll, describe, expect, it, jest } from '@jest/globals';
import { main as builtin } from '../../examples/builtin.js';
import { main as codin } from '../../examples/codin.js';
import { main as filesystem } from '../../examples/filesystem.js';
import { main as partialRead } from '../../examples/partial-read.js';
import { main as toolsmith } from '../../examples/toolsmith.js';
import { main as vercelAi } from '../../examples/vercel-ai.js';
import { main as dataAnalysis } from '../../examples/e2b-data-analysis.js';
import { startTestController, type TestController } from '../support/fixtures.js';

describe('the examples/ orchestrators run offline against a real Warren, with their scripted models', () => {
  let warren: TestController;
  let controller: { baseUrl: string; apiKey: string };

  beforeAll(async () => {
    warren = await startTestController();
    controller = { baseUrl: warren.url, apiKey: warren.apiKey };
    jest.spyOn(console, 'log').mockImplementation(() => undefined);
  });
  afterAll(async () => {
    await warren?.[Symbol.asyncDispose]();
  });

  it("vercel-ai: the AI SDK's generateText drives Warren's tools to an answer", async () => {
    const { toolResults, answer } = await vercelAi(controller);
    expect(toolResults).toHaveLength(2);
    expect(toolResults[1]).toContain('[2, 3, 5, 7, 11, 13, 17, 19, 23, 29]');
    expect(answer).toMatch(/primes below 30/);
  });

  it('e2b-data-analysis: @e2b/code-interpreter summarises a CSV with pandas and gets its matplotlib chart back as data', async () => {
    const analysis = await dataAnalysis({ apiKey: warren.apiKey, apiUrl: `${warren.url}/e2b`, sandboxUrl: `${warren.url}/e2b` });
    expect(analysis.summary).toBe('best month: Mar (288)');
    expect(analysis.chart).toEqual({
      type: 'bar',
      title: 'Revenue by month',
      bars: [
        { label: 'Jan', value: 215 },
        { label: 'Feb', value: 245 },
        { label: 'Mar', value: 288 },
      ],
    });
    expect(analysis.png).toBe(true);
  });

  it('codin: fixes the script', async () => {
    const transcript = await codin(controller);
    expect(transcript[1]).toMatch(/^Exit code: 1\n[\s\S]*ZeroDivisionError/);
    expect(transcript[2]).toMatch(/^# File: stats\.py\n# Lines 2-3 of 3 total\n\n/);
    expect(transcript[4]).toBe('Exit code: 0\nSTDOUT:\nmean: 0\nmean: 2.0\n');
    expect(transcript[5]).toBe('stats.py');
  });

  it('builtin: edits by anchors and verifies with bash', async () => {
    const transcript = await builtin(controller);
    expect(transcript[2]).toMatch(/^Applied 2 edits to greet\.py/);
    expect(transcript[3]).toBe('Hello, world!\n');
  });

  it('partial-read: reads a window of a log, a slice of a minified file, and refuses a .key file', async () => {
    const [text] = await partialRead(controller);
    expect(text).toContain('--- File: logs/app.log (lines 498-502) ---\nINFO request 498 ok\nINFO request 499 ok\nERROR disk full\n');
    expect(text).toContain('--- File: dist/app.min.js (characters 0-60) ---\n');
    expect(text).toContain('--- File: secrets/prod.key (lines 1-1) ---\nError: reading .key files is not allowed');
  });

  it('filesystem: edits and copies under a suffix allow-list that refuses run.sh', async () => {
    const transcript = await filesystem(controller);
    expect(JSON.parse(transcript[1]!)).toEqual({ content: '# Plan\n\n- ', truncated: true, total_chars: 25, offset: 0, chars_read: 10 });
    expect(transcript[4]).toMatch(/^SuffixNotAllowedError: /);
    expect(JSON.parse(transcript[5]!)).toEqual(['archive/plan-v1.md', 'notes/plan.md']);
  });

  it('toolsmith: raises the pylint score to 10 and keeps the tests green', async () => {
    const transcript = (await toolsmith(controller)).map((text) => JSON.parse(text) as Record<string, unknown>);
    expect(transcript[2]).toEqual(['./sandbox/dataset/bad_code.py', './sandbox/dataset/test_bad_code.py']);
    expect(transcript[7]).toMatchObject({ score: 10, total_issues: 0 });
    expect(transcript[8]).toMatchObject({ passed: 1, failed: 0, total: 1, success_rate: 100, exit_code: 0 });
  });
});
