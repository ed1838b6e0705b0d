import { parseLineAnchor, splitLines } from '@warren/protocol';
import { lineAnchor } from '@warren/protocol/node';
import { z } from 'zod';
import { need, type AnchoredEdit, type ToolCommandResult } from './context.js';
import { asToolContext, type ToolTarget } from './sandbox-context.js';
import { defineTool, toolError, type ToolSet } from './tool.js';

/** Seed 004's `bash` timeout default, in seconds. */
export const BUILTIN_DEFAULT_BASH_TIMEOUT_SECONDS = 30;

/**
 * Seed 004's `read_file` output: each line as `LINE#ID|content`, where `LINE` is the 1-based line
 * number and `ID` the line's hash from `@warren/protocol`'s `lineHash` (first four uppercase hex
 * digits of the SHA-256 of the line without its terminator). Lines are joined with `\n`.
 *
 * @example
 * formatAnchoredLines('def my_function():\n    pass\n'); // '1#XXXX|def my_function():\n2#YYYY|    pass'
 */
export function formatAnchoredLines(text: string): string {
  return splitLines(text)
    .map(({ text }, index) => `${lineAnchor(index + 1, text)}|${text}`)
    .join('\n');
}

/**
 * `bash`'s text: the command's combined stdout and stderr as it printed them, then
 * `[exit code: N]` when the command failed, or `[timed out after N seconds]` when it was killed.
 *
 * @example
 * formatBashOutput({ exitCode: 1, stdout: 'oops\n', stderr: '', timedOut: false, truncated: false }, 30); // 'oops\n[exit code: 1]'
 */
export function formatBashOutput(result: ToolCommandResult, timeoutSeconds: number): string {
  const notes: string[] = [];
  if (result.truncated) notes.push('[output truncated]');
  if (result.timedOut) notes.push(`[timed out after ${timeoutSeconds} seconds]`);
  else if (result.exitCode !== 0) notes.push(`[exit code: ${result.exitCode ?? 'killed by a signal'}]`);
  const output = result.stdout + result.stderr;
  if (notes.length === 0) return output;
  return output === '' || output.endsWith('\n') ? output + notes.join('\n') : `${output}\n${notes.join('\n')}`;
}

const Anchor = z
  .string()
  .refine((value) => parseLineAnchor(value) !== undefined, { message: 'must be a LINE#ID anchor such as "10#A1B2", copied from read_file' });

const Edit = z.strictObject({
  op: z.enum(['replace', 'append', 'prepend']),
  pos: Anchor,
  end: Anchor.optional(),
  lines: z.array(z.string()),
});

/** The `edits_json` argument of `edit_file`, decoded. */
export const BuiltinEdits = z.array(Edit).min(1);

/**
 * Parses `edit_file`'s `edits_json`; a problem comes back as a message a model can act on.
 *
 * @example
 * parseEditsJson('[{"op":"replace","pos":"10#A1B2","lines":["x"]}]');
 */
export function parseEditsJson(text: string): { edits: AnchoredEdit[] } | { problem: string } {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { problem: `edits_json is not valid JSON (${(err as Error).message}).` };
  }
  const parsed = BuiltinEdits.safeParse(value);
  if (!parsed.success) {
    return {
      problem: `edits_json does not match the edit schema: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ')}.`,
    };
  }
  for (const edit of parsed.data) {
    if (edit.end !== undefined && edit.op !== 'replace') return { problem: `"end" is only allowed with op "replace" (got op "${edit.op}").` };
    if (edit.end !== undefined && parseLineAnchor(edit.end)!.line < parseLineAnchor(edit.pos)!.line) {
      return { problem: `"end" (${edit.end}) comes before "pos" (${edit.pos}).` };
    }
  }
  return { edits: parsed.data };
}

