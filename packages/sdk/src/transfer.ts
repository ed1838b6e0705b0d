import { constants, type Stats } from 'node:fs';
import { link, lstat, mkdir, open, readdir, readlink, realpath, rename, rmdir, symlink, unlink, type FileHandle } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import nodePath from 'node:path';
import { pack, type Pack } from 'tar-stream';
import { allocFramePayload, CheckedTarStream, CodedError, TRANSFER_CHUNK_BYTES, type CheckedTarEntry, type Result } from '@warren/protocol';
import type { Channel } from './channel.js';
import type { CallOptions } from './connection.js';
import { makeError, WarrenError } from './errors.js';
import { EventQueue } from './event-queue.js';

/** How far a streamed transfer has come; what {@link TransferOptions.onProgress} is called with. */
export interface TransferProgress {
  /** File bytes moved so far (for a raw archive passed to `upload`, archive bytes). */
  bytes: number;
  /** All the file bytes the transfer will move, when known at its start (files may change meanwhile). */
  totalBytes?: number | undefined;
}

/** Options of the streamed transfers (`uploadFrom`, `upload` of a stream, `downloadTo`, `downloadFile`). */
export interface TransferOptions extends CallOptions {
  /**
   * Called as the transfer advances (after each piece the other end took) and once at the end.
   * `timeoutMs` limits the whole transfer; without it a transfer of any size may take as long as
   * it needs, and only a stall of {@link TRANSFER_IDLE_MS} without progress fails it.
   */
  onProgress?: ((progress: TransferProgress) => void) | undefined;
}

/** A streamed transfer that moves nothing for this long fails with `RequestTimeoutError`. */
export const TRANSFER_IDLE_MS = 120_000;
/** Pieces of one upload on their way at once: enough to keep every hop busy, few enough to bound memory. */
export const UPLOAD_PIECES_IN_FLIGHT = 4;
/** The longest timer Node keeps (about 24.8 days): "no timeout" for one call of a transfer. */
const NO_TIMEOUT_MS = 2_147_483_647;
const READ_PIECE_BYTES = 256 * 1024;

/** Aborts when the caller's signal does, when `timeoutMs` passes, or when nothing moved for {@link TRANSFER_IDLE_MS}. */
class Watchdog {
  readonly controller = new AbortController();
  private last = Date.now();
  private readonly timer: NodeJS.Timeout;
  private readonly deadline: NodeJS.Timeout | undefined;
  private readonly onAbort: () => void;

  constructor(
    private readonly what: string,
    private readonly options: CallOptions,
  ) {
    this.onAbort = () => this.stop(makeError('CANCELLED', `${what} was cancelled by its AbortSignal.`));
    if (options.signal?.aborted) this.onAbort();
    options.signal?.addEventListener('abort', this.onAbort, { once: true });
    this.timer = setInterval(() => {
      if (Date.now() - this.last > TRANSFER_IDLE_MS)
        this.stop(makeError('REQUEST_TIMEOUT', `${what} moved nothing for ${TRANSFER_IDLE_MS / 1000} s; it was stopped.`));
    }, 1000);
    this.timer.unref();
    if (options.timeoutMs !== undefined) {
      this.deadline = setTimeout(
        () => this.stop(makeError('REQUEST_TIMEOUT', `${what} did not finish within ${options.timeoutMs} ms; it was stopped.`)),
        options.timeoutMs,
      );
    }
  }

  /** Why the transfer was stopped, once it was. */
  reason: WarrenError | undefined;

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  alive(): void {
    this.last = Date.now();
  }

  stop(reason: WarrenError): void {
    this.reason ??= reason;
    this.controller.abort();
  }

  /** The error to throw: the stop's reason when it was stopped, else `err` as a typed error. */
  explain(err: unknown): WarrenError {
    return this.reason ?? toWarren(err);
  }

  close(): void {
    clearInterval(this.timer);
    clearTimeout(this.deadline);
    this.options.signal?.removeEventListener('abort', this.onAbort);
  }
}

