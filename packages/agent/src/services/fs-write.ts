import { CodedError, MAX_TEXT_SCAN_BYTES, parseLineAnchor, splitLines, type Line, type LineEdit } from '@warren/protocol';
import { lineAnchor, lineHash } from '@warren/protocol/node';
import type { Handler } from '../dispatch.js';
import { openChecked, requireRegularFile, resolvePath } from '../policy.js';
import { withPathLock } from './path-lock.js';
import { appendWrite, atomicWrite, hashBounded, decodeText, offsetWrite, readWhole, resolveFor, sha256, type FsContext } from './fs-common.js';

/** The most a conditional write (`expectedSha256`) reads to hash the file it replaces. */
export const MAX_HASHED_BYTES = 4 * 1024 * 1024 * 1024;

type WriteHandlers = { 'fs.write': Handler<'fs.write'>; 'fs.edit': Handler<'fs.edit'>; 'fs.editLines': Handler<'fs.editLines'> };

/** The writing half of the file service: atomic writes, writes in place (append, at an offset), exact-text edits (seed 001), anchored line edits (seed 004). */
export function writeHandlers(fs: FsContext): WriteHandlers {
  return {
    async 'fs.write'(params, ctx) {
      const content = ctx.payload ?? Buffer.alloc(0);
      const target = await resolveFor(fs, ctx, params.path, 'write', 'write', { approval: { bytes: content.length } });
      // Writes in place (pieces of a large write at their offsets, appends) run side by side;
      // whole-file writes wait for an edit of the same file in flight, and it for them.
      if (params.offset !== undefined) {
        await offsetWrite(fs, target, params.path, content, params.offset);
        return { result: { path: target.display, bytesWritten: content.length, ...(params.hash ? { sha256: sha256(content) } : {}), created: false } };
      }
      return withPathLock(target.absolute, async () => {
        // What an earlier write or edit of this file left: looked up again once this one holds the lock.
        const target = await resolvePath(fs.policy, params.path, 'write');
        let unchangedSince;
        if (params.expectedSha256 !== undefined) {
          if (!target.stat)
            throw new CodedError('CONFLICT', `'${params.path}' no longer exists, so it cannot have the expected SHA-256; read it again.`, {
              path: params.path,
            });
          requireRegularFile(target.stat, params.path);
          const handle = await openChecked(target, params.path);
          try {
            unchangedSince = await handle.stat();
            const limit = target.mount.maxFileBytes ?? MAX_HASHED_BYTES;
            const current = await hashBounded(
              handle,
              limit,
              () =>
                new CodedError(
                  'FILE_TOO_LARGE',
                  `'${params.path}' holds more than ${limit} bytes, too much to check expectedSha256 against; write without expectedSha256, or keep the file smaller.`,
                  { path: params.path, limit },
                ),
            );
            if (current !== params.expectedSha256) {
              throw new CodedError('CONFLICT', `'${params.path}' changed since it was read (its SHA-256 is now ${current}); read it again and retry.`, {
                path: params.path,
                expected: params.expectedSha256,
                actual: current,
              });
            }
          } finally {
            await handle.close();
          }
        }
        let created: boolean;
        if (params.append) ({ created } = await appendWrite(fs, target, params.path, content, params.mode));
        else ({ created } = await atomicWrite(fs, target, params.path, content, { mode: params.mode, overwrite: params.overwrite, unchangedSince }));
        return { result: { path: target.display, bytesWritten: content.length, ...(params.hash ? { sha256: sha256(content) } : {}), created } };
      });
    },

    async 'fs.edit'(params, ctx) {
      const located = await resolveFor(fs, ctx, params.path, 'write', 'edit');
      return withPathLock(located.absolute, async () => {
        const target = await resolvePath(fs.policy, params.path, 'write');
        const { bytes, info } = await readWhole(fs, target, params.path, MAX_TEXT_SCAN_BYTES);
        checkExpected(params.path, bytes, params.expectedSha256);
        const text = decodeText(bytes, params.path);
        const positions: number[] = [];
        for (let at = text.indexOf(params.oldText); at !== -1; at = text.indexOf(params.oldText, at + params.oldText.length)) {
          positions.push(at);
          if (positions.length > 1000) break;
        }
        if (positions.length === 0) {
          throw new CodedError(
            'EDIT_NOT_FOUND',
            `The text to replace was not found in '${params.path}' (0 matches; the file has ${splitLines(text).length} lines). It must match exactly, whitespace and line breaks included: read the file again and copy it.`,
            {
              path: params.path,
              matches: 0,
            },
          );
        }
        if (positions.length > 1) {
          const lines = positions.slice(0, 20).map((p) => lineOf(text, p));
          throw new CodedError(
            'EDIT_NOT_UNIQUE',
            `The text to replace occurs ${positions.length} times in '${params.path}' (at lines ${lines.join(', ')}${positions.length > 20 ? ', ...' : ''}); it must occur exactly once. Include more surrounding lines so it is unique.`,
            {
              path: params.path,
              matches: positions.length,
              lines,
            },
          );
        }
        const at = positions[0]!;
        // Concatenation, not String.replace: `$&`, `$1` and `$$` in newText stay literal.
        const next = Buffer.from(text.slice(0, at) + params.newText + text.slice(at + params.oldText.length), 'utf8');
        await atomicWrite(fs, target, params.path, next, { unchangedSince: info });
        return { result: { path: target.display, line: lineOf(text, at), bytesWritten: next.length, sha256: sha256(next) } };
      });
    },

    async 'fs.editLines'(params, ctx) {
      const located = await resolveFor(fs, ctx, params.path, 'write', 'edit');
      return withPathLock(located.absolute, async () => {
        const target = await resolvePath(fs.policy, params.path, 'write');
        const { bytes, info } = await readWhole(fs, target, params.path, MAX_TEXT_SCAN_BYTES);
        checkExpected(params.path, bytes, params.expectedSha256);
        const lines = splitLines(decodeText(bytes, params.path));
        const planned = applyLineEdits(lines, params.edits, params.path);
        const next = Buffer.from(planned.lines.map((l) => l.text + l.eol).join(''), 'utf8');
        await atomicWrite(fs, target, params.path, next, { unchangedSince: info });
        return {
          result: {
            path: target.display,
            applied: params.edits.length,
            totalLines: planned.lines.length,
            firstChangedLine: planned.firstChanged,
            lastChangedLine: planned.lastChanged,
            bytesWritten: next.length,
            sha256: sha256(next),
          },
        };
      });
    },
  };
}

