import { z } from 'zod';
import { SandboxPath, type MethodSpec } from '../method-spec.js';

/**
 * The file methods. Paths are named as the sandbox's policy says (see `policy.ts`): relative to
 * the root or absolute inside it in root mode, `/name/...` with named paths. Results show paths
 * the same way (`path` fields). File bytes travel as frame payloads, never base64.
 */

/** The most bytes one `fs.read` answer carries; read a larger file by ranges. */
export const MAX_READ_BYTES = 16 * 1024 * 1024;
/** The largest file a line or character read scans (it decodes the whole file). */
export const MAX_TEXT_SCAN_BYTES = 64 * 1024 * 1024;
/** The most lines one line read returns. */
export const MAX_READ_LINES = 100_000;
/** The most characters one character read returns. */
export const MAX_READ_CHARS = 4 * 1024 * 1024;
/**
 * How far past a file's current end an `fs.write` at an `offset` may start: room for the pieces of
 * one write sent several at a time to land in any order, without letting one call give a file a
 * size of its choosing made of holes.
 */
export const MAX_WRITE_GAP_BYTES = 64 * 1024 * 1024;

const Sha256 = z.string().regex(/^[0-9a-f]{64}$/, 'a lowercase hex SHA-256');
const Count = z.number().int().nonnegative();
/** What a listing reports as an entry's type; FIFOs, sockets and devices are `other`. */
export const EntryType = z.enum(['file', 'directory', 'symlink', 'other']);
export type EntryType = z.infer<typeof EntryType>;

/**
 * One of four ranges, or none for the whole file:
 * - `bytes`: `offset` and `length` in bytes; the answer's payload is raw bytes.
 * - `lines`: 1-based inclusive `startLine`..`endLine` (clamped: below 1 is 1, past the end is
 *   the end; a start past the end is an empty answer), at most `maxLines`; reports `totalLines`.
 * - `chars`: `offset` and `length` in Unicode code points (never splits a UTF-8 sequence);
 *   reports `totalChars` and `truncated` (seed 001's `ReadResult`).
 */
export const ReadRange = z.discriminatedUnion('unit', [
  z.strictObject({ unit: z.literal('bytes'), offset: Count.default(0), length: Count.max(MAX_READ_BYTES).optional() }),
  z.strictObject({
    unit: z.literal('lines'),
    startLine: z.number().int().optional(),
    endLine: z.number().int().optional(),
    maxLines: z.number().int().positive().max(MAX_READ_LINES).optional(),
  }),
  z.strictObject({ unit: z.literal('chars'), offset: Count.default(0), length: Count.max(MAX_READ_CHARS).optional() }),
]);

export const FsReadParams = z.strictObject({
  path: SandboxPath,
  range: ReadRange.optional(),
  /** Also return the whole file's SHA-256 (costs about 3 ms per MiB; not for byte ranges). */
  hash: z.boolean().default(false),
});
/** The content travels as the response frame's binary payload (UTF-8 text for `lines` and `chars`). */
export const FsReadResult = z.strictObject({
  path: z.string(),
  /** The whole file's size in bytes. */
  size: Count,
  mtimeMs: z.number(),
  /** With `hash: true`: the whole file's SHA-256, for a later write's or edit's `expectedSha256`. */
  sha256: Sha256.optional(),
  unit: z.enum(['file', 'bytes', 'lines', 'chars']),
  /** Bytes in the payload. */
  bytesRead: Count,
  /** True when more content exists past what was returned. */
  truncated: z.boolean(),
  /** bytes: the byte offset; chars: the character offset (as asked). */
  offset: Count.optional(),
  /** lines: the first line returned (after clamping to 1). */
  startLine: z.number().int().optional(),
  /** lines: the last line returned; `startLine - 1` when none was. */
  endLine: z.number().int().optional(),
  totalLines: Count.optional(),
  /** chars: characters returned, and the file's length in characters. */
  charsRead: Count.optional(),
  totalChars: Count.optional(),
});