function toWarren(err: unknown): WarrenError {
  if (err instanceof WarrenError) return err;
  if (err instanceof CodedError) return makeError(err.code, err.message, { details: err.details, cause: err });
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'EEXIST') return makeError('ALREADY_EXISTS', (err as Error).message, { cause: err });
  if (code === 'ENOSPC') return makeError('RESOURCE_EXHAUSTED', `This machine's disk is full: ${(err as Error).message}`, { cause: err });
  return makeError('INTERNAL', err instanceof Error ? err.message : String(err), { cause: err });
}

/**
 * Cuts a stream of bytes into pieces of at most `size` bytes (small inputs are gathered up to it).
 * Each piece is gathered once, into a buffer with room for its frame's header, so sending it copies
 * nothing more.
 */
async function* pieces(source: AsyncIterable<Uint8Array>, size: number): AsyncGenerator<Buffer> {
  let held = allocFramePayload(size);
  let heldBytes = 0;
  for await (const chunk of source) {
    let rest = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    while (rest.length > 0) {
      const taken = rest.copy(held, heldBytes, 0, size - heldBytes);
      rest = rest.subarray(taken);
      heldBytes += taken;
      if (heldBytes === size) {
        yield held;
        held = allocFramePayload(size);
        heldBytes = 0;
      }
    }
  }
  if (heldBytes > 0) yield held.subarray(0, heldBytes);
}

/**
 * Streams a tar archive into a sandbox folder: `fs.uploadOpen`, the archive in pieces of at most
 * {@link TRANSFER_CHUNK_BYTES} with {@link UPLOAD_PIECES_IN_FLIGHT} on their way, then
 * `fs.uploadCommit`. The daemon checks each entry as it arrives and moves entries into place only
 * at the commit; any failure (here, there, or an abort) sends `fs.uploadAbort`, and the daemon
 * undoes what it staged (it does the same when the connection closes).
 */
export async function uploadArchive(
  channel: Channel,
  path: string,
  archive: AsyncIterable<Uint8Array>,
  options: TransferOptions & { overwrite?: boolean | undefined; totalBytes?: number | undefined; progressOf?: (archiveBytes: number) => number },
): Promise<Result<'fs.uploadCommit'>> {
  const dog = new Watchdog(`The upload into '${path}'`, options);
  const call = { signal: dog.signal, timeoutMs: NO_TIMEOUT_MS };
  let uploadId: string | undefined;
  const report = (archiveBytes: number) =>
    options.onProgress?.({ bytes: options.progressOf ? options.progressOf(archiveBytes) : archiveBytes, totalBytes: options.totalBytes });
  try {
    const opened = await channel.call('fs.uploadOpen', options.overwrite === undefined ? { path } : { path, overwrite: options.overwrite }, call);
    uploadId = opened.result.uploadId;
    const id = uploadId;
    const inFlight: Promise<number>[] = [];
    let offset = 0;
    let acked = 0;
    // The source is the caller's: a stalled one must not hold an aborted upload.
    const orStop = <T>(work: Promise<T>) => untilAborted(work, dog.signal, () => dog.explain(undefined));
    const source = pieces(archive, TRANSFER_CHUNK_BYTES);
    try {
      for (;;) {
        const next = await orStop(source.next());
        if (next.done) break;
        const piece = next.value;
        const sent = channel.call('fs.uploadChunk', { uploadId: id, offset }, { ...call, payload: piece }).then(({ result }) => {
          dog.alive();
          if (result.received > acked) {
            acked = result.received;
            report(acked);
          }
          return result.received;
        });
        // A piece that fails stops the upload at once, even while the source is between pieces.
        sent.catch((err: unknown) => dog.stop(toWarren(err)));
        inFlight.push(sent);
        offset += piece.length;
        dog.alive();
        if (inFlight.length >= UPLOAD_PIECES_IN_FLIGHT) await orStop(inFlight.shift()!);
      }
      while (inFlight.length > 0) await orStop(inFlight.shift()!);
    } finally {
      void source.return(undefined).catch(() => undefined);
    }
    const { result } = await channel.call('fs.uploadCommit', { uploadId: id }, call);
    report(offset);
    return result;
  } catch (err) {
    const failure = dog.explain(err);
    dog.stop(failure);
    if (uploadId !== undefined) await channel.call('fs.uploadAbort', { uploadId }, { timeoutMs: 10_000 }).catch(() => undefined);
    throw failure;
  } finally {
    dog.close();
  }
}

