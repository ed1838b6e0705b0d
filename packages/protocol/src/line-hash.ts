import { createHash } from 'node:crypto';

/** How many hex digits a line anchor's hash has (seed 004's `LINE#ID`, e.g. `10#A1B2`). */
export const LINE_HASH_LENGTH = 4;

/**
 * The content hash of one line for hash-anchored editing (seed 004): the first four hex digits,
 * uppercase, of the SHA-256 of the line's UTF-8 bytes, without its line terminator (`\n` or
 * `\r\n`). The agent computes it when it reads and checks it when it edits; the tool sets print
 * it. Two lines differing only in trailing spaces hash differently, on purpose: an edit anchored
 * on stale whitespace is stale.
 *
 * @example
 * lineHash('def my_function():'); // four uppercase hex digits
 */
export function lineHash(line: string): string {
  return createHash('sha256').update(line, 'utf8').digest('hex').slice(0, LINE_HASH_LENGTH).toUpperCase();
}

/** Formats a line anchor: `LINE#ID`. */
export function lineAnchor(lineNumber: number, line: string): string {
  return `${lineNumber}#${lineHash(line)}`;
}

/** Parses `LINE#ID`; undefined when the text is not an anchor. */
export function parseLineAnchor(anchor: string): { line: number; hash: string } | undefined {
  const match = /^(\d{1,9})#([0-9A-Fa-f]{4})$/.exec(anchor.trim());
  if (!match) return undefined;
  const line = Number(match[1]);
  return line >= 1 ? { line, hash: match[2]!.toUpperCase() } : undefined;
}