/**
 * The content travels as the request frame's binary payload; none means an empty file. Three ways
 * to write, by the fields given:
 *
 * - neither `append` nor `offset`: replace the whole file atomically (a temporary file beside it,
 *   then rename(2)), so a reader sees the old or the new content;
 * - `append`: add the content to the end of the file, in place (created when missing);
 * - `offset`: put the content at that byte offset of an existing file, in place, without
 *   truncating it. Several offset writes to one file may run at once, in any order.
 *
 * The in-place kinds are not atomic: callers use them on a name no reader expects yet, as
 * `files.write` does with content larger than one frame (pieces to a temporary name, then
 * `fs.move` into place).
 */
export const FsWriteParams = z
  .strictObject({
    path: SandboxPath,
    /** Permission bits for a new file; an existing file keeps its own. */
    mode: z.number().int().min(0).max(0o777).optional(),
    /** Write only when the current content has this SHA-256 (`CONFLICT` otherwise, also when the file is gone). Whole-file writes only. */
    expectedSha256: Sha256.optional(),
    /** false: fail with `ALREADY_EXISTS` when the file exists. Whole-file writes only. */
    overwrite: z.boolean().default(true),
    /** Also return the SHA-256 of the content sent (costs about 3 ms per MiB). */
    hash: z.boolean().default(false),
    /** Add the content to the end of the file (created if missing), in place. Size and suffix rules apply to the whole file. */
    append: z.boolean().default(false),
    /**
     * Put the content at this byte offset of an existing file, in place, leaving the rest of it as
     * it is (no truncation). The file must exist (`NOT_FOUND` otherwise: create it with a write
     * without `offset` first), so a piece that arrives late never brings back a file that was
     * removed meanwhile. An offset past the end (by at most {@link MAX_WRITE_GAP_BYTES}) extends
     * the file, the gap reading as zero bytes until written; the mount's size limit applies to the
     * end of the content.
     */
    offset: Count.optional(),
  })
  .superRefine((p, ctx) => {
    if (p.offset === undefined) return;
    const clash = p.append
      ? 'append'
      : p.expectedSha256 !== undefined
        ? 'expectedSha256'
        : !p.overwrite
          ? 'overwrite'
          : p.mode !== undefined
            ? 'mode'
            : undefined;
    if (clash) {
      ctx.addIssue({
        code: 'custom',
        path: ['offset'],
        message: `offset writes part of an existing file in place and cannot be combined with ${clash === 'overwrite' ? 'overwrite: false' : clash}; create the file with a whole-file write first (that one takes mode, overwrite and expectedSha256)`,
      });
    }
  });
export const FsWriteResult = z.strictObject({
  path: z.string(),
  bytesWritten: Count,
  /** With `hash: true`: the new content's SHA-256. */
  sha256: Sha256.optional(),
  created: z.boolean(),
});

/** Seed 001's exact-text edit: `oldText` must occur exactly once; `$` in `newText` is literal. */
export const FsEditParams = z.strictObject({
  path: SandboxPath,
  oldText: z
    .string()
    .min(1)
    .max(16 * 1024 * 1024),
  newText: z.string().max(16 * 1024 * 1024),
  expectedSha256: Sha256.optional(),
});
export const FsEditResult = z.strictObject({
  path: z.string(),
  /** The 1-based line where the replaced text started. */
  line: z.number().int().positive(),
  bytesWritten: Count,
  sha256: Sha256,
});

/** Lines with their seed-004 anchors (`LINE#ID`, see `lineAnchor` in `lines.ts`). */
export const FsReadAnchoredParams = z.strictObject({
  path: SandboxPath,
  /** The same line range as `fs.read`'s `lines` unit, clamped the same way. */
  startLine: z.number().int().optional(),
  endLine: z.number().int().optional(),
  maxLines: z.number().int().positive().max(MAX_READ_LINES).optional(),
});
export const AnchoredLine = z.strictObject({
  /** `LINE#ID`, e.g. `10#A1B2`. */
  anchor: z.string(),
  /** The line without its terminator. */
  text: z.string(),
});
export const FsReadAnchoredResult = z.strictObject({
  path: z.string(),
  startLine: z.number().int(),
  endLine: z.number().int(),
  totalLines: Count,
  truncated: z.boolean(),
  sha256: Sha256,
  lines: z.array(AnchoredLine),
});