/**
 * `work`, or the error of `reason()` once `signal` aborts, whichever comes first. The listener goes
 * when `work` settles: racing against one promise that lives as long as the transfer would keep
 * every piece the race ever resolved with reachable until the end.
 */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal, reason: () => Error): Promise<T> {
  if (signal.aborted) return Promise.reject(reason());
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(reason());
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(toWarren(err));
      },
    );
  });
}

/** One local entry to upload: its archive header and, for a file, where to read it. */
interface LocalEntry {
  header: { name: string; type: 'file' | 'directory' | 'symlink'; mode: number; mtime: Date; size?: number; linkname?: string };
  absolute?: string;
}

/**
 * Lists what {@link uploadFrom} sends for a local file or folder: a folder's contents with names
 * relative to it (files, folders, and links as they are, never followed), or the one file under
 * `fileName`. Special files are left out.
 */
async function localEntries(local: string, fileName: string): Promise<{ entries: LocalEntry[]; totalBytes: number; kind: 'file' | 'directory' }> {
  const stats = await lstat(local).catch((err: unknown) => {
    throw makeError('NOT_FOUND', `No file or folder at '${local}' on this machine.`, { cause: err });
  });
  if (stats.isFile()) {
    return { entries: [{ header: fileHeader(fileName, stats), absolute: local }], totalBytes: stats.size, kind: 'file' };
  }
  if (!stats.isDirectory()) throw makeError('UNSUPPORTED_FILE_TYPE', `'${local}' is neither a regular file nor a folder; upload files and folders only.`);
  const entries: LocalEntry[] = [];
  let totalBytes = 0;
  const walk = async (dir: string, rel: string): Promise<void> => {
    const names = (await readdir(dir)).sort();
    for (const name of names) {
      const absolute = nodePath.join(dir, name);
      const entryName = rel ? `${rel}/${name}` : name;
      const info = await lstat(absolute);
      if (info.isDirectory()) {
        entries.push({ header: { name: `${entryName}/`, type: 'directory', mode: info.mode & 0o777, mtime: info.mtime } });
        await walk(absolute, entryName);
      } else if (info.isFile()) {
        entries.push({ header: fileHeader(entryName, info), absolute });
        totalBytes += info.size;
      } else if (info.isSymbolicLink()) {
        entries.push({ header: { name: entryName, type: 'symlink', linkname: await readlink(absolute), mode: 0o777, mtime: info.mtime } });
      }
    }
  };
  await walk(local, '');
  return { entries, totalBytes, kind: 'directory' };
}

function fileHeader(name: string, info: Stats): LocalEntry['header'] {
  return { name, type: 'file', mode: info.mode & 0o777, mtime: info.mtime, size: info.size };
}

