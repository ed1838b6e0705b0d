import { describe, expect, it } from '@jest/globals';
import type { SandboxInfo, SandboxMetrics } from '@warren/protocol';
import { topRows, watchLine } from '../src/live-commands.js';
import { keyValues, printable, table } from '../src/output.js';

describe('text chosen by sandbox code on a terminal', () => {
  it('shows control characters and bidi overrides as escapes, and leaves other text alone', () => {
    expect(printable('a\x1b[2Jb')).toBe('a\\x1b[2Jb');
    expect(printable('title\x1b]0;owned\x07')).toBe('title\\x1b]0;owned\\x07');
    expect(printable('cr\rlf\ntab\t')).toBe('cr\\x0dlf\\x0atab\\x09');
    expect(printable('c1\u009bx del\u007f')).toBe('c1\\x9bx del\\x7f');
    expect(printable('evil\u202egnp.exe')).toBe('evil\\u202egnp.exe');
    expect(printable('naïve 文件 🙂 ok')).toBe('naïve 文件 🙂 ok');
  });

  it('is applied to every table cell and key-value line', () => {
    expect(table(['NAME'], [['a\x1b[31mred']])).toBe('NAME\na\\x1b[31mred\n');
    expect(keyValues([['label', 'x\x1b[2J']])).toBe('label: x\\x1b[2J\n');
  });
});

describe('warren watch lines', () => {
  it('prints each kind of event on one line, with escaped names', () => {
    expect(watchLine({ type: 'create', path: 'src/a.ts' })).toBe('create  src/a.ts');
    expect(watchLine({ type: 'create', path: 'src', directory: true })).toBe('create  src/');
    expect(watchLine({ type: 'rename', path: 'b', from: 'a' })).toBe('rename  a -> b');
    expect(watchLine({ type: 'write', path: 'x\ny' })).toBe('write   x\\x0ay');
    expect(watchLine({ type: 'overflow', reason: 'queue', dropped: 12 })).toBe('overflow  (queue, 12 dropped): rescan the folder');
  });
});

describe('warren top rows', () => {
  const info = (id: string, state: SandboxInfo['state'] = 'running') => ({ id, state, image: 'img' }) as SandboxInfo;
  const sample = (id: string, cpuPercent?: number): SandboxMetrics => ({
    sandboxId: id,
    time: '2026-11-26T00:00:00.000Z',
    cpuSeconds: 1,
    ...(cpuPercent === undefined ? {} : { cpuPercent }),
    memoryBytes: 2 * 1024 * 1024,
    memoryLimitBytes: 512 * 1024 * 1024,
    pids: 3,
    disk: { usedBytes: 1024, limitBytes: 1024 * 1024 },
  });

  it('sorts by CPU share, busiest first, then sandboxes not yet sampled twice, then those without a sample', () => {
    const rows = topRows(
      [info('idle'), info('stopped', 'exited'), info('busy'), info('new')],
      new Map([
        ['idle', sample('idle', 0.5)],
        ['busy', sample('busy', 98.2)],
        ['new', sample('new')],
      ]),
    );
    expect(rows.map((r) => r[0])).toEqual(['busy', 'idle', 'new', 'stopped']);
    expect(rows[0]).toEqual(['busy', 'running', '98.2%', '2.0 MiB / 512.0 MiB', '3', '1.0 KiB / 1.0 MiB', 'img']);
    expect(rows[2]![2]).toBe('...');
    expect(rows[3]).toEqual(['stopped', 'exited', '-', '-', '-', '-', 'img']);
  });
});