/**
 * One hash-anchored edit (seed 004). `replace` replaces `pos`..`end` (default `pos`) with
 * `lines` (none deletes them); `append` inserts after `pos`, `prepend` before it. A string in
 * `lines` that holds newlines is several lines.
 */
export const LineEdit = z.strictObject({
  op: z.enum(['replace', 'append', 'prepend']),
  pos: z.string().min(3).max(20),
  end: z.string().min(3).max(20).optional(),
  lines: z.array(z.string().max(1024 * 1024)).max(100_000),
});
export type LineEdit = z.infer<typeof LineEdit>;

/**
 * A batch of line edits, all or none: every anchor refers to the file as it is before the batch,
 * the whole batch is checked before anything is written, overlapping edits are refused, and
 * inserts at the same place keep their batch order.
 */
export const FsEditLinesParams = z.strictObject({
  path: SandboxPath,
  edits: z.array(LineEdit).min(1).max(1000),
  expectedSha256: Sha256.optional(),
});
export const FsEditLinesResult = z.strictObject({
  path: z.string(),
  applied: Count,
  totalLines: Count,
  /** The first and last lines of the new file that the batch touched. */
  firstChangedLine: z.number().int().positive(),
  lastChangedLine: z.number().int().nonnegative(),
  bytesWritten: Count,
  sha256: Sha256,
});

export const FsStatParams = z.strictObject({
  path: SandboxPath,
  /** false: describe a symbolic link itself instead of what it points to. */
  followLinks: z.boolean().default(true),
});
export const FsStatResult = z.strictObject({
  path: z.string(),
  type: EntryType,
  size: Count,
  /** Permission bits. */
  mode: z.number().int(),
  mtimeMs: z.number(),
  nlink: Count,
  /** For a symbolic link (with followLinks: false): what it points to, as stored. */
  linkTarget: z.string().optional(),
  /** The owning user and group by name, as `ls -l` shows them (the number when the sandbox names none). */
  owner: z.string().optional(),
  group: z.string().optional(),
  readable: z.boolean(),
  writable: z.boolean(),
});

/** The most entries one listing reaches, over all its pages. */
export const MAX_LIST_ENTRIES = 100_000;

/**
 * A listing answers in pages: one page holds at most `maxEntries` entries and at most
 * `MAX_PAGE_BYTES` of JSON, so it always fits in a frame. When more follow, the result has a
 * `nextCursor`; the same call with `cursor` set to it answers the next page.
 */
export const FsListParams = z.strictObject({
  path: SandboxPath.default('.'),
  recursive: z.boolean().default(false),
  /** How deep a recursive listing goes (1 = the folder's own entries). */
  maxDepth: z.number().int().positive().max(64).default(16),
  /** The most entries in this page. */
  maxEntries: z.number().int().positive().max(MAX_LIST_ENTRIES).default(1000),
  /** Where this page starts: the `nextCursor` of the page before (same path, recursive and maxDepth). */
  cursor: z
    .string()
    .regex(/^[0-9]{1,6}$/, "a cursor is a page's nextCursor, passed back as it is")
    .optional(),
});
export const ListEntry = z.strictObject({
  /** Relative to the folder listed. */
  path: z.string(),
  type: EntryType,
  size: Count,
  mtimeMs: z.number(),
  linkTarget: z.string().optional(),
  /** Permission bits, and the owning user and group by name (as in `fs.stat`). */
  mode: z.number().int().optional(),
  owner: z.string().optional(),
  group: z.string().optional(),
});
export const FsListResult = z.strictObject({
  path: z.string(),
  entries: z.array(ListEntry),
  /**
   * True when entries were left out of this answer: by the page's end (then `nextCursor` is
   * set), or for good by maxDepth, the scan cap of a huge folder, or the listing's cap of
   * `MAX_LIST_ENTRIES`.
   */
  truncated: z.boolean(),
  /** Present when more entries follow: pass it back as `cursor` for the next page. */
  nextCursor: z.string().optional(),
});

