import { posix } from 'node:path';

/**
 * Splits text into lines, each keeping its terminator (`\n` or `\r\n`); a final line without one
 * is still a line, and a trailing newline does not start an empty line. `''` has no lines.
 *
 * @example
 * splitLines('a\nb\n'); // ['a\n', 'b\n']
 */
export function splitLines(text: string): string[] {
  if (text === '') return [];
  const lines = text.split(/(?<=\n)/);
  return lines;
}

/** A line without its terminator. */
export function stripTerminator(line: string): string {
  return line.endsWith('\r\n') ? line.slice(0, -2) : line.endsWith('\n') ? line.slice(0, -1) : line;
}

/** `child` shown under the folder it was listed from (`.` adds nothing). */
export function joinShown(folder: string, child: string): string {
  if (folder === '.' || folder === '' || folder === './') return child;
  return posix.join(folder, child);
}
