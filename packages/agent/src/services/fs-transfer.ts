import { randomBytes } from 'node:crypto';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { pack, type Pack } from 'tar-stream';
import {
  allocFramePayload,
  CheckedTarStream,
  CodedError,
  suffixAllowed,
  TRANSFER_CHUNK_BYTES,
  type CheckedTarEntry,
  type Params,
  type Result,
} from '@warren/protocol';
import type { CallContext, Handler } from '../dispatch.js';
import { resolvePath, type ResolvedPath } from '../policy.js';
import { mapFsError } from '../fs-error.js';
import { approve, resolveFor, type FsContext } from './fs-common.js';
import { Placement, type Staged } from './fs-place.js';
import { downloadEntries, openDownloadFile } from './fs-tar.js';

type TransferHandlers = {
  'fs.uploadOpen': Handler<'fs.uploadOpen'>;
  'fs.uploadChunk': Handler<'fs.uploadChunk'>;
  'fs.uploadCommit': Handler<'fs.uploadCommit'>;
  'fs.uploadAbort': Handler<'fs.uploadAbort'>;
  'fs.downloadStream': Handler<'fs.downloadStream'>;
};

/** How long an open upload waits for its next call before it is abandoned and undone. */
export const UPLOAD_IDLE_MS = 120_000;
/** Open uploads per connection; one more is refused with `RESOURCE_EXHAUSTED`. */
export const MAX_UPLOADS_PER_CONNECTION = 8;
/** How much of a file one read of a streamed download takes. */
const READ_PIECE_BYTES = 256 * 1024;

type UploadCounts = Omit<Result<'fs.uploadCommit'>, 'path'>;

/**
 * One streamed upload: the archive is read as it arrives, each entry checked by the tar rules
 * and the policy the moment its header is complete, and written under a hidden temporary name
 * beside its target (created O_EXCL|O_NOFOLLOW in its folder pinned by a descriptor: `fs-place.ts`). Nothing is in
 * place before {@link commit}; a refusal, an abort, an idle timeout or the connection closing
 * undoes every step, so no partial file stays and replaced files were never touched.
 */
class Upload {
  private readonly reader = new CheckedTarStream({ maxBytes: Number.MAX_SAFE_INTEGER });
  private received = 0;
  private queue: Promise<unknown> = Promise.resolve();
  /** Every step, each in its folder pinned by a descriptor, with its undo. */
  private readonly placement: Placement;
  private readonly staged: Staged[] = [];
  private current: { handle: FileHandle; entry: CheckedTarEntry; display: string; staged: Staged } | undefined;
  private currentDisplay: string;
  private failure: unknown;
  private timer: NodeJS.Timeout | undefined;
  readonly counts: UploadCounts = { files: 0, directories: 0, symlinks: 0, bytes: 0 };

  constructor(
    readonly id: string,
    /** The connection that opened it: only calls on it may continue it. */
    readonly owner: AbortSignal,
    private readonly fs: FsContext,
    readonly dest: ResolvedPath,
    private readonly base: string,
    private readonly overwrite: boolean,
    private readonly onDone: (failure: unknown) => void,
  ) {
    this.currentDisplay = base;
    this.placement = new Placement(fs);
    this.touch();
  }

