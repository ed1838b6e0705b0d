import { createHash } from 'node:crypto';
import { LINE_HASH_LENGTH } from './lines.js';

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