const ReadInput = z.strictObject({ path: z.string().min(1).describe('Path of the file, relative to the workspace root.') });
const WriteInput = z.strictObject({
  path: z.string().min(1).describe('Path of the file, relative to the workspace root.'),
  content: z.string().describe('The full new content of the file.'),
});
const EditInput = z.strictObject({
  file_path: z.string().min(1).describe('Path of the file to edit, relative to the workspace root.'),
  edits_json: z
    .string()
    .min(1)
    .describe(
      'A JSON array of edits: [{"op": "replace" | "append" | "prepend", "pos": "LINE#ID", "end": "LINE#ID" (replace only, optional), "lines": ["..."]}]. ' +
        'Anchors come from read_file.',
    ),
});
const BashInput = z.strictObject({
  command: z.string().min(1).describe('The shell command to run (through /bin/sh -c, in the workspace root).'),
  timeout: z.number().positive().default(BUILTIN_DEFAULT_BASH_TIMEOUT_SECONDS).describe('Timeout in seconds (default 30).'),
});

/**
 * Seed 004 (BuiltinToolsSkill): `read_file` (`LINE#ID|content`), `write_file`, `edit_file`
 * (hash-anchored batch that refuses stale anchors), `bash` (30 s default timeout).
 *
 * @example
 * const tools = builtinTools(sandbox);
 * const message = await anthropic.messages.create({ model, max_tokens: 4096, messages, tools: toAnthropicTools(tools) });
 */
export function builtinTools(target: ToolTarget): ToolSet {
  const { files, commands } = asToolContext(target);
  return [
    defineTool({
      name: 'read_file',
      description:
        'Read the content of a file relative to the workspace root. Every line comes back as LINE#ID|content: LINE is the 1-based line number, ' +
        'ID a 4-character hash of the line (first 4 uppercase hex digits of the SHA-256 of the line without its newline). ' +
        'Use these LINE#ID tags as anchors for edit_file; read again after any change.',
      input: ReadInput,
      execute: async ({ path }, { signal }) => {
        if (!files.readAnchored) return formatAnchoredLines(await files.readText(path, { signal }));
        const { lines, truncated, totalLines } = await files.readAnchored(path, {}, { signal });
        const text = lines.map((line) => `${line.anchor}|${line.text}`).join('\n');
        return truncated ? `${text}\n[showing lines 1-${lines.length} of ${totalLines}: use bash (e.g. sed -n) to see the rest]` : text;
      },
    }),
    defineTool({
      name: 'write_file',
      description:
        'Write full content to a file (relative to the workspace root). Creates the file and its parent folders if they do not exist, replaces it otherwise.',
      input: WriteInput,
      execute: async ({ path, content }, { signal }) => {
        const { bytesWritten } = await files.write(path, content, { signal });
        return `Wrote ${bytesWritten} bytes to ${path}`;
      },
    }),
    defineTool({
      name: 'edit_file',
      description:
        'Apply a list of precise, hash-anchored line edits to a file, all or none. Each edit names lines by the LINE#ID tags read_file printed: ' +
        '"replace" replaces line pos (or pos..end) with lines, "append" inserts lines after pos, "prepend" inserts lines before pos. ' +
        "Anchors refer to the file as last read, before any of the edits. If a tag's hash no longer matches the line, the whole edit is rejected: read the file again and retry.",
      input: EditInput,
      execute: async ({ file_path, edits_json }, { signal }) => {
        const parsed = parseEditsJson(edits_json);
        if ('problem' in parsed) {
          return toolError(
            'INVALID_ARGUMENTS',
            parsed.problem,
            'Pass edits_json as a JSON array of {"op", "pos", "end"?, "lines"} objects with anchors copied from read_file.',
          );
        }
        const editLines = need(files.editLines?.bind(files), 'hash-anchored edit', 'edit_file');
        await editLines(file_path, parsed.edits, { signal });
        const count = parsed.edits.length;
        return `Applied ${count} edit${count === 1 ? '' : 's'} to ${file_path}. Line numbers and hashes may have changed: read_file again before the next edit.`;
      },
    }),
    defineTool({
      name: 'bash',
      description:
        'Execute a shell command in the workspace root and return its stdout and stderr combined. ' +
        'A failing command adds a final "[exit code: N]" line. Default timeout: 30 seconds.',
      input: BashInput,
      execute: async ({ command, timeout }, { signal }) => {
        // `exec 2>&1` merges stderr into stdout at the file-descriptor level, so the order is the order printed.
        const result = await commands.run(`exec 2>&1\n${command}`, { timeoutMs: Math.ceil(timeout * 1000), signal });
        return formatBashOutput(result, timeout);
      },
    }),
  ];
}