  /** Restarts the idle timer. */
  touch(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      void this.fail(
        new CodedError('CANCELLED', `The upload into '${this.base}' sent nothing for ${UPLOAD_IDLE_MS / 1000} s and was abandoned; nothing of it was written.`),
      );
    }, UPLOAD_IDLE_MS);
    this.timer.unref();
  }

  /** Makes the destination folder (undone with the rest). */
  async begin(): Promise<void> {
    await this.guard(() => this.placement.makeFolders(this.dest.absolute, this.base));
  }

  /** Takes the next piece, in order; pieces sent before the last one finished wait their turn. */
  chunk(offset: number, payload: Buffer, ctx: CallContext): Promise<number> {
    const run = this.queue.then(() =>
      this.guard(async () => {
        if (offset !== this.received) {
          throw new CodedError('INVALID_PARAMS', `This piece starts at byte ${offset}, but the upload has ${this.received} bytes; send the pieces in order.`, {
            offset,
            received: this.received,
          });
        }
        this.received += payload.length;
        for (const step of this.reader.push(payload)) {
          this.check();
          if (ctx.signal.aborted) throw new CodedError('CANCELLED', 'The upload was cancelled; nothing of it was written.');
          if (step.type === 'entry') await this.stage(step.entry, ctx);
          else if (step.type === 'data') await writeAll(this.current!.handle, step.data);
          else await this.finishEntry();
        }
        return this.received;
      }),
    );
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** Ends the archive and moves every staged entry into place; a failure on the way undoes it all. */
  commit(): Promise<UploadCounts> {
    const run = this.queue.then(() =>
      this.guard(async () => {
        this.reader.end();
        for (const staged of this.staged) {
          this.check();
          this.currentDisplay = staged.target.display;
          await this.placement.place(staged, staged.target.display);
        }
        this.done = true;
        this.finish();
        await this.placement.finish();
        return this.counts;
      }),
    );
    this.queue = run.catch(() => undefined);
    return run;
  }

  /**
   * Abandons the upload: every step undone. Safe to call more than once, and never after a commit
   * that went through. From outside the queue (an abort, the connection closing, the idle timer)
   * it first lets the piece in progress stop at its next step, so nothing it was making is missed.
   */
  async fail(err: unknown, inQueue = false): Promise<void> {
    if (this.failure !== undefined || this.done) return;
    this.failure = err;
    this.finish();
    if (!inQueue) await this.queue;
    await this.current?.handle.close().catch(() => undefined);
    this.current = undefined;
    await this.placement.rollback();
  }

  private done = false;

  /** Throws the failure once the upload was abandoned: a piece in progress stops at its next step. */
  private check(): void {
    if (this.failure !== undefined) throw this.failure;
  }

  private finish(): void {
    clearTimeout(this.timer);
    this.onDone(this.failure);
  }

  /** Runs a step; the first failure undoes everything and is what every later call answers. */
  private async guard<T>(step: () => Promise<T>): Promise<T> {
    if (this.failure !== undefined) throw this.failure;
    try {
      return await step();
    } catch (err) {
      const mapped = mapFsError(err, this.currentDisplay);
      const wrapped =
        mapped instanceof CodedError
          ? new CodedError(
              mapped.code,
              `${mapped.message} The upload into '${this.base}' stopped there and was undone: nothing of it was written.`,
              mapped.details,
            )
          : mapped;
      await this.fail(wrapped, true);
      throw this.failure ?? wrapped;
    }
  }

  /** Checks one entry against the policy and what exists, asks its approval, and starts writing it under a temporary name. */
  private async stage(entry: CheckedTarEntry, ctx: CallContext): Promise<void> {
    const display = this.base === '.' ? entry.name : `${this.base}/${entry.name}`;
    this.currentDisplay = display;
    const target = await resolvePath(this.fs.policy, display, 'write', { followLast: false });
    if (entry.kind === 'file') {
      if (!suffixAllowed(target.mount.suffixes, entry.name)) {
        throw new CodedError(
          'SUFFIX_NOT_ALLOWED',
          `The archive entry '${entry.name}' has a suffix this sandbox does not allow (${target.mount.suffixes!.join(', ')}).`,
          { entry: entry.name },
        );
      }
      if (target.mount.maxFileBytes !== undefined && entry.size > target.mount.maxFileBytes) {
        throw new CodedError('FILE_TOO_LARGE', `The archive entry '${entry.name}' is ${entry.size} bytes; the limit is ${target.mount.maxFileBytes}.`, {
          entry: entry.name,
        });
      }
    }
    if (target.stat) {
      const isDir = target.stat.isDirectory();
      if (entry.kind === 'directory' && !isDir)
        throw new CodedError('ALREADY_EXISTS', `The archive has a folder '${entry.name}' where a file exists.`, { entry: entry.name });
      if (entry.kind !== 'directory' && isDir)
        throw new CodedError('IS_A_DIRECTORY', `The archive has a file '${entry.name}' where a folder exists.`, { entry: entry.name });
      if (entry.kind !== 'directory' && !this.overwrite)
        throw new CodedError('ALREADY_EXISTS', `The archive's file '${entry.name}' already exists; pass overwrite: true to replace it.`, { entry: entry.name });
      if (entry.kind !== 'directory' && !target.stat.isFile() && !target.stat.isSymbolicLink())
        throw new CodedError('UNSUPPORTED_FILE_TYPE', `'${display}' exists and is not a regular file.`, { entry: entry.name });
    }
    // One approval per file and link written and per folder made, under the rules of its mount.
    if (target.mount.writeApproval && !(entry.kind === 'directory' && target.stat)) {
      await approve(ctx, { operation: 'upload', path: target.display, ...(entry.kind === 'file' ? { bytes: entry.size } : {}) });
    }
    await this.placement.makeFolders(path.posix.dirname(target.absolute), display);
    if (entry.kind === 'directory') {
      await this.placement.makeFolders(target.absolute, display, entry.mode | 0o700);
      this.counts.directories++;
      return;
    }
    if (entry.kind === 'symlink') {
      this.staged.push(await this.placement.stageLink(target, display, entry.linkname!));
      this.counts.symlinks++;
      return;
    }
    const { staged, handle } = await this.placement.stageFile(target, display, entry.mode);
    this.current = { handle, entry, display, staged };
  }

  private async finishEntry(): Promise<void> {
    const current = this.current;
    if (!current) return;
    this.current = undefined;
    try {
      await current.handle.chmod(current.entry.mode);
    } finally {
      await current.handle.close();
    }
    this.staged.push(current.staged);
    this.counts.files++;
    this.counts.bytes += current.entry.size;
  }
}