function checkExpected(display: string, bytes: Buffer, expected: string | undefined): void {
  if (expected === undefined) return;
  const actual = sha256(bytes);
  if (actual !== expected) {
    throw new CodedError('CONFLICT', `'${display}' changed since it was read (its SHA-256 is now ${actual}); read it again and retry.`, {
      path: display,
      expected,
      actual,
    });
  }
}

function lineOf(text: string, index: number): number {
  let line = 1;
  for (let i = text.indexOf('\n'); i !== -1 && i < index; i = text.indexOf('\n', i + 1)) line++;
  return line;
}

/**
 * Applies a batch of seed-004 edits to the lines of a file, all or none:
 *
 * - every anchor (`LINE#ID`) names a line of the file as it is before the batch; a line number past
 *   the end or a hash that differs is stale, and one stale anchor refuses the whole batch
 *   (`STALE_ANCHOR`, listing each stale anchor with the line's current `LINE#ID`);
 * - `replace` takes `pos`..`end` (inclusive, `end` defaults to `pos`); two replaced ranges that
 *   overlap, or an insert anchored inside a replaced range (other than its first line for
 *   `prepend` / last line for `append`), are refused as `INVALID_PARAMS`;
 * - `prepend` inserts before its line, `append` after it; several inserts at one place keep their
 *   order in the batch;
 * - new lines take the file's line ending (`\r\n` when its first line has one) and the file keeps
 *   whether it ended with a line break.
 *
 * Because every anchor refers to the original file, the order of edits in the batch does not move
 * any anchor: the result is the same as applying them bottom-up.
 */
