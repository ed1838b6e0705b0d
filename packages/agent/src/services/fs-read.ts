import { lstatSync, readlinkSync } from 'node:fs';
import {
  allocFramePayload,
  canWrite,
  clampLines,
  CodedError,
  MAX_READ_BYTES,
  MAX_READ_LINES,
  MAX_TEXT_SCAN_BYTES,
  sliceLines,
  splitLines,
  type Params,
  type Result,
} from '@warren/protocol';
import { lineAnchor } from '@warren/protocol/node';
import type { Handler } from '../dispatch.js';
import { checkSize, checkSuffix, openChecked, requireRegularFile, typeOf } from '../policy.js';
import { atPinnedFolder } from '../folder-pin.js';
import { mapFsError } from '../fs-error.js';
import { checkHardLinks, readWhole, resolveFor, sha256, type FsContext } from './fs-common.js';
import { ownerNames } from './owner-names.js';

type ReadHandlers = { 'fs.read': Handler<'fs.read'>; 'fs.readAnchored': Handler<'fs.readAnchored'>; 'fs.stat': Handler<'fs.stat'> };

/** The reading half of the file service: whole files, byte/line/character ranges, anchored lines, stat. */
export function readHandlers(fs: FsContext): ReadHandlers {
  return {
    async 'fs.read'(params, ctx) {
      const target = await resolveFor(fs, ctx, params.path, 'read', 'read');
      const range = params.range;
      if (range?.unit === 'bytes') return readBytes(fs, target, params.path, range);
      const cap = range ? MAX_TEXT_SCAN_BYTES : MAX_READ_BYTES;
      const { bytes, info } = await readWhole(fs, target, params.path, cap);
      const base = { path: target.display, size: bytes.length, mtimeMs: info.mtimeMs, ...(params.hash ? { sha256: sha256(bytes) } : {}) };
      if (!range) return { result: { ...base, unit: 'file', bytesRead: bytes.length, truncated: false }, payload: bytes };
      const text = bytes.toString('utf8');
      if (range.unit === 'lines') {
        const slice = sliceLines(text, range.startLine, range.endLine, range.maxLines ?? MAX_READ_LINES);
        const out = Buffer.from(slice.content, 'utf8');
        return {
          result: {
            ...base,
            unit: 'lines',
            bytesRead: out.length,
            truncated: slice.truncated,
            startLine: slice.startLine,
            endLine: slice.endLine,
            totalLines: slice.totalLines,
          },
          payload: out,
        };
      }
      const slice = sliceChars(text, range.offset, range.length);
      const out = Buffer.from(slice.content, 'utf8');
      return {
        result: {
          ...base,
          unit: 'chars',
          bytesRead: out.length,
          truncated: slice.truncated,
          offset: range.offset,
          charsRead: slice.charsRead,
          totalChars: slice.totalChars,
        },
        payload: out,
      };
    },

    async 'fs.readAnchored'(params, ctx) {
      const target = await resolveFor(fs, ctx, params.path, 'read', 'read');
      const { bytes } = await readWhole(fs, target, params.path, MAX_TEXT_SCAN_BYTES);
      const lines = splitLines(bytes.toString('utf8'));
      const { first, last, truncated } = clampLines(lines.length, params.startLine, params.endLine, params.maxLines ?? MAX_READ_LINES);
      const out = [];
      for (let n = first; n <= last; n++) out.push({ anchor: lineAnchor(n, lines[n - 1]!.text), text: lines[n - 1]!.text });
      return {
        result: {
          path: target.display,
          startLine: first,
          endLine: first + out.length - 1,
          totalLines: lines.length,
          truncated,
          sha256: sha256(bytes),
          lines: out,
        },
      };
    },

    async 'fs.stat'(params, ctx) {
      const target = await resolveFor(fs, ctx, params.path, 'read', 'stat', { followLast: params.followLinks });
      const walked = target.stat;
      if (!walked) throw new CodedError('NOT_FOUND', `No such file or folder: '${params.path}'.`, { path: params.path });
      // Looked at again in its folder pinned by a descriptor: the walk looked by path, and a folder
      // on the way swapped for a link meanwhile would have shown another file's metadata.
      const { info, linkTarget } =
        target.absolute === '/'
          ? { info: walked, linkTarget: undefined }
          : await atPinnedFolder(target.absolute, params.path, async (at) => {
              // Synchronous, as the walk's own metadata calls: a trip through the thread pool costs
              // more than the lstat (it doubled the daemon's time for a stat).
              let now;
              try {
                now = lstatSync(at);
              } catch (e) {
                throw mapFsError(e, params.path);
              }
              if (now.dev !== walked.dev || now.ino !== walked.ino)
                throw new CodedError('PATH_NOT_IN_SANDBOX', `'${params.path}' changed during the call (a folder on the way was swapped); try again.`, {
                  path: params.path,
                });
              return { info: now, linkTarget: now.isSymbolicLink() ? readLinkOrUndefined(at) : undefined };
            });
      const type = typeOf(info);
      const result: Result<'fs.stat'> = {
        path: target.display,
        type: type === 'file' || type === 'directory' || type === 'symlink' ? type : 'other',
        size: info.size,
        mode: info.mode & 0o7777,
        mtimeMs: info.mtimeMs,
        nlink: info.nlink,
        owner: ownerNames.user(info.uid),
        group: ownerNames.group(info.gid),
        readable: true,
        writable: target.mount.writable && canWrite(fs.policy, params.path),
      };
      if (linkTarget !== undefined) result.linkTarget = linkTarget;
      return { result };
    },
  };
}