/** The longest glob pattern accepted. */
export const MAX_GLOB_PATTERN = 1024;
export const FsGlobParams = z.strictObject({
  path: SandboxPath.default('.'),
  pattern: z.string().min(1).max(MAX_GLOB_PATTERN).default('**/*'),
  maxResults: z.number().int().positive().max(100_000).default(1000),
  /** Match folders too (by default only files and links match). */
  includeDirectories: z.boolean().default(false),
});
export const FsGlobResult = z.strictObject({
  path: z.string(),
  /** Relative to `path`, sorted. */
  matches: z.array(z.string()),
  truncated: z.boolean(),
  /** Entries looked at. */
  scanned: Count,
});

export const FsMkdirParams = z.strictObject({ path: SandboxPath, parents: z.boolean().default(true) });
export const FsMkdirResult = z.strictObject({ path: z.string(), created: z.boolean() });

export const FsDeleteParams = z.strictObject({ path: SandboxPath, recursive: z.boolean().default(false) });
export const FsDeleteResult = z.strictObject({ path: z.string(), type: EntryType });

export const FsMoveParams = z.strictObject({ from: SandboxPath, to: SandboxPath, overwrite: z.boolean().default(false) });
export const FsMoveResult = z.strictObject({ from: z.string(), to: z.string(), type: EntryType });

export const FsCopyParams = z.strictObject({ from: SandboxPath, to: SandboxPath, overwrite: z.boolean().default(false) });
export const FsCopyResult = z.strictObject({
  from: z.string(),
  to: z.string(),
  type: EntryType,
  files: Count,
  bytes: Count,
  /** Entries left out: links that would leave, FIFOs and devices, disallowed suffixes. */
  skipped: z.array(z.strictObject({ path: z.string(), reason: z.string() })),
});

/** The tar archive travels as the request payload, up to the frame limit. */
export const FsUploadParams = z.strictObject({
  /** The folder to extract into (created when missing). */
  path: SandboxPath,
  /** false (default): an entry whose file already exists fails the whole upload with `ALREADY_EXISTS`. */
  overwrite: z.boolean().default(false),
});
export const FsUploadResult = z.strictObject({ path: z.string(), files: Count, directories: Count, symlinks: Count, bytes: Count });

/** The tar archive travels as the response payload, up to the frame limit. */
export const FsDownloadParams = z.strictObject({ path: SandboxPath });
export const FsDownloadResult = z.strictObject({
  path: z.string(),
  files: Count,
  directories: Count,
  symlinks: Count,
  bytes: Count,
  skipped: z.array(z.strictObject({ path: z.string(), reason: z.string() })),
});

/**
 * The most archive bytes one piece of a streamed transfer carries (one `fs.uploadChunk` payload
 * or one `data` event of `fs.downloadStream`): far below the frame limit, so pieces of different
 * transfers and other calls interleave on one connection.
 */
export const TRANSFER_CHUNK_BYTES = 1024 * 1024;

/** A streamed upload's handle, from `fs.uploadOpen`: valid on the connection that opened it only. */
const UploadId = z.string().regex(/^up_[0-9a-f]{32}$/, 'an upload id from fs.uploadOpen');

/**
 * Streamed upload, step 1: opens an upload of a tar archive of any size into a folder. The
 * archive then travels in order as `fs.uploadChunk` payloads, is checked entry by entry as it
 * arrives (the rules of `fs.upload`), and lands only at `fs.uploadCommit`.
 */