/** Writes all of `data` at the handle's position (a write may take less than it was given). */
async function writeAll(handle: FileHandle, data: Buffer): Promise<void> {
  let done = 0;
  while (done < data.length) {
    const { bytesWritten } = await handle.write(data, done, data.length - done, null);
    done += bytesWritten;
  }
}

const NO_CONNECTION = new AbortController().signal;
/** How many ended uploads' failures are kept to answer their late pieces. */
const MAX_REMEMBERED_FAILURES = 64;

/**
 * Streamed uploads and downloads of any size (protocol minor 3). Uploads live in a table of this
 * handler set, each bound to the connection that opened it; downloads are one call whose `data`
 * events carry the archive, paced by the connection's backpressure.
 */
export function transferHandlers(fs: FsContext): TransferHandlers {
  const uploads = new Map<string, Upload>();
  // Pieces already on their way when an upload fails must answer its first failure (FILE_TOO_LARGE,
  // say), not "no such upload": the failures of recently ended uploads, oldest dropped first.
  const failed = new Map<string, { owner: AbortSignal; failure: unknown }>();
  const find = (uploadId: string, ctx: CallContext): Upload => {
    const upload = uploads.get(uploadId);
    const ended = failed.get(uploadId);
    if (!upload && ended && ended.owner === (ctx.connection ?? NO_CONNECTION)) throw ended.failure;
    if (!upload || upload.owner !== (ctx.connection ?? NO_CONNECTION)) {
      throw new CodedError(
        'NOT_FOUND',
        `No upload '${uploadId}' is open on this connection (it ended, was abandoned, or was opened on another one); start again with fs.uploadOpen.`,
        {
          uploadId,
        },
      );
    }
    upload.touch();
    return upload;
  };
  return {
    async 'fs.uploadOpen'(params: Params<'fs.uploadOpen'>, ctx) {
      const owner = ctx.connection ?? NO_CONNECTION;
      let open = 0;
      for (const upload of uploads.values()) if (upload.owner === owner) open++;
      if (open >= MAX_UPLOADS_PER_CONNECTION) {
        throw new CodedError('RESOURCE_EXHAUSTED', `This connection has ${open} uploads open, the most it may; commit or abort one first.`, {
          limit: MAX_UPLOADS_PER_CONNECTION,
        });
      }
      const dest = await resolvePath(fs.policy, params.path, 'write');
      if (dest.stat && !dest.stat.isDirectory())
        throw new CodedError('NOT_A_DIRECTORY', `'${params.path}' is a file; upload into a folder.`, { path: params.path });
      if (!dest.stat && dest.mount.writeApproval) await approve(ctx, { operation: 'upload', path: dest.display });
      const id = `up_${randomBytes(16).toString('hex')}`;
      const base = params.path.replace(/\/+$/, '') || '.';
      const onClose = () => void upload.fail(new CodedError('CANCELLED', 'The connection closed during the upload; nothing of it was written.'));
      const upload = new Upload(id, owner, fs, dest, base, params.overwrite, (failure) => {
        uploads.delete(id);
        owner.removeEventListener('abort', onClose);
        if (failure === undefined) return;
        failed.set(id, { owner, failure });
        if (failed.size > MAX_REMEMBERED_FAILURES) failed.delete(failed.keys().next().value!);
      });
      uploads.set(id, upload);
      owner.addEventListener('abort', onClose, { once: true });
      await upload.begin();
      return { result: { uploadId: id, path: dest.display } };
    },

    async 'fs.uploadChunk'(params, ctx) {
      const upload = find(params.uploadId, ctx);
      const payload = ctx.payload ?? Buffer.alloc(0);
      if (payload.length > TRANSFER_CHUNK_BYTES) {
        const err = new CodedError(
          'INVALID_PARAMS',
          `A piece carries at most ${TRANSFER_CHUNK_BYTES} bytes; this one has ${payload.length}. The upload was abandoned.`,
          {
            limit: TRANSFER_CHUNK_BYTES,
          },
        );
        await upload.fail(err);
        throw err;
      }
      return { result: { received: await upload.chunk(params.offset, payload, ctx) } };
    },

    async 'fs.uploadCommit'(params, ctx) {
      const upload = find(params.uploadId, ctx);
      const counts = await upload.commit();
      return { result: { path: upload.dest.display, ...counts } };
    },

    async 'fs.uploadAbort'(params, ctx) {
      const upload = uploads.get(params.uploadId);
      if (!upload || upload.owner !== (ctx.connection ?? NO_CONNECTION)) return { result: { aborted: false } };
      await upload.fail(new CodedError('CANCELLED', 'The upload was aborted by its caller; nothing of it was written.'));
      return { result: { aborted: true } };
    },

    async 'fs.downloadStream'(params, ctx) {
      const source = await resolveFor(fs, ctx, params.path, 'read', 'download');
      if (!source.stat) throw new CodedError('NOT_FOUND', `No such file or folder: '${params.path}'.`, { path: params.path });
      ctx.emit('start', { totalBytes: await countBytes(fs, source, params.path, ctx.signal) });
      const archive = pack();
      const entries = downloadEntries(fs, source, params.path, ctx.signal);
      const produce = async () => {
        for (;;) {
          const step = await entries.next();
          if (step.done) {
            archive.finalize();
            return step.value;
          }
          const { header, file } = step.value;
          if (!file) await entryDone(archive, header);
          else await packFile(fs, source, archive, header, file, signal);
        }
      };
      // Aborted when either side fails, so the other stops too (a reader waiting on backpressure included).
      const stop = new AbortController();
      const signal = AbortSignal.any([ctx.signal, stop.signal]);
      let sent = 0;
      const consume = async () => {
        let pending: Buffer[] = [];
        let pendingBytes = 0;
        const flush = async () => {
          if (pendingBytes === 0) return;
          // Gathered once, into a buffer with room for the event's header: the frame is not copied again.
          const piece = allocFramePayload(pendingBytes);
          let at = 0;
          for (const chunk of pending) at += chunk.copy(piece, at);
          pending = [];
          pendingBytes = 0;
          if (params.maxBytes !== undefined && sent + piece.length > params.maxBytes) {
            throw new CodedError(
              'FILE_TOO_LARGE',
              `'${params.path}' makes an archive larger than the ${params.maxBytes} bytes this download allows (maxBytes).`,
              {
                path: params.path,
                limit: params.maxBytes,
              },
            );
          }
          ctx.emit('data', { offset: sent }, piece);
          sent += piece.length;
          if (ctx.congested()) await ctx.drained();
          if (ctx.signal.aborted) throw new CodedError('CANCELLED', `The download of '${params.path}' was cancelled.`);
        };
        for await (const chunk of archive as AsyncIterable<Buffer>) {
          pending.push(chunk);
          pendingBytes += chunk.length;
          if (pendingBytes >= TRANSFER_CHUNK_BYTES) await flush();
        }
        await flush();
      };
      try {
        const stopOnFailure = async <T>(work: Promise<T>): Promise<T> => {
          try {
            return await work;
          } catch (err) {
            stop.abort();
            throw err;
          }
        };
        const [counts] = await Promise.all([stopOnFailure(produce()), stopOnFailure(consume())]);
        return { result: { path: source.display, ...counts, bytes: sent } };
      } catch (err) {
        stop.abort();
        archive.destroy();
        await entries.return(undefined as never).catch(() => undefined);
        throw mapFsError(err, params.path);
      }
    },
  };
}

