import { describe, expect, it } from '@jest/globals';
import { formatCharSegment, formatLineSegment, parseExcludedExtensions, partialReadTools, toAnthropicTools, type Tool } from '../../src/index.js';
import { fakeContext, numberedLines } from './fakes.js';

const body = (from: number, to: number, prefix = 'line ') => Array.from({ length: to - from + 1 }, (_, i) => `${prefix}${from + i}`).join('\n');
const minified = 'x'.repeat(500) + 'MARK' + 'y'.repeat(1496);
const json = Array.from({ length: 8000 }, (_, i) => String.fromCharCode(97 + (i % 26))).join('');

function tool(excluded?: string): Tool {
  const context = fakeContext({
    'logs/MyLargeFile.log': numberedLines(40, 'log '),
    'config.ini': numberedLines(12, 'key'),
    'dist/app.min.js': minified,
    'data/large-dataset.json': json,
    'big.txt': numberedLines(2000),
    'logo.PNG': 'binary',
  });
  return partialReadTools(context, { excludedFileExtensions: excluded })[0]!;
}

describe('partial_read (seed 003) read_partial_files', () => {
  it("has the seed's parameters and caps in its JSON Schema", () => {
    const schema = toAnthropicTools([tool()])[0]!.input_schema as unknown as {
      properties: { requests: { items: { properties: Record<string, Record<string, unknown>> } } };
    };
    const item = schema.properties.requests.items.properties;
    expect(item['start_line']).toMatchObject({ type: 'integer', minimum: 1 });
    expect(item['line_count']).toMatchObject({ type: 'integer', minimum: 1, maximum: 500 });
    expect(item['start_character']).toMatchObject({ type: 'integer', minimum: 0 });
    expect(item['length']).toMatchObject({ type: 'integer', minimum: 1, maximum: 50000 });
  });

  it("Line-Based Reading example: lines 10-20 of MyLargeFile.log and 1-5 of config.ini, with the seed's headers", async () => {
    const result = await tool().run({
      requests: [
        { path: 'logs/MyLargeFile.log', start_line: 10, line_count: 11 },
        { path: 'config.ini', start_line: 1, line_count: 5 },
      ],
    });
    expect(result).toBe(
      `--- File: logs/MyLargeFile.log (lines 10-20) ---\n${body(10, 20, 'log ')}\n\n--- File: config.ini (lines 1-5) ---\n${body(1, 5, 'key')}`,
    );
  });

  it("Character-Based Reading example: first 1000 characters and characters 5000-6000, with the seed's headers", async () => {
    const result = await tool().run({
      requests: [
        { path: 'dist/app.min.js', start_character: 0, length: 1000 },
        { path: 'data/large-dataset.json', start_character: 5000, length: 1000 },
      ],
    });
    expect(result).toBe(
      `--- File: dist/app.min.js (characters 0-1000) ---\n${minified.slice(0, 1000)}\n\n--- File: data/large-dataset.json (characters 5000-6000) ---\n${json.slice(5000, 6000)}`,
    );
  });

  it('reads up to the end when line_count or length asks for more than there is', async () => {
    await expect(tool().run({ requests: [{ path: 'config.ini', start_line: 10, line_count: 500 }] })).resolves.toBe(
      `--- File: config.ini (lines 10-12) ---\n${body(10, 12, 'key')}`,
    );
    await expect(tool().run({ requests: [{ path: 'dist/app.min.js', start_character: 1990, length: 50000 }] })).resolves.toBe(
      `--- File: dist/app.min.js (characters 1990-2000) ---\n${minified.slice(1990)}`,
    );
  });

  it('says when start_line or start_character is beyond the end of the file', async () => {
    await expect(tool().run({ requests: [{ path: 'config.ini', start_line: 50, line_count: 5 }] })).resolves.toBe(
      '--- File: config.ini (lines 50-49) ---\nNo lines read: start_line 50 is beyond the end of the file (12 lines).',
    );
    await expect(tool().run({ requests: [{ path: 'dist/app.min.js', start_character: 9000, length: 10 }] })).resolves.toBe(
      '--- File: dist/app.min.js (characters 9000-9000) ---\nNo characters read: start_character 9000 is beyond the end of the file (2000 characters).',
    );
  });

  it('refuses line_count above 500 and length above 50,000, telling the model to split the request', async () => {
    const lines = await tool().run({ requests: [{ path: 'big.txt', start_line: 1, line_count: 501 }] });
    expect(lines).toMatchObject({ isError: true, code: 'INVALID_ARGUMENTS' });
    expect((lines as { error: string }).error).toContain('requests.0.line_count');
    const chars = await tool().run({ requests: [{ path: 'big.txt', start_character: 0, length: 50_001 }] });
    expect((chars as { error: string }).error).toContain('requests.0.length');
    await expect(tool().run({ requests: [{ path: 'big.txt', start_line: 1, line_count: 500 }] })).resolves.toBe(
      `--- File: big.txt (lines 1-500) ---\n${body(1, 500)}`,
    );
  });

  it('refuses a request that mixes both modes, or gives half of one', async () => {
    const mixed = await tool().run({ requests: [{ path: 'config.ini', start_line: 1, line_count: 2, start_character: 0, length: 3 }] });
    expect((mixed as { error: string }).error).toContain('not both');
    const half = await tool().run({ requests: [{ path: 'config.ini', start_line: 1 }] });
    expect((half as { error: string }).error).toContain('needs both start_line and line_count');
    const none = await tool().run({ requests: [{ path: 'config.ini' }] });
    expect((none as { error: string }).error).toContain('specify either');
  });

  it("applies excludedFileExtensions (the seed's CSV) to both modes, and still reads the other requests", async () => {
    expect(parseExcludedExtensions(' PNG, .exe ,,zip')).toEqual(['.png', '.exe', '.zip']);
    const result = await tool('png,exe').run({
      requests: [
        { path: 'logo.PNG', start_character: 0, length: 10 },
        { path: 'config.ini', start_line: 1, line_count: 1 },
        { path: 'missing.txt', start_line: 1, line_count: 1 },
      ],
    });
    expect(result).toBe(
      '--- File: logo.PNG (characters 0-10) ---\nError: reading .png files is not allowed (excluded extensions: .png, .exe).\n\n' +
        '--- File: config.ini (lines 1-1) ---\nkey1\n\n' +
        "--- File: missing.txt (lines 1-1) ---\nError: No file at 'missing.txt'. Check the path; list the parent folder to see what exists.",
    );
  });

  it('formats segments as pure functions', () => {
    expect(formatLineSegment('a', { content: 'x\r\ny\r\n', startLine: 3, endLine: 4, totalLines: 9 })).toBe('--- File: a (lines 3-4) ---\nx\r\ny');
    expect(formatCharSegment('b', { content: 'hé', offset: 2, charsRead: 2, totalChars: 10, truncated: true })).toBe('--- File: b (characters 2-4) ---\nhé');
  });
});
