import { PassThrough } from 'node:stream';
import { describe, expect, it } from '@jest/globals';
import { readLines } from '../src/services/code-kernel.js';
import { nodeCommand } from '../src/services/code-runtimes.js';

function collect(chunks: (string | Buffer)[], max: number): string[] {
  const stream = new PassThrough();
  const lines: string[] = [];
  readLines(stream, (line) => lines.push(line.toString('utf8')), max);
  for (const chunk of chunks) stream.write(chunk);
  return lines;
}

describe('readLines (the bridge reader)', () => {
  it('splits lines across and within chunks', () => {
    expect(collect(['ab', 'c\nd', 'e\n\nf\n'], 100)).toEqual(['abc', 'de', '', 'f']);
  });

  it('drops a line over the cap while it streams by and reads the next one whole', () => {
    expect(collect(['{"t":"ready"}\n', 'x'.repeat(40), 'y'.repeat(40), 'z'.repeat(40), '\nnext\n'], 64)).toEqual(['{"t":"ready"}', 'next']);
    expect(collect(['a'.repeat(65) + '\nafter\n'], 64)).toEqual(['after']);
  });
});

describe('nodeCommand', () => {
  it('runs Node through the runtime loader when the daemon itself was started that way', () => {
    expect(nodeCommand('/opt/warren/ld-linux.so')).toEqual(['/opt/warren/ld-linux.so', '--library-path', '/opt/warren/lib', '/opt/warren/node']);
    expect(nodeCommand('/usr/bin/node')).toEqual(['/usr/bin/node']);
  });
});
