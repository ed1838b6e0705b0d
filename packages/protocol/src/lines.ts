/** How many hex digits a line anchor's hash has (seed 004's `LINE#ID`, e.g. `10#A1B2`). */
export const LINE_HASH_LENGTH = 4;

/** Parses `LINE#ID`; undefined when the text is not an anchor. */
export function parseLineAnchor(anchor: string): { line: number; hash: string } | undefined {
  const match = /^(\d{1,9})#([0-9A-Fa-f]{4})$/.exec(anchor.trim());
  if (!match) return undefined;
  const line = Number(match[1]);
  return line >= 1 ? { line, hash: match[2]!.toUpperCase() } : undefined;
}

/** One line of a text file: its text without the terminator, and the terminator (`\n`, `\r\n`, or none at the end). */
export interface Line {
  text: string;
  eol: string;
}

/**
 * Splits text into lines, the one splitter the daemon and the tool sets share: `a\nb\n` and
 * `a\nb` are both two lines, `` is none, and a line keeps its terminator apart from its text.
 *
 * @example
 * splitLines('a\r\nb'); // [{ text: 'a', eol: '\r\n' }, { text: 'b', eol: '' }]
 */
export function splitLines(text: string): Line[] {
  const lines: Line[] = [];
  let start = 0;
  while (start < text.length) {
    const nl = text.indexOf('\n', start);
    if (nl === -1) {
      lines.push({ text: text.slice(start), eol: '' });
      break;
    }
    const crlf = nl > start && text.charCodeAt(nl - 1) === 13;
    lines.push({ text: text.slice(start, crlf ? nl - 1 : nl), eol: crlf ? '\r\n' : '\n' });
    start = nl + 1;
  }
  return lines;
}

/**
 * Which lines a line range picks out of `total`: below 1 is 1, past the end is the end, a start
 * past the end is an empty answer (`last = first - 1`), and at most `maxLines` lines.
 */
export function clampLines(
  total: number,
  startLine: number | undefined,
  endLine: number | undefined,
  maxLines: number,
): { first: number; last: number; truncated: boolean } {
  const first = Math.max(1, startLine ?? 1);
  // Both ends clamp to 1 (Codin: `end_line: -2` reads line 1), then to the last line.
  const wanted = Math.min(total, Math.max(1, endLine ?? total));
  if (first > wanted) return { first, last: first - 1, truncated: false };
  const last = Math.min(wanted, first + maxLines - 1);
  return { first, last, truncated: last < wanted };
}

/** Lines `startLine`..`endLine` of a text with their terminators, clamped as {@link clampLines} says. */
export function sliceLines(text: string, startLine: number | undefined, endLine: number | undefined, maxLines: number) {
  const lines = splitLines(text);
  const { first, last, truncated } = clampLines(lines.length, startLine, endLine, maxLines);
  let content = '';
  for (let n = first; n <= last; n++) content += lines[n - 1]!.text + lines[n - 1]!.eol;
  return { content, startLine: first, endLine: last, totalLines: lines.length, truncated };
}
