import { describe, expect, it } from '@jest/globals';
import { CheckedTarStream, CodedError, readCheckedTar, TAR_CAPS } from '../src/index.js';
import { archive, END, file, header, longName, pad, pax, record } from '../../../test/support/tar-bytes.js';

function refusal(bytes: Buffer): CodedError {
  try {
    readCheckedTar(bytes);
  } catch (err) {
    if (err instanceof CodedError) return err;
    throw err;
  }
  throw new Error('the archive was accepted');
}

/** Reads `bytes` through {@link CheckedTarStream} in pieces of `piece` bytes: entries with their gathered data. */
function streamed(bytes: Buffer, piece: number): { name: string; kind: string; data: string }[] {
  const reader = new CheckedTarStream();
  const out: { name: string; kind: string; data: string }[] = [];
  let open = false;
  for (let i = 0; i < bytes.length || i === 0; i += piece) {
    for (const step of reader.push(bytes.subarray(i, i + piece))) {
      if (step.type === 'entry') {
        expect(open).toBe(false);
        open = true;
        out.push({ name: step.entry.name, kind: step.entry.kind, data: '' });
      } else if (step.type === 'data') out[out.length - 1]!.data += step.data.toString();
      else open = false;
    }
    if (bytes.length === 0) break;
  }
  reader.end();
  expect(open).toBe(false);
  return out;
}

function streamedRefusal(bytes: Buffer, piece: number): CodedError {
  try {
    streamed(bytes, piece);
  } catch (err) {
    if (err instanceof CodedError) return err;
    throw err;
  }
  throw new Error('the streamed archive was accepted');
}

const PIECES = [1, 7, 511, 512, 513, 100_000];

describe('readCheckedTar: well-formed archives', () => {
  it('reads files, folders, links, a ustar prefix, GNU long names and PAX records', () => {
    const long = `${'d'.repeat(150)}/${'n'.repeat(150)}.txt`;
    const bytes = archive(
      header({ name: './', flag: '5', mode: 0o755 }),
      header({ name: 'dir/', flag: '5', mode: 0o755 }),
      file('dir/a.txt', 'hello'),
      header({ name: 'b.txt', prefix: 'dir/sub', size: 0 }),
      header({ name: 'old-style-dir/', flag: '0' }),
      longName(Buffer.from(`${long}\0`)),
      file('././@LongLink-truncated', 'long'),
      pax(Buffer.concat([record('path', 'dir/ünï.txt'), record('mtime', '1700000000.5'), record('size', '3')])),
      file('PaxHeader-placeholder', 'abc'),
      pax(record('linkpath', `dir/${'t'.repeat(200)}`)),
      header({ name: 'link', flag: '2', linkname: 'PaxHeader' }),
      longName(Buffer.from('dir/a.txt'), 'K'),
      header({ name: 'link2', flag: '2', magic: 'gnu' }),
      pax(Buffer.concat([record('comment', 'a commit id'), record('mtime', '1')]), 'g'),
      file('last.txt', Buffer.alloc(0)),
    );
    const entries = readCheckedTar(bytes);
    expect(entries.map(({ entry, data }) => [entry.kind, entry.name, data.toString()])).toEqual([
      ['directory', 'dir', ''],
      ['file', 'dir/a.txt', 'hello'],
      ['file', 'dir/sub/b.txt', ''],
      ['directory', 'old-style-dir', ''],
      ['file', long, 'long'],
      ['file', 'dir/ünï.txt', 'abc'],
      ['symlink', 'link', ''],
      ['symlink', 'link2', ''],
      ['file', 'last.txt', ''],
    ]);
    for (const piece of PIECES) {
      expect(streamed(bytes, piece).map(({ kind, name, data }) => [kind, name, data])).toEqual(
        entries.map(({ entry, data }) => [entry.kind, entry.name, data.toString()]),
      );
    }
    expect(entries[6]!.entry.linkname).toBe(`dir/${'t'.repeat(200)}`);
    expect(entries[7]!.entry.linkname).toBe('dir/a.txt');
  });

  it('takes an empty input as an empty archive, and a lone end block or trailing zero padding', () => {
    expect(readCheckedTar(Buffer.alloc(0))).toEqual([]);
    expect(readCheckedTar(Buffer.concat([file('a', 'x'), Buffer.alloc(512)]))).toHaveLength(1);
    expect(readCheckedTar(Buffer.concat([file('a', 'x'), Buffer.alloc(10240)]))).toHaveLength(1);
  });
});

