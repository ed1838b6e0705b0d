import { describe, expect, it } from '@jest/globals';
import { clampLines, CodedError, splitLines } from '@warren/protocol';
import { lineAnchor } from '@warren/protocol/node';
import { AuditLog } from '../src/audit.js';
import { sliceChars } from '../src/services/fs-read.js';
import { applyLineEdits } from '../src/services/fs-write.js';
import { compileGlob } from '../src/services/glob.js';

const text = (lines: ReturnType<typeof splitLines>) => lines.map((l) => l.text + l.eol).join('');

describe('line and character slicing', () => {
  it('clamps line ranges the way Codin describes', () => {
    expect(clampLines(10, -3, 2, 1000)).toEqual({ first: 1, last: 2, truncated: false });
    expect(clampLines(10, 8, 99, 1000)).toEqual({ first: 8, last: 10, truncated: false });
    expect(clampLines(10, 7, 3, 1000)).toEqual({ first: 7, last: 6, truncated: false });
    expect(clampLines(10, 1, undefined, 4)).toEqual({ first: 1, last: 4, truncated: true });
    expect(clampLines(0, undefined, undefined, 4)).toEqual({ first: 1, last: 0, truncated: false });
    // Codin: a negative end is clamped to 1 too, so start 0 .. end -2 reads line 1 (found when the tool tests' fake and the daemon started sharing this code).
    expect(clampLines(10, 0, -2, 1000)).toEqual({ first: 1, last: 1, truncated: false });
  });

  it('counts characters as code points and never splits a surrogate pair', () => {
    const s = 'a😀b';
    expect(sliceChars(s, 1, 1)).toEqual({ content: '😀', charsRead: 1, totalChars: 3, truncated: true });
    expect(sliceChars(s, 0, undefined)).toEqual({ content: s, charsRead: 3, totalChars: 3, truncated: false });
    expect(sliceChars(s, 5, 2)).toEqual({ content: '', charsRead: 0, totalChars: 3, truncated: false });
  });

  it('splits lines keeping CRLF and a missing final newline', () => {
    expect(splitLines('a\r\nb\nc')).toEqual([
      { text: 'a', eol: '\r\n' },
      { text: 'b', eol: '\n' },
      { text: 'c', eol: '' },
    ]);
    expect(splitLines('')).toEqual([]);
    expect(splitLines('\n')).toEqual([{ text: '', eol: '\n' }]);
  });
});

describe('applyLineEdits (seed 004 batches)', () => {
  const file = splitLines('1\n2\n3\n4\n');
  const at = (n: number) => lineAnchor(n, String(n));

  it('applies every edit against the file as read, whatever the batch order', () => {
    const forward = applyLineEdits(
      file,
      [
        { op: 'replace', pos: at(1), lines: ['one'] },
        { op: 'append', pos: at(1), lines: ['1.5'] },
        { op: 'prepend', pos: at(4), lines: ['3.5'] },
      ],
      'f',
    );
    const backward = applyLineEdits(
      file,
      [
        { op: 'prepend', pos: at(4), lines: ['3.5'] },
        { op: 'append', pos: at(1), lines: ['1.5'] },
        { op: 'replace', pos: at(1), lines: ['one'] },
      ],
      'f',
    );
    expect(text(forward.lines)).toBe('one\n1.5\n2\n3\n3.5\n4\n');
    expect(text(backward.lines)).toBe(text(forward.lines));
  });

  it('deletes with an empty replace, splits multi-line strings, keeps insert order', () => {
    expect(text(applyLineEdits(file, [{ op: 'replace', pos: at(2), end: at(3), lines: [] }], 'f').lines)).toBe('1\n4\n');
    expect(
      text(
        applyLineEdits(
          file,
          [
            { op: 'append', pos: at(4), lines: ['a\nb'] },
            { op: 'append', pos: at(4), lines: ['c'] },
          ],
          'f',
        ).lines,
      ),
    ).toBe('1\n2\n3\n4\na\nb\nc\n');
  });

  it('refuses stale anchors (listing each), overlaps, and inserts inside a replaced range', () => {
    const stale = (() => {
      try {
        applyLineEdits(
          file,
          [
            { op: 'replace', pos: lineAnchor(2, 'two'), lines: [] },
            { op: 'append', pos: lineAnchor(9, '9'), lines: [] },
          ],
          'f',
        );
      } catch (err) {
        return err as CodedError;
      }
      return undefined;
    })();
    expect(stale?.code).toBe('STALE_ANCHOR');
    expect(stale?.details?.stale).toEqual([
      { anchor: lineAnchor(2, 'two'), current: at(2) },
      { anchor: lineAnchor(9, '9'), current: null },
    ]);
    expect(() =>
      applyLineEdits(
        file,
        [
          { op: 'replace', pos: at(1), end: at(3), lines: [] },
          { op: 'replace', pos: at(3), lines: [] },
        ],
        'f',
      ),
    ).toThrow(/overlapping/);
    expect(() =>
      applyLineEdits(
        file,
        [
          { op: 'replace', pos: at(1), end: at(3), lines: [] },
          { op: 'append', pos: at(2), lines: [] },
        ],
        'f',
      ),
    ).toThrow(/inside/);
    expect(() => applyLineEdits(file, [{ op: 'append', pos: 'nope', lines: [] }], 'f')).toThrow(/LINE#ID/);
  });
});

describe('the audit ring', () => {
  const record = (method: string) => ({ time: new Date(0).toISOString(), method, paths: [], outcome: 'ok', bytesIn: 0, bytesOut: 0, durationMs: 0 });

  it('keeps the newest entries, pages by seq, and says when some were dropped', () => {
    const audit = new AuditLog(3);
    for (let i = 0; i < 5; i++) audit.add(record(`m${i}`));
    expect(audit.list({ limit: 10 })).toMatchObject({ lastSeq: 4, entries: [{ seq: 2, method: 'm2' }, { seq: 3 }, { seq: 4 }] });
    expect(audit.list({ since: 0, limit: 10 }).dropped).toBe(true);
    expect(audit.list({ since: 3, limit: 10 })).toMatchObject({ dropped: false, entries: [{ seq: 4 }] });
    expect(audit.list({ limit: 1 }).entries).toHaveLength(1);
  });
});

describe('glob patterns', () => {
  it('matches relative paths with dot files and refuses what could leave or explode', () => {
    const m = compileGlob('**/*.py');
    expect(['a.py', 'x/.b.py', 'x/y/c.py', 'd.txt'].filter(m)).toEqual(['a.py', 'x/.b.py', 'x/y/c.py']);
    for (const bad of ['../*', '/etc/*', 'a/../../b', '*'.repeat(33), '{a,b}'.repeat(17)]) expect(() => compileGlob(bad)).toThrow(CodedError);
  });
});