/** The file bytes a download will carry, as the tree is now (the `start` event's estimate). */
async function countBytes(fs: FsContext, source: ResolvedPath, display: string, signal: AbortSignal): Promise<number> {
  let total = 0;
  const entries = downloadEntries(fs, source, display, signal);
  for (;;) {
    const step = await entries.next();
    if (step.done) return total;
    total += step.value.file?.stat.size ?? 0;
  }
}

function entryDone(archive: Pack, header: Parameters<Pack['entry']>[0]): Promise<void> {
  return new Promise((resolve, reject) => archive.entry(header, (err) => (err ? reject(err) : resolve())));
}

/**
 * Adds one file to the archive, read in pieces with the archive's backpressure. The entry's size
 * is the file's size when it was opened; a file that shrinks or grows while it is read is refused
 * with `CONFLICT` (a file the sandbox grows without end cannot make a download endless).
 */
async function packFile(
  fs: FsContext,
  source: ResolvedPath,
  archive: Pack,
  header: Parameters<Pack['entry']>[0],
  file: { absolute: string; stat: import('node:fs').Stats; display: string },
  signal: AbortSignal,
): Promise<void> {
  const handle = await openDownloadFile(fs, source, file);
  try {
    const before = await handle.stat();
    const size = before.size;
    const changed = () =>
      new CodedError(
        'CONFLICT',
        `'${file.display}' changed while it was downloaded (it had ${size} bytes when it was opened); download it again once nothing writes it.`,
        {
          path: file.display,
        },
      );
    let done: () => void = () => undefined;
    let failed: (err: unknown) => void = () => undefined;
    const finished = new Promise<void>((resolve, reject) => {
      done = resolve;
      failed = reject;
    });
    const stream = archive.entry({ ...header, size }, (err) => (err ? failed(err) : done()));
    // A destroyed archive fails its open entry: the callback above reports it.
    stream.on('error', () => undefined);
    finished.catch(() => undefined);
    let position = 0;
    while (position < size) {
      if (signal.aborted) throw new CodedError('CANCELLED', 'The download was cancelled.');
      const buffer = Buffer.allocUnsafe(Math.min(READ_PIECE_BYTES, size - position));
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, position);
      if (bytesRead === 0) throw changed();
      position += bytesRead;
      if (!stream.write(buffer.subarray(0, bytesRead))) await drainOf(stream, signal);
    }
    const after = await handle.stat();
    const probe = Buffer.alloc(1);
    if (after.size !== size || (await handle.read(probe, 0, 1, size)).bytesRead !== 0) throw changed();
    stream.end(() => undefined);
    await finished;
  } finally {
    await handle.close();
  }
}

/** Resolves on the stream's next `drain`; rejects with `CANCELLED` once `signal` aborts. */
function drainOf(
  stream: { once(event: 'drain', listener: () => void): unknown; off(event: 'drain', listener: () => void): unknown },
  signal: AbortSignal,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      stream.off('drain', onDrain);
      reject(new CodedError('CANCELLED', 'The download was cancelled.'));
    };
    const onDrain = () => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    };
    if (signal.aborted) return onAbort();
    stream.once('drain', onDrain);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
