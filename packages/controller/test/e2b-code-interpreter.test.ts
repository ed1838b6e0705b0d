import { describe, expect, it } from '@jest/globals';
import { CHART_MIME, DATA_MIME, doorLanguage, OutputRelay, resultLine } from '../src/e2b/interpreter/code-interpreter.js';
import { E2bHttpError } from '../src/e2b/errors.js';
import { bashCell } from '../src/e2b/interpreter/bash.js';

describe("the code interpreter's door, pure parts", () => {
  it("maps E2B's language names, python when none, and refuses any other with 400 naming what is served", () => {
    expect(doorLanguage(undefined)).toBe('python');
    expect(doorLanguage(null)).toBe('python');
    expect(doorLanguage(' JS ')).toBe('javascript');
    expect(doorLanguage('ts')).toBe('typescript');
    expect(doorLanguage('sh')).toBe('bash');
    expect(() => doorLanguage('r')).toThrow(E2bHttpError);
    expect(() => doorLanguage('java')).toThrow(/python, javascript \(js\), typescript \(ts\) or bash/);
  });

  it("words a display output as E2B's result line: known MIME types by field name, a quoted text unquoted, the rest under extra", () => {
    expect(resultLine({ isMainResult: true, data: { 'text/plain': "'hi'", 'text/html': '<b>x</b>' }, truncated: false })).toEqual({
      type: 'result',
      text: 'hi',
      html: '<b>x</b>',
      is_main_result: true,
    });
    const chart = { type: 'line', elements: [] };
    expect(
      resultLine({ isMainResult: false, data: { 'image/png': 'iVBOR', [CHART_MIME]: chart, [DATA_MIME]: { a: [1] }, 'text/x-custom': 'c' }, truncated: false }),
    ).toEqual({ type: 'result', png: 'iVBOR', chart, data: { a: [1] }, extra: { 'text/x-custom': 'c' }, is_main_result: false });
    // A lone quote is text, not a quoted string.
    expect(resultLine({ isMainResult: true, data: { 'text/plain': "'" }, truncated: false })['text']).toBe("'");
  });

  it('relays output as text lines, joins a character split across events, and notes bytes that never came as events', () => {
    const lines: Record<string, unknown>[] = [];
    const relay = new OutputRelay({ write: (line) => void lines.push(line) });
    const euro = Buffer.from('€');
    relay.chunk('stdout', { offset: 0 }, Buffer.concat([Buffer.from('a'), euro.subarray(0, 1)]));
    relay.chunk('stdout', { offset: 2 }, euro.subarray(1));
    // 10 bytes left out between two events (the kernel's cap, or events dropped while congested).
    relay.chunk('stdout', { offset: 14 }, Buffer.from('z\n'));
    relay.chunk('stderr', { offset: 0 }, Buffer.from('e'));
    // The result counts 5 more stderr bytes than came as events.
    relay.finish(16, 6);
    const text = (name: string) =>
      lines
        .filter((l) => l['type'] === name)
        .map((l) => l['text'])
        .join('');
    expect(text('stdout')).toBe('a€\n[... 10 bytes of stdout omitted ...]\nz\n');
    expect(text('stderr')).toBe('e\n[... 5 bytes of stderr omitted ...]\n');
    expect(lines.every((l) => typeof l['timestamp'] === 'number')).toBe(true);
  });

  it("gives a bash run's envs to that command alone, quoted, and refuses names that are no shell variables", () => {
    expect(bashCell('echo hi', undefined)).toBe('echo hi');
    expect(bashCell('echo hi', {})).toBe('echo hi');
    expect(bashCell("echo '$A'", { A: "it's", B_2: '' })).toBe(`A='it'\\''s' B_2='' eval 'echo '\\''$A'\\'''`);
    expect(() => bashCell('true', { '2x': 'y' })).toThrow(/not a shell variable name/);
    expect(() => bashCell('true', { 'a;b': 'y' })).toThrow(E2bHttpError);
  });
});
