import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { startTestAgent, type TestAgent } from '../support/fixtures.js';

/**
 * Reads that start past the end of a file answer with the file's totals, as the wire result (not
 * the SDK's defaults, which would hide a missing field): `fs.read` in lines says `totalLines` and an
 * empty range (`endLine = startLine - 1`), in characters `totalChars`, in bytes `size`; and
 * `fs.readAnchored` says `totalLines` with no lines.
 */
describe('reads past the end of a file report the totals', () => {
  let agent: TestAgent;
  beforeAll(async () => {
    agent = await startTestAgent();
    await agent.files.write('three.txt', 'one\ntwo\nthree');
    await agent.files.write('empty.txt', '');
  });
  afterAll(async () => agent?.[Symbol.asyncDispose]());

  const read = async (path: string, range: Record<string, unknown>) =>
    (await agent.connection.call('fs.read', { path, range: range as { unit: 'lines' } })).result;

  it.each([
    ['just past the last line', 'three.txt', 4, undefined, 3],
    ['far past it, with an end', 'three.txt', 1000, 2000, 3],
    ['an end before the start', 'three.txt', 9, 2, 3],
    ['any line of an empty file', 'empty.txt', 2, undefined, 0],
  ])('fs.read in lines, %s', async (_what, path, startLine, endLine, totalLines) => {
    const result = await read(path, { unit: 'lines', startLine, ...(endLine === undefined ? {} : { endLine }) });
    expect(result).toMatchObject({ unit: 'lines', bytesRead: 0, truncated: false, startLine, endLine: startLine - 1, totalLines });
    expect(Object.hasOwn(result, 'totalLines')).toBe(true);
  });

  it('fs.read in characters and bytes, and fs.readAnchored, past the end', async () => {
    expect(await read('three.txt', { unit: 'chars', offset: 100 })).toMatchObject({
      unit: 'chars',
      charsRead: 0,
      totalChars: 13,
      truncated: false,
      offset: 100,
    });
    expect(await read('three.txt', { unit: 'bytes', offset: 100 })).toMatchObject({ unit: 'bytes', bytesRead: 0, size: 13, truncated: false, offset: 100 });
    const anchored = (await agent.connection.call('fs.readAnchored', { path: 'three.txt', startLine: 7 })).result;
    expect(anchored).toMatchObject({ lines: [], totalLines: 3, startLine: 7, endLine: 6, truncated: false });
  });
});
