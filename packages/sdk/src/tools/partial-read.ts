import { z } from 'zod';
import type { CharSlice, LineSlice } from '../files.js';
import { need } from './context.js';
import { asToolContext, type ToolTarget } from './sandbox-context.js';
import { defineTool, toolErrorFrom, type ToolSet } from './tool.js';

/** Seed 003's cap on `line_count` per request. */
export const PARTIAL_READ_MAX_LINES = 500;
/** Seed 003's cap on `length` per request. */
export const PARTIAL_READ_MAX_CHARACTERS = 50_000;

/** Options of {@link partialReadTools}. */
export interface PartialReadOptions {
  /**
   * Seed 003's `excludedFileExtensions`: extensions that may not be read, as a list or as the
   * seed's comma-separated text (`"png, .exe,zip"`); compared case-insensitively, dot optional.
   */
  excludedFileExtensions?: string[] | string | undefined;
}

const Request = z
  .strictObject({
    path: z.string().min(1).describe('The path to the file (relative to the project root, or absolute within it).'),
    start_line: z.number().int().min(1).optional().describe('Line-based reading: the 1-based line number to start reading from.'),
    line_count: z
      .number()
      .int()
      .min(1)
      .max(PARTIAL_READ_MAX_LINES)
      .optional()
      .describe('Line-based reading: the number of lines to read from start_line. Capped at 500 lines per request to prevent excessive output.'),
    start_character: z.number().int().min(0).optional().describe('Character-based reading: the 0-based character position to start reading from.'),
    length: z
      .number()
      .int()
      .min(1)
      .max(PARTIAL_READ_MAX_CHARACTERS)
      .optional()
      .describe(
        'Character-based reading: the number of characters to read from start_character. Capped at 50,000 characters per request to prevent excessive output.',
      ),
  })
  .superRefine((request, ctx) => {
    const lines = request.start_line !== undefined || request.line_count !== undefined;
    const chars = request.start_character !== undefined || request.length !== undefined;
    if (lines && chars) {
      ctx.addIssue({
        code: 'custom',
        message: 'use either line-based parameters (start_line, line_count) or character-based parameters (start_character, length), not both',
      });
    } else if (lines && (request.start_line === undefined || request.line_count === undefined)) {
      ctx.addIssue({ code: 'custom', message: 'line-based reading needs both start_line and line_count' });
    } else if (chars && (request.start_character === undefined || request.length === undefined)) {
      ctx.addIssue({ code: 'custom', message: 'character-based reading needs both start_character and length' });
    } else if (!lines && !chars) {
      ctx.addIssue({
        code: 'custom',
        message: 'specify either line-based parameters (start_line, line_count) or character-based parameters (start_character, length)',
      });
    }
  });

const Input = z.strictObject({
  requests: z.array(Request).min(1).describe('An array where each object specifies a file and either a range of lines or a range of characters to read.'),
});

/** One request of `read_partial_files`, after validation. */
export type PartialReadRequest = z.output<typeof Request>;

/**
 * A line-mode segment: `--- File: {path} (lines {start}-{end}) ---` then the lines (their final
 * terminator dropped). `end` is the last line read; when `start_line` is past the end of the file
 * nothing is read, `end` is `start - 1`, and a line says so.
 *
 * @example
 * formatLineSegment('config.ini', { content: 'a=1\nb=2\n', startLine: 1, endLine: 2, totalLines: 2 });
 * // '--- File: config.ini (lines 1-2) ---\na=1\nb=2'
 */
export function formatLineSegment(path: string, slice: Omit<LineSlice, 'truncated'>): string {
  const header = `--- File: ${path} (lines ${slice.startLine}-${slice.endLine}) ---`;
  if (slice.endLine < slice.startLine) {
    return `${header}\nNo lines read: start_line ${slice.startLine} is beyond the end of the file (${slice.totalLines} lines).`;
  }
  return `${header}\n${dropFinalTerminator(slice.content)}`;
}

/**
 * A character-mode segment: `--- File: {path} (characters {start}-{end}) ---` (0-based, `end`
 * exclusive: `start + characters read`) then the characters as they are. When `start_character` is
 * past the end nothing is read and a line says so.
 *
 * @example
 * formatCharSegment('dist/app.min.js', { content: 'abc', offset: 0, charsRead: 3, totalChars: 9, truncated: true });
 * // '--- File: dist/app.min.js (characters 0-3) ---\nabc'
 */