describe('readCheckedTar refuses malformed and hostile headers, naming the entry and what is allowed', () => {
  const cases: [string, Buffer, RegExp][] = [
    // The header block itself.
    ['a bad checksum', archive(file('a', 'x', { checksumDelta: 1 })), /checksum is wrong/],
    ['an unknown magic (V7 or garbage)', archive(file('a', 'x', { magic: 'none' })), /neither ustar nor GNU/],
    ['a non-numeric size', archive(header({ name: 'a', sizeField: '00000x00001\0' }), pad(Buffer.from('x'))), /size field is not an octal number/],
    ['a size with trailing junk', archive(header({ name: 'a', sizeField: '00000000001a' }), pad(Buffer.from('x'))), /size field is not an octal number/],
    ['a negative base-256 size', archive(header({ name: 'a', sizeField: '\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xfe' })), /negative or too large/],
    ['data cut short', Buffer.concat([header({ name: 'a', size: 2000 }), Buffer.alloc(512)]), /run past the end/],
    ['no end-of-archive blocks', file('a', 'x'), /cut short/],
    ['bytes after the end blocks', Buffer.concat([file('a', 'x'), END, file('hidden', 'y')]), /bytes after the end-of-archive/],
    ['a name that is not UTF-8', archive(file('', 'x', { name: Buffer.from([0x61, 0xff, 0xfe]) })), /name is not UTF-8/],
    ['an unknown type flag (GNU sparse)', archive(header({ name: 's', flag: 'S' })), /type flag 'S' is not supported/],
    ['a file named after the archive folder', archive(file('./', '', { flag: '0' }), file('.', 'x')), /its name is empty/],
    ['a folder that carries data', archive(header({ name: 'd/', flag: '5', size: 3 }), pad(Buffer.from('abc'))), /directory but carries 3 bytes/],
    // PAX records.
    ['a PAX length that is not a number', archive(pax(Buffer.from('x1 path=a\n')), file('a', 'x')), /does not start with its decimal length/],
    ['a PAX length that overruns', archive(pax(Buffer.from('99 path=a\n')), file('a', 'x')), /does not fit/],
    ['a PAX length that misses the newline', archive(pax(Buffer.from('10 path=ab\n')), file('a', 'x')), /does not end with a newline/],
    [
      'a PAX length that stops short',
      archive(pax(Buffer.from('9 path=a\n\n')), file('a', 'x')),
      /does not start with its decimal length|does not end with a newline/,
    ],
    ['a PAX record with no =', archive(pax(Buffer.from('9 pathab\n')), file('a', 'x')), /not key=value/],
    [
      'trailing bytes after the PAX records',
      archive(pax(Buffer.concat([record('path', 'a'), Buffer.from('junk')])), file('a', 'x')),
      /does not start with its decimal length/,
    ],
    ['a PAX path with a NUL', archive(pax(record('path', 'ok\0/../../etc/passwd')), file('a', 'x')), /PAX 'path' record has a NUL/],
    ['a PAX linkpath with a NUL', archive(pax(record('linkpath', 'a\0b')), header({ name: 'l', flag: '2', linkname: 'a' })), /PAX 'linkpath' record has a NUL/],
    ['a PAX path with ..', archive(pax(record('path', 'a/../../evil')), file('a', 'x')), /has a \.\. segment/],
    ['an absolute PAX path', archive(pax(record('path', '/etc/cron.d/evil')), file('a', 'x')), /is absolute/],
    [
      'an absolute PAX linkpath',
      archive(pax(record('linkpath', '/etc/shadow')), header({ name: 'l', flag: '2', linkname: 'safe' })),
      /link target is absolute/,
    ],
    [
      'a PAX linkpath that leaves',
      archive(pax(record('linkpath', '../../../x')), header({ name: 'l', flag: '2', linkname: 'safe' })),
      /leaves the archive folder/,
    ],
    ['an overlong PAX path', archive(pax(record('path', 'a'.repeat(TAR_CAPS.maxNameBytes + 1))), file('a', 'x')), /longer than 4096 bytes/],
    ['an empty PAX path (unsets the name)', archive(pax(record('path', '')), file('a', 'x')), /record is empty/],
    ['a PAX path that is not UTF-8', archive(pax(record('path', Buffer.from([0x61, 0xc3]))), file('a', 'x')), /not UTF-8/],
    ['a PAX header over the record cap', archive(pax(record('comment', 'c'.repeat(TAR_CAPS.maxRecordBytes)))), /more than the 65536 allowed/],
    ['a duplicated PAX record', archive(pax(Buffer.concat([record('path', 'a'), record('path', 'b')])), file('a', 'x')), /record 'path' twice/],
    ['a non-numeric PAX size', archive(pax(record('size', '1e3')), file('a', 'x')), /not a decimal number/],
    [
      'a PAX size that disagrees with the data',
      archive(pax(record('size', '1')), file('a', 'xyz')),
      /PAX size record \(1\) disagrees with its header's size \(3\)/,
    ],
    ['a larger PAX size that would swallow the next header', archive(pax(record('size', '512')), file('a', 'x'), file('b', 'y')), /disagrees/],
    ['a PAX linkpath on a file', archive(pax(record('linkpath', 'x')), file('a', 'x')), /not a link but/],
    ['GNU sparse records', archive(pax(record('GNU.sparse.map', '0,1')), file('a', 'x')), /sparse file/],
    ['a binary hdrcharset', archive(pax(record('hdrcharset', 'BINARY')), file('a', 'x')), /hdrcharset/],
    ['two PAX headers for one entry', archive(pax(record('path', 'a')), pax(record('path', 'b')), file('a', 'x')), /two PAX headers precede one entry/],
    ['a PAX header with no entry', archive(file('a', 'x'), pax(record('path', 'b'))), /has no entry after it/],
    ['a global header that names a path', archive(pax(record('path', 'every'), 'g'), file('a', 'x')), /global PAX header sets 'path'/],
    ['a global header that sets a size', archive(pax(record('size', '0'), 'g'), file('a', 'x')), /global PAX header sets 'size'/],
    ['a global header between a PAX header and its entry', archive(pax(record('path', 'a')), pax(record('comment', 'x'), 'g'), file('a', 'x')), /lies between/],
    // GNU long names and long links.
    ['a GNU long name with ..', archive(longName(Buffer.from('../../evil\0')), file('x', 'x')), /has a \.\. segment/],
    ['an absolute GNU long name', archive(longName(Buffer.from('/etc/passwd\0')), file('x', 'x')), /is absolute/],
    ['a GNU long name with a NUL inside', archive(longName(Buffer.from('good\0/../../evil\0')), file('x', 'x')), /NUL byte inside/],
    ['an empty GNU long name', archive(longName(Buffer.from('\0')), file('x', 'x')), /GNU long name is empty/],
    [
      'an overlong GNU long name',
      archive(longName(Buffer.from(`${'a'.repeat(TAR_CAPS.maxNameBytes + 1)}\0`)), file('x', 'x')),
      /GNU long name carries 4098 bytes/,
    ],
    ['two GNU long names for one entry', archive(longName(Buffer.from('a\0')), longName(Buffer.from('b\0')), file('x', 'x')), /two GNU long names/],
    [
      'a GNU long name and a PAX path',
      archive(longName(Buffer.from('a\0')), pax(record('path', 'b')), file('x', 'x')),
      /both a PAX path record and a GNU long name/,
    ],
    [
      'a GNU long link and a PAX linkpath',
      archive(longName(Buffer.from('a\0'), 'K'), pax(record('linkpath', 'b')), header({ name: 'l', flag: '2' })),
      /both a PAX linkpath record and a GNU long link/,
    ],
    ['a GNU long link on a file', archive(longName(Buffer.from('a\0'), 'K'), file('x', 'x')), /not a link but/],
    [
      'an absolute GNU long link',
      archive(longName(Buffer.from('/etc/shadow\0'), 'K'), header({ name: 'l', flag: '2', linkname: 'safe' })),
      /link target is absolute/,
    ],
    ['a GNU long name with no entry', archive(file('a', 'x'), longName(Buffer.from('b\0'))), /has no entry after it/],
  ];

  it.each(cases)('%s, whole or in pieces of any size', (_label, bytes, why) => {
    for (const piece of PIECES) {
      const streamedErr = streamedRefusal(bytes, piece);
      expect(streamedErr.code).toBe('INVALID_PARAMS');
      expect(streamedErr.message).toMatch(why);
    }
    const err = refusal(bytes);
    expect(err.code).toBe('INVALID_PARAMS');
    expect(err.message).toMatch(why);
    expect(err.message).toMatch(/is refused: .*Nothing was written\. Allowed: a ustar, GNU or PAX tar archive/);
    expect(err.message).not.toContain('\0');
    expect(err.details).toEqual(
      expect.objectContaining(err.message.startsWith("The archive's header") ? { offset: expect.any(Number) } : { entry: expect.any(String) }),
    );
  });

  it('names the entry a PAX path gave, escaped', () => {
    const err = refusal(archive(pax(record('path', 'evil\n/../x')), file('a', 'x')));
    expect(err.message).toContain("'evil\\x0a/../x'");
  });
});