export function applyLineEdits(lines: Line[], edits: LineEdit[], display: string): { lines: Line[]; firstChanged: number; lastChanged: number } {
  const stale: { anchor: string; current: string | null }[] = [];
  const parse = (anchor: string, field: string): number => {
    const parsed = parseLineAnchor(anchor);
    if (!parsed)
      throw new CodedError('INVALID_PARAMS', `'${anchor}' in ${field} is not a LINE#ID anchor (e.g. 10#A1B2); read the file with anchors first.`, { anchor });
    const line = lines[parsed.line - 1];
    if (!line) stale.push({ anchor, current: null });
    else if (lineHash(line.text) !== parsed.hash) stale.push({ anchor, current: lineAnchor(parsed.line, line.text) });
    return parsed.line;
  };
  const planned = edits.map((edit, i) => {
    if (edit.op !== 'replace' && edit.end !== undefined)
      throw new CodedError('INVALID_PARAMS', `edits[${i}]: 'end' is only for replace; ${edit.op} inserts at one line.`, { index: i });
    const pos = parse(edit.pos, `edits[${i}].pos`);
    const end = edit.end === undefined ? pos : parse(edit.end, `edits[${i}].end`);
    if (end < pos) throw new CodedError('INVALID_PARAMS', `edits[${i}]: end (${edit.end}) comes before pos (${edit.pos}).`, { index: i });
    const newLines = edit.lines.flatMap((l) => l.split(/\r?\n/));
    return { index: i, op: edit.op, pos, end, newLines };
  });
  if (stale.length > 0) {
    throw new CodedError(
      'STALE_ANCHOR',
      `${stale.length} anchor(s) no longer match '${display}': ${stale.map((s) => `${s.anchor} is now ${s.current ?? 'past the end of the file'}`).join('; ')}. Nothing was changed; read the file again for fresh LINE#ID anchors.`,
      { path: display, stale, totalLines: lines.length },
    );
  }
  const replaces = planned.filter((p) => p.op === 'replace').sort((a, b) => a.pos - b.pos);
  for (let i = 1; i < replaces.length; i++) {
    if (replaces[i]!.pos <= replaces[i - 1]!.end) {
      throw new CodedError(
        'INVALID_PARAMS',
        `edits[${replaces[i - 1]!.index}] and edits[${replaces[i]!.index}] replace overlapping lines; merge them into one replace.`,
        { path: display },
      );
    }
  }
  for (const p of planned) {
    if (p.op === 'replace') continue;
    const inside = replaces.find(
      (r) => p.pos >= r.pos && p.pos <= r.end && !(p.op === 'prepend' && p.pos === r.pos) && !(p.op === 'append' && p.pos === r.end),
    );
    if (inside)
      throw new CodedError('INVALID_PARAMS', `edits[${p.index}] inserts inside the lines edits[${inside.index}] replaces; anchor it outside that range.`, {
        path: display,
      });
  }

  const eol = lines[0]?.eol === '\r\n' ? '\r\n' : '\n';
  const endedWithBreak = lines.length === 0 || lines[lines.length - 1]!.eol !== '';
  const before = new Map<number, string[]>();
  const after = new Map<number, string[]>();
  const replaceAt = new Map<number, { end: number; lines: string[] }>();
  for (const p of planned) {
    if (p.op === 'prepend') before.set(p.pos, [...(before.get(p.pos) ?? []), ...p.newLines]);
    else if (p.op === 'append') after.set(p.pos, [...(after.get(p.pos) ?? []), ...p.newLines]);
    else replaceAt.set(p.pos, { end: p.end, lines: p.newLines });
  }
  const out: Line[] = [];
  let firstChanged = Infinity;
  let lastChanged = 0;
  const add = (text: string) => {
    out.push({ text, eol });
    firstChanged = Math.min(firstChanged, out.length);
    lastChanged = out.length;
  };
  for (let n = 1; n <= lines.length; n++) {
    for (const t of before.get(n) ?? []) add(t);
    const replaced = replaceAt.get(n);
    if (replaced) {
      for (const t of replaced.lines) add(t);
      if (replaced.lines.length === 0) {
        firstChanged = Math.min(firstChanged, out.length + 1);
        lastChanged = Math.max(lastChanged, out.length);
      }
      for (const t of after.get(replaced.end) ?? []) add(t);
      n = replaced.end;
      continue;
    }
    out.push({ ...lines[n - 1]! });
    for (const t of after.get(n) ?? []) add(t);
  }
  // Line breaks: every line but the last has one; the last has one exactly when the file had.
  for (let i = 0; i < out.length; i++) {
    if (out[i]!.eol === '' && i < out.length - 1) out[i] = { text: out[i]!.text, eol };
  }
  if (out.length > 0) {
    const last = out[out.length - 1]!;
    out[out.length - 1] = { text: last.text, eol: endedWithBreak ? last.eol || eol : '' };
  }
  return { lines: out, firstChanged: firstChanged === Infinity ? 1 : firstChanged, lastChanged };
}