export const FsUploadOpenParams = FsUploadParams;
export const FsUploadOpenResult = z.strictObject({ uploadId: UploadId, path: z.string() });
/** Step 2: the next piece of the archive (the request payload, at most {@link TRANSFER_CHUNK_BYTES}), at its byte offset. */
export const FsUploadChunkParams = z.strictObject({ uploadId: UploadId, offset: Count });
export const FsUploadChunkResult = z.strictObject({ received: Count });
/** Step 3: the archive is complete; its entries are moved into place. */
export const FsUploadCommitParams = z.strictObject({ uploadId: UploadId });
/** Abandons an upload: nothing of it stays. Closing the connection does the same. */
export const FsUploadAbortParams = z.strictObject({ uploadId: UploadId });
export const FsUploadAbortResult = z.strictObject({ aborted: z.boolean() });

/**
 * Streamed download of a file or folder as a tar archive of any size: a `start` event with what
 * the archive will carry, then `data` events whose payloads are the archive in order, then the
 * counts. Backpressure holds the daemon's reading while the caller is behind.
 */
export const FsDownloadStreamParams = z.strictObject({
  path: SandboxPath,
  /** Refuse with `FILE_TOO_LARGE` once the archive passes this many bytes. */
  maxBytes: Count.optional(),
});
const DownloadStreamEvents = {
  /** `totalBytes`: the file bytes the archive will carry, as counted when it started (files may change meanwhile). */
  start: z.strictObject({ totalBytes: Count }),
  /** The payload is the next piece of the archive; `offset` is where it starts. */
  data: z.strictObject({ offset: Count }),
};

export const FS_METHODS = {
  'fs.read': { params: FsReadParams, result: FsReadResult, access: 'read', payload: 'response', idempotent: true },
  'fs.write': { params: FsWriteParams, result: FsWriteResult, access: 'write', payload: 'request', idempotent: true },
  'fs.edit': { params: FsEditParams, result: FsEditResult, access: 'write', idempotent: false },
  'fs.readAnchored': { params: FsReadAnchoredParams, result: FsReadAnchoredResult, access: 'read', idempotent: true },
  'fs.editLines': { params: FsEditLinesParams, result: FsEditLinesResult, access: 'write', idempotent: false },
  'fs.stat': { params: FsStatParams, result: FsStatResult, access: 'read', idempotent: true },
  'fs.list': { params: FsListParams, result: FsListResult, access: 'read', idempotent: true },
  'fs.glob': { params: FsGlobParams, result: FsGlobResult, access: 'read', idempotent: true },
  'fs.mkdir': { params: FsMkdirParams, result: FsMkdirResult, access: 'write', idempotent: true },
  'fs.delete': { params: FsDeleteParams, result: FsDeleteResult, access: 'write', idempotent: false },
  'fs.move': { params: FsMoveParams, result: FsMoveResult, access: 'write', idempotent: false },
  'fs.copy': { params: FsCopyParams, result: FsCopyResult, access: 'write', idempotent: false },
  'fs.upload': { params: FsUploadParams, result: FsUploadResult, access: 'write', payload: 'request', idempotent: false },
  'fs.download': { params: FsDownloadParams, result: FsDownloadResult, access: 'read', payload: 'response', idempotent: true },
  'fs.uploadOpen': { params: FsUploadOpenParams, result: FsUploadOpenResult, access: 'write', idempotent: false },
  'fs.uploadChunk': { params: FsUploadChunkParams, result: FsUploadChunkResult, access: 'write', payload: 'request', idempotent: false },
  'fs.uploadCommit': { params: FsUploadCommitParams, result: FsUploadResult, access: 'write', idempotent: false },
  'fs.uploadAbort': { params: FsUploadAbortParams, result: FsUploadAbortResult, access: 'write', idempotent: true },
  'fs.downloadStream': { params: FsDownloadStreamParams, result: FsDownloadResult, access: 'read', idempotent: false, events: DownloadStreamEvents },
} as const satisfies Record<string, MethodSpec>;
