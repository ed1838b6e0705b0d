import { MAX_READ_LINES, parseLineAnchor, sliceLines, splitLines } from '@warren/protocol';
import { lineHash } from '@warren/protocol/node';
import { EditNotFoundError, EditNotUniqueError, NotFoundError, StaleAnchorError } from '../../src/errors.js';
import type { CharSlice, LineRange } from '../../src/files.js';
import type { AnchoredEdit, ToolCommandResult, ToolCommands, ToolContext, ToolFiles } from '../../src/index.js';

/** An in-memory stand-in for the file primitives: a map from path to text. */
export class FakeFiles implements ToolFiles {
  readonly data = new Map<string, string>();
  readonly calls: string[] = [];

  constructor(initial: Record<string, string> = {}) {
    for (const [path, text] of Object.entries(initial)) this.data.set(path, text);
  }

  private get(path: string): string {
    const text = this.data.get(path);
    if (text === undefined) throw new NotFoundError(`No file at '${path}'.`);
    return text;
  }

  async readText(path: string) {
    this.calls.push(`readText ${path}`);
    return this.get(path);
  }
  async write(path: string, content: string) {
    this.calls.push(`write ${path}`);
    this.data.set(path, content);
    return { bytesWritten: Buffer.byteLength(content) };
  }
  async readLines(path: string, range: LineRange = {}) {
    this.calls.push(`readLines ${path} ${JSON.stringify(range)}`);
    return sliceLines(this.get(path), range.startLine, range.endLine, range.maxLines ?? MAX_READ_LINES);
  }
  async readChars(path: string, range: { offset: number; length: number }) {
    return sliceChars(this.get(path), range.offset, range.length);
  }
  async edit(path: string, oldText: string, newText: string) {
    const text = this.get(path);
    const count = text.split(oldText).length - 1;
    if (count === 0) throw new EditNotFoundError(`The text to replace does not occur in '${path}'.`);
    if (count > 1) throw new EditNotUniqueError(`The text to replace occurs ${count} times in '${path}'.`);
    this.data.set(path, text.replace(oldText, newText));
  }
  /** Checks every anchor against the current text, as the agent does, then applies bottom-up. */
  async editLines(path: string, edits: AnchoredEdit[]) {
    this.calls.push(`editLines ${path} ${JSON.stringify(edits)}`);
    const lines = splitLines(this.get(path)).map((line) => line.text);
    for (const edit of edits) {
      for (const anchor of [edit.pos, edit.end].filter((a): a is string => a !== undefined)) {
        const { line, hash } = parseLineAnchor(anchor)!;
        if (lines[line - 1] === undefined || lineHash(lines[line - 1]!) !== hash) {
          throw new StaleAnchorError(
            `Anchor ${anchor} is stale: line ${line} is now ${lines[line - 1] === undefined ? 'past the end' : `'${lines[line - 1]}'`}.`,
          );
        }
      }
    }
    const sorted = [...edits].sort((a, b) => parseLineAnchor(b.pos)!.line - parseLineAnchor(a.pos)!.line);
    for (const edit of sorted) {
      const at = parseLineAnchor(edit.pos)!.line - 1;
      if (edit.op === 'replace') lines.splice(at, (edit.end ? parseLineAnchor(edit.end)!.line - 1 : at) - at + 1, ...edit.lines);
      else if (edit.op === 'append') lines.splice(at + 1, 0, ...edit.lines);
      else lines.splice(at, 0, ...edit.lines);
    }
    this.data.set(path, lines.map((l) => `${l}\n`).join(''));
  }
  async list(path: string, options: { recursive: boolean; limit: number }) {
    const prefix = path === '.' ? '' : `${path.replace(/\/$/, '')}/`;
    const entries = new Map<string, 'file' | 'directory'>();
    for (const key of [...this.data.keys()].sort()) {
      if (!key.startsWith(prefix)) continue;
      const parts = key.slice(prefix.length).split('/');
      if (!options.recursive) entries.set(parts[0]!, parts.length > 1 ? 'directory' : 'file');
      else parts.forEach((_, i) => entries.set(parts.slice(0, i + 1).join('/'), i < parts.length - 1 ? 'directory' : 'file'));
    }
    const all = [...entries].map(([p, type]) => ({ path: p, type }));
    return { entries: all.slice(0, options.limit), truncated: all.length > options.limit };
  }
  async glob(path: string, pattern: string) {
    const prefix = path === '.' ? '' : `${path.replace(/\/$/, '')}/`;
    const suffix = pattern.startsWith('**/*') ? pattern.slice(4) : '';
    return [...this.data.keys()]
      .filter((k) => k.startsWith(prefix) && k.endsWith(suffix))
      .map((k) => k.slice(prefix.length))
      .sort();
  }
  async delete(path: string) {
    this.get(path);
    this.data.delete(path);
  }
  async move(source: string, destination: string) {
    this.data.set(destination, this.get(source));
    this.data.delete(source);
  }
  async copy(source: string, destination: string) {
    this.data.set(destination, this.get(source));
  }
}

/** A stand-in for `commands.run` that answers from a script and records what it was asked. */
export class FakeCommands implements ToolCommands {
  readonly calls: { cmd: string | string[]; options: Record<string, unknown> }[] = [];
  constructor(private readonly answer: (cmd: string | string[], options: Record<string, unknown>) => Partial<ToolCommandResult> = () => ({})) {}

  async run(cmd: string | string[], options: Record<string, unknown> = {}): Promise<ToolCommandResult> {
    this.calls.push({ cmd, options });
    return { exitCode: 0, stdout: '', stderr: '', timedOut: false, truncated: false, ...this.answer(cmd, options) };
  }
}

export function fakeContext(
  files: Record<string, string> = {},
  answer?: ConstructorParameters<typeof FakeCommands>[0],
): ToolContext & { files: FakeFiles; commands: FakeCommands } {
  return { files: new FakeFiles(files), commands: new FakeCommands(answer) };
}

/** `line 1\n` .. `line N\n`. */
export function numberedLines(count: number, prefix = 'line '): string {
  return Array.from({ length: count }, (_, i) => `${prefix}${i + 1}\n`).join('');
}

/** Characters (code points) of a text as the agent's character read returns them. */
export function sliceChars(text: string, offset: number, length: number): CharSlice {
  const chars = Array.from(text);
  const picked = chars.slice(offset, offset + length);
  return { content: picked.join(''), offset, charsRead: picked.length, totalChars: chars.length, truncated: offset + picked.length < chars.length };
}