export function formatCharSegment(path: string, slice: CharSlice): string {
  const header = `--- File: ${path} (characters ${slice.offset}-${slice.offset + slice.charsRead}) ---`;
  if (slice.charsRead === 0 && slice.offset >= slice.totalChars) {
    return `${header}\nNo characters read: start_character ${slice.offset} is beyond the end of the file (${slice.totalChars} characters).`;
  }
  return `${header}\n${slice.content}`;
}

/**
 * A request that failed: its header names the file and the range asked for, then the error.
 *
 * @example
 * formatFailedSegment({ path: 'a.png', start_line: 1, line_count: 2 }, 'excluded');
 * // '--- File: a.png (lines 1-2) ---\nError: excluded'
 */
export function formatFailedSegment(request: PartialReadRequest, message: string): string {
  const range =
    request.start_line !== undefined
      ? `lines ${request.start_line}-${request.start_line + (request.line_count ?? 1) - 1}`
      : `characters ${request.start_character}-${(request.start_character ?? 0) + (request.length ?? 0)}`;
  return `--- File: ${request.path} (${range}) ---\nError: ${message}`;
}

/**
 * Normalises seed 003's `excludedFileExtensions` to lower-case extensions with a leading dot.
 *
 * @example
 * parseExcludedExtensions('PNG, .exe'); // ['.png', '.exe']
 */
export function parseExcludedExtensions(value: string[] | string | undefined): string[] {
  const list = typeof value === 'string' ? value.split(',') : (value ?? []);
  return list
    .map((ext) => ext.trim().toLowerCase())
    .filter((ext) => ext !== '')
    .map((ext) => (ext.startsWith('.') ? ext : `.${ext}`));
}

/**
 * The excluded extension `path` ends with, if any.
 *
 * @example
 * excludedExtensionOf('logo.PNG', ['.png']); // '.png'
 */
export function excludedExtensionOf(path: string, excluded: string[]): string | undefined {
  const lower = path.toLowerCase();
  return excluded.find((ext) => lower.endsWith(ext));
}

function dropFinalTerminator(text: string): string {
  return text.endsWith('\r\n') ? text.slice(0, -2) : text.endsWith('\n') ? text.slice(0, -1) : text;
}

/**
 * Seed 003: `read_partial_files`, many files in one call, each by line range (at most 500 lines)
 * or character range (at most 50,000 characters). Segments are separated by an empty line; a
 * request that fails (a missing file, an excluded extension) becomes a segment with an `Error:`
 * line, and the other requests are still read.
 *
 * @example
 * const tools = partialReadTools(sandbox, { excludedFileExtensions: 'png,zip' });
 */
export function partialReadTools(target: ToolTarget, options: PartialReadOptions = {}): ToolSet {
  const { files } = asToolContext(target);
  const excluded = parseExcludedExtensions(options.excludedFileExtensions);
  const excludedNote = excluded.length ? ` Files with these extensions cannot be read: ${excluded.join(', ')}.` : '';
  return [
    defineTool({
      name: 'read_partial_files',
      description:
        'Read specified line ranges or character ranges from one or multiple files. Each file request must specify either ' +
        'line-based parameters (start_line, line_count) or character-based parameters (start_character, length). ' +
        'Each segment of the output starts with "--- File: {path} (lines {start}-{end}) ---" or "--- File: {path} (characters {start}-{end}) ---". ' +
        'line_count is at most 500 and length at most 50,000 per request: to read more, make several requests for different ranges.' +
        excludedNote,
      input: Input,
      execute: async ({ requests }, { signal }) => {
        const segments: string[] = [];
        for (const request of requests) {
          const ext = excludedExtensionOf(request.path, excluded);
          if (ext !== undefined) {
            segments.push(formatFailedSegment(request, `reading ${ext} files is not allowed (excluded extensions: ${excluded.join(', ')}).`));
            continue;
          }
          try {
            if (request.start_line !== undefined) {
              const readLines = need(files.readLines?.bind(files), 'line-range read', 'read_partial_files');
              const slice = await readLines(request.path, { startLine: request.start_line, endLine: request.start_line + request.line_count! - 1 }, { signal });
              segments.push(formatLineSegment(request.path, slice));
            } else {
              const readChars = need(files.readChars?.bind(files), 'character-range read', 'read_partial_files');
              const slice = await readChars(request.path, { offset: request.start_character!, length: request.length! }, { signal });
              segments.push(formatCharSegment(request.path, slice));
            }
          } catch (err) {
            const error = toolErrorFrom(err);
            if (error.code === 'CANCELLED' || error.code === 'NOT_AVAILABLE') return error;
            segments.push(formatFailedSegment(request, error.suggestion ? `${error.error} ${error.suggestion}` : error.error));
          }
        }
        return segments.join('\n\n');
      },
    }),
  ];
}