/** Resolves on the stream's next `drain`; rejects once `signal` aborts. */
function drainOf(stream: NodeJS.WritableStream, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      stream.off('drain', onDrain);
      reject(makeError('CANCELLED', 'The transfer was stopped.'));
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

/** Packs the entries into `archive`, reading each file in pieces with the archive's backpressure; counts the file bytes read. */
async function packLocal(archive: Pack, entries: LocalEntry[], counted: { bytes: number }, signal: AbortSignal): Promise<void> {
  for (const { header, absolute } of entries) {
    if (header.type !== 'file') {
      await new Promise<void>((resolve, reject) => archive.entry(header, (err) => (err ? reject(err) : resolve())));
      continue;
    }
    const handle = await open(absolute!, constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      const size = header.size ?? 0;
      let entryDone: (err?: Error | null) => void = () => undefined;
      const finished = new Promise<void>((resolve, reject) => {
        entryDone = (err) => (err ? reject(err) : resolve());
      });
      finished.catch(() => undefined);
      const stream = archive.entry(header, (err) => entryDone(err));
      // A destroyed archive fails its open entry: the callback above reports it.
      stream.on('error', () => undefined);
      let position = 0;
      while (position < size) {
        if (signal.aborted) throw makeError('CANCELLED', 'The transfer was stopped.');
        const buffer = Buffer.allocUnsafe(Math.min(READ_PIECE_BYTES, size - position));
        const { bytesRead } = await handle.read(buffer, 0, buffer.length, position);
        if (bytesRead === 0) throw makeError('CONFLICT', `'${absolute}' shrank while it was uploaded; upload it again once nothing writes it.`);
        position += bytesRead;
        counted.bytes += bytesRead;
        if (!stream.write(buffer.subarray(0, bytesRead))) await drainOf(stream, signal);
      }
      stream.end(() => undefined);
      await finished;
    } finally {
      await handle.close();
    }
  }
  archive.finalize();
}

/**
 * Streams a local file or folder into the sandbox: a folder's contents land in `path` (created
 * when missing), a file lands at `path` itself. See {@link uploadArchive} for how it travels.
 */
export async function uploadFrom(
  channel: Channel,
  local: string,
  path: string,
  options: TransferOptions & { overwrite?: boolean | undefined },
): Promise<Result<'fs.uploadCommit'> & { kind: 'file' | 'directory' }> {
  const remote = path.replace(/\/+$/, '') || path;
  const slash = remote.lastIndexOf('/');
  const fileName = slash === -1 ? remote : remote.slice(slash + 1);
  const { entries, totalBytes, kind } = await localEntries(local, fileName);
  const into = kind === 'directory' ? path : slash === -1 ? '.' : slash === 0 ? '/' : remote.slice(0, slash);
  if (kind === 'file' && (fileName === '' || fileName === '.' || fileName === '..'))
    throw makeError('INVALID_PARAMS', `'${path}' does not name a file; give the file's path in the sandbox, e.g. 'data/${nodePath.basename(local)}'.`);
  const archive = pack();
  const stop = new AbortController();
  // File bytes read when the archive had reached each size: progress counts what the daemon took.
  const counted = { bytes: 0 };
  let archiveBytes = 0;
  let last = 0;
  const marks: [number, number][] = [];
  // When the upload stops reading first (the daemon refused it: disk full, file too large), the
  // archive ends under the packer, which then fails with tar-stream's "already finalized or
  // destroyed": the upload's own error is the one to report, so the packer's is held back.
  let uploadStoppedReading = false;
  let packerCut: unknown;
  const producing = packLocal(archive, entries, counted, AbortSignal.any([stop.signal, ...(options.signal ? [options.signal] : [])])).catch((err: unknown) => {
    if (uploadStoppedReading) {
      packerCut = err;
      return;
    }
    archive.destroy(err as Error);
    throw err;
  });
  const source = (async function* () {
    for await (const chunk of archive as AsyncIterable<Buffer>) {
      archiveBytes += chunk.length;
      marks.push([archiveBytes, counted.bytes]);
      let resumed = false;
      try {
        yield chunk;
        resumed = true;
      } finally {
        // Set before the loop's own exit destroys the archive, so the packer's failure that follows is known for what it is.
        if (!resumed) uploadStoppedReading = true;
      }
    }
  })();
  const progressOf = (acked: number) => {
    let bytes = 0;
    while (marks.length > 0 && marks[0]![0] <= acked) bytes = marks.shift()![1];
    last = Math.max(last, bytes);
    return last;
  };
  try {
    const [result] = await Promise.all([uploadArchive(channel, into, source, { ...options, totalBytes, progressOf }), producing]);
    // Never report success for an archive the packer did not finish.
    if (packerCut !== undefined) throw packerCut;
    options.onProgress?.({ bytes: totalBytes, totalBytes });
    return { ...result, kind };
  } finally {
    stop.abort();
    archive.destroy();
    producing.catch(() => undefined);
  }
}

/**
 * Streams a download (`fs.downloadStream`) and hands each entry to `sink` as it arrives, checked
 * by the shared tar rules. The pieces wait in a bounded queue: while it holds more than a few MiB
 * the connection stops reading, so the daemon stops reading files (backpressure end to end).
 */
async function streamDownload(
  channel: Channel,
  path: string,
  options: TransferOptions & { maxBytes?: number | undefined },
  sink: {
    entry(entry: CheckedTarEntry): Promise<void>;
    data(data: Buffer): Promise<void>;
    end(): Promise<void>;
  },
): Promise<Result<'fs.downloadStream'>> {
  const dog = new Watchdog(`The download of '${path}'`, options);
  const queue = new EventQueue<{ offset: number; data: Buffer }>(channel, () => dog.controller.abort());
  let totalBytes: number | undefined;
  const params = options.maxBytes === undefined ? { path } : { path, maxBytes: options.maxBytes };
  const call = channel.call('fs.downloadStream', params, {
    signal: dog.signal,
    timeoutMs: NO_TIMEOUT_MS,
    onEvent: (event, payload) => {
      dog.alive();
      if (event.method !== 'fs.downloadStream') return;
      if (event.event === 'start') {
        totalBytes = event.data.totalBytes;
        options.onProgress?.({ bytes: 0, totalBytes });
      } else if (event.event === 'data') queue.push({ offset: event.data.offset, data: payload ?? Buffer.alloc(0) }, payload?.length ?? 0);
    },
  });
  call.then(
    () => queue.end(),
    (err: unknown) => queue.fail(err),
  );
  const reader = new CheckedTarStream({ maxBytes: Number.MAX_SAFE_INTEGER });
  let received = 0;
  let fileBytes = 0;
  let declared = 0;
  const tooLarge = () => makeError('FILE_TOO_LARGE', `'${path}' makes an archive larger than the ${options.maxBytes} bytes this download allows (maxBytes).`);
  try {
    for await (const { offset, data } of queue) {
      dog.alive();
      // The daemon is on the sandbox's side: every size and offset it sends is checked here too.
      if (offset !== received) throw makeError('INVALID_FRAME', `The download's piece at byte ${offset} came where byte ${received} was due.`);
      received += data.length;
      if (options.maxBytes !== undefined && received > options.maxBytes) throw tooLarge();
      for (const step of reader.push(data)) {
        if (step.type === 'entry') {
          // Refused at the header that says so, before a byte of it is written.
          declared += step.entry.size;
          if (options.maxBytes !== undefined && declared > options.maxBytes) throw tooLarge();
          await sink.entry(step.entry);
        } else if (step.type === 'data') {
          await sink.data(step.data);
          fileBytes += step.data.length;
        } else await sink.end();
      }
      options.onProgress?.({ bytes: fileBytes, totalBytes });
    }
    reader.end();
    const { result } = await call;
    if (result.bytes !== received) throw makeError('INVALID_FRAME', `The download says it sent ${result.bytes} bytes; ${received} arrived.`);
    return result;
  } catch (err) {
    const failure = dog.explain(err);
    dog.stop(failure);
    await call.catch(() => undefined);
    throw failure;
  } finally {
    await queue.return();
    dog.close();
  }
}

/**
 * Streams a sandbox file or folder into a local folder (created when missing): files are created
 * O_EXCL|O_NOFOLLOW (an existing file is never replaced), nothing is written through a link, and
 * a download that fails or is aborted removes what it made.
 */
export async function downloadTo(
  channel: Channel,
  path: string,
  localFolder: string,
  options: TransferOptions & { maxBytes?: number | undefined },
): Promise<Result<'fs.downloadStream'>> {
  const made: { path: string; kind: 'file' | 'dir' }[] = [];
  const firstMade = await mkdir(localFolder, { recursive: true });
  if (firstMade !== undefined) made.push({ path: firstMade, kind: 'dir' });
  const root = await realpath(localFolder);
  let current: FileHandle | undefined;
  try {
    return await streamDownload(channel, path, options, {
      async entry(entry) {
        const target = nodePath.join(root, ...entry.name.split('/'));
        const parent = nodePath.dirname(target);
        const first = await mkdir(parent, { recursive: true });
        if (first !== undefined) made.push({ path: first, kind: 'dir' });
        // The parent must be a real folder inside the root: a link swapped in locally is refused.
        if ((await realpath(parent)) !== parent) throw makeError('PATH_NOT_IN_SANDBOX', `Refusing to extract '${entry.name}': a parent folder is a link.`);
        if (entry.kind === 'directory') {
          const existing = await lstat(target).catch(() => undefined);
          if (existing && !existing.isDirectory()) throw makeError('ALREADY_EXISTS', `Refusing to extract '${entry.name}': a non-folder exists there.`);
          if (!existing) {
            await mkdir(target, { mode: entry.mode | 0o700 });
            made.push({ path: target, kind: 'dir' });
          }
        } else if (entry.kind === 'file') {
          current = await open(target, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, entry.mode).catch((e: unknown) => {
            throw makeError(
              (e as NodeJS.ErrnoException).code === 'EEXIST' ? 'ALREADY_EXISTS' : 'INTERNAL',
              `Refusing to extract '${entry.name}': ${(e as Error).message}`,
            );
          });
          made.push({ path: target, kind: 'file' });
        } else {
          await symlink(entry.linkname!, target);
          made.push({ path: target, kind: 'file' });
        }
      },
      async data(data) {
        await writeAll(current!, data);
      },
      async end() {
        await current?.close();
        current = undefined;
      },
    });
  } catch (err) {
    await current?.close().catch(() => undefined);
    for (const item of made.reverse()) await (item.kind === 'dir' ? rmdir(item.path) : unlink(item.path)).catch(() => undefined);
    throw toWarren(err);
  }
}

/**
 * Streams one sandbox file to a local file: written under a temporary name beside it, then moved
 * into place, so the local file is either the whole download or untouched (and a failed download
 * leaves nothing). An existing local file is replaced only with `overwrite`.
 */
export async function downloadFile(
  channel: Channel,
  path: string,
  localFile: string,
  options: TransferOptions & { maxBytes?: number | undefined; overwrite?: boolean | undefined },
): Promise<Result<'fs.downloadStream'>> {
  const temp = nodePath.join(nodePath.dirname(localFile), `.${nodePath.basename(localFile).slice(0, 180)}.warren-${randomBytes(6).toString('hex')}`);
  let handle: FileHandle | undefined;
  let entries = 0;
  try {
    const result = await streamDownload(channel, path, options, {
      async entry(entry) {
        if (entry.kind !== 'file' || ++entries > 1) throw makeError('IS_A_DIRECTORY', `'${path}' is not one regular file; download a folder with downloadTo.`);
        handle = await open(temp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, entry.mode);
      },
      async data(data) {
        await writeAll(handle!, data);
      },
      async end() {
        await handle?.close();
        handle = undefined;
      },
    });
    if (entries !== 1) throw makeError('NOT_FOUND', `'${path}' was not downloaded as a file.`);
    if (options.overwrite) await rename(temp, localFile);
    else {
      // link(2) refuses an existing name: an existing local file is never replaced unasked.
      await link(temp, localFile);
      await unlink(temp);
    }
    return result;
  } catch (err) {
    await handle?.close().catch(() => undefined);
    await unlink(temp).catch(() => undefined);
    throw toWarren(err);
  }
}

async function writeAll(handle: FileHandle, data: Buffer): Promise<void> {
  let done = 0;
  while (done < data.length) {
    const { bytesWritten } = await handle.write(data, done, data.length - done, null);
    done += bytesWritten;
  }
}