async function readBytes(
  fs: FsContext,
  target: Awaited<ReturnType<typeof resolveFor>>,
  display: string,
  range: { offset: number; length?: number | undefined },
) {
  requireRegularFile(target.stat, display);
  checkSuffix(fs.policy, target, display);
  checkSize(fs.policy, target, display, target.stat!.size);
  const handle = await openChecked(target, display);
  try {
    const info = await handle.stat();
    requireRegularFile(info, display);
    checkHardLinks(fs, info, display);
    const available = Math.max(0, info.size - range.offset);
    const want = Math.min(range.length ?? available, available, MAX_READ_BYTES);
    // Room for the answer's header before the bytes (no copy into a frame); bytes past `got` are never sent.
    const buffer = allocFramePayload(want);
    let got = 0;
    while (got < want) {
      const { bytesRead } = await handle.read(buffer, got, want - got, range.offset + got);
      if (bytesRead === 0) break;
      got += bytesRead;
    }
    const out = buffer.subarray(0, got);
    return {
      result: {
        path: target.display,
        size: info.size,
        mtimeMs: info.mtimeMs,
        unit: 'bytes' as const,
        bytesRead: got,
        truncated: range.offset + got < info.size,
        offset: range.offset,
      },
      payload: out,
    };
  } finally {
    await handle.close();
  }
}

/**
 * Characters `offset`..`offset + length` of a text, counted in Unicode code points, so a
 * character is never split (as Python's `len` counts them, seed 001's `total_chars`).
 */
export function sliceChars(text: string, offset: number, length: number | undefined) {
  let total = 0;
  let startUnit = -1;
  let endUnit = -1;
  const limit = length === undefined ? Infinity : offset + length;
  for (let i = 0; i < text.length; i++) {
    if (total === offset && startUnit === -1) startUnit = i;
    if (total === limit && endUnit === -1) endUnit = i;
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
    total++;
  }
  if (startUnit === -1) startUnit = text.length;
  if (endUnit === -1) endUnit = text.length;
  const content = text.slice(startUnit, endUnit);
  const charsRead = Math.max(0, Math.min(total, limit) - Math.min(offset, total));
  return { content, charsRead, totalChars: total, truncated: offset + charsRead < total };
}

export type { Params };

function readLinkOrUndefined(at: string): string | undefined {
  try {
    return readlinkSync(at);
  } catch {
    return undefined;
  }
}
