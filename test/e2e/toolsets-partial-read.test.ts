import '../support/timeouts.js';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { dispatchOpenAIToolCall, partialReadTools, type ToolSet } from '@warren/sdk';
import { startToolsetSandbox, type ToolsetSandbox } from '../support/toolsets.js';

let callCount = 0;

describe('partial_read tool set (seed 003): a scripted loop over OpenAI Responses function calls, on a real sandbox', () => {
  let env: ToolsetSandbox;
  let tools: ToolSet;
  const log = Array.from({ length: 1000 }, (_, i) => `log line ${i + 1}\n`).join('');
  const minified = Array.from({ length: 3000 }, (_, i) => String.fromCharCode(0x61 + (i % 26))).join('') + 'é€😀';
  const send = async (args: unknown) => {
    const out = await dispatchOpenAIToolCall(tools, {
      type: 'function_call',
      call_id: `c${++callCount}`,
      name: 'read_partial_files',
      arguments: JSON.stringify(args),
    });
    expect(out.type).toBe('function_call_output');
    return out.output;
  };

  beforeAll(async () => {
    env = await startToolsetSandbox();
    tools = partialReadTools(env.context, { excludedFileExtensions: 'png,.key' });
    await env.sandbox.files.write('logs/MyLargeFile.log', log);
    await env.sandbox.files.write('config.ini', '[a]\nx=1\ny=2\n');
    await env.sandbox.files.write('dist/app.min.js', minified);
    await env.sandbox.files.write('secret.key', 'k');
  });
  afterAll(async () => {
    await env?.[Symbol.asyncDispose]();
  });

  it("reads the seed's line-based example", async () => {
    const text = await send({
      requests: [
        { path: 'logs/MyLargeFile.log', start_line: 10, line_count: 11 },
        { path: 'config.ini', start_line: 1, line_count: 5 },
      ],
    });
    const lines = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => `log line ${from + i}`).join('\n');
    expect(text).toBe(`--- File: logs/MyLargeFile.log (lines 10-20) ---\n${lines(10, 20)}\n\n--- File: config.ini (lines 1-3) ---\n[a]\nx=1\ny=2`);
  });

  it("reads the seed's character-based example, counting code points", async () => {
    const text = await send({
      requests: [
        { path: 'dist/app.min.js', start_character: 0, length: 1000 },
        { path: 'dist/app.min.js', start_character: 2999, length: 1000 },
      ],
    });
    expect(text).toBe(
      `--- File: dist/app.min.js (characters 0-1000) ---\n${minified.slice(0, 1000)}\n\n--- File: dist/app.min.js (characters 2999-3003) ---\n${[...minified].slice(2999).join('')}`,
    );
  });

  it('keeps the caps, the beyond-the-end notes and the excluded extensions', async () => {
    expect(await send({ requests: [{ path: 'logs/MyLargeFile.log', start_line: 1, line_count: 501 }] })).toMatch(
      /^Error: Invalid arguments for read_partial_files: requests\.0\.line_count/,
    );
    expect(await send({ requests: [{ path: 'dist/app.min.js', start_character: 0, length: 50_001 }] })).toMatch(/requests\.0\.length/);
    const max = await send({ requests: [{ path: 'logs/MyLargeFile.log', start_line: 501, line_count: 500 }] });
    expect(max.split('\n')).toHaveLength(501);
    expect(max.split('\n')[0]).toBe('--- File: logs/MyLargeFile.log (lines 501-1000) ---');
    expect(await send({ requests: [{ path: 'config.ini', start_line: 9, line_count: 2 }] })).toBe(
      '--- File: config.ini (lines 9-8) ---\nNo lines read: start_line 9 is beyond the end of the file (3 lines).',
    );
    expect(
      await send({
        requests: [
          { path: 'secret.key', start_line: 1, line_count: 1 },
          { path: 'config.ini', start_character: 4, length: 3 },
        ],
      }),
    ).toBe(
      '--- File: secret.key (lines 1-1) ---\nError: reading .key files is not allowed (excluded extensions: .png, .key).\n\n--- File: config.ini (characters 4-7) ---\nx=1',
    );
    expect(await send({ requests: [{ path: '/etc/hostname', start_line: 1, line_count: 1 }] })).toMatch(
      /^--- File: \/etc\/hostname \(lines 1-1\) ---\nError: .*outside the sandbox/,
    );
  });
});
