"""Streamed uploads and downloads with progress (``files.upload_from``, ``files.download_to``,
``files.download_file``), the twin of the TypeScript SDK's transfer.ts.

An upload packs the local file or folder as a tar stream on a worker thread and sends it in pieces
of at most 1 MiB, four on their way at once (``fs.uploadOpen``, ``fs.uploadChunk``,
``fs.uploadCommit``); the daemon checks each entry as it arrives and moves entries into place only
at the commit, and any failure sends ``fs.uploadAbort``. A download (``fs.downloadStream``) is read
as a tar stream on a worker thread, each entry checked by the upload rules before a byte of it is
written; the pieces wait in a bounded queue, so a slow disk slows the daemon (backpressure end to
end). Neither holds more than a few MiB in memory, whatever the size.
"""

from __future__ import annotations

import asyncio
import os
import queue
import secrets
import stat
import tarfile
import threading
import time
from dataclasses import dataclass
from typing import Any, AsyncIterable, AsyncIterator, BinaryIO, Callable, Dict, Iterable, List, Optional, Tuple, Union, cast

from ._protocol import FsDownloadResult, FsUploadResult
from ._pydantic import BaseModel
from ._stream import EventStream
from .archive import TarChecker, _kind
from .connection import Caller
from .errors import (
    AlreadyExistsError,
    ConflictError,
    FileTooLargeError,
    InvalidFrameError,
    InvalidParamsError,
    IsADirectoryError,
    NotFoundError,
    PathNotInSandboxError,
    RequestTimeoutError,
    UnsupportedFileTypeError,
)

__all__ = ["ArchiveSource", "TransferProgress", "upload_archive", "upload_from", "download_to", "download_file"]

#: The largest piece of one upload call (the protocol's TRANSFER_CHUNK_BYTES).
TRANSFER_CHUNK_BYTES = 1024 * 1024
#: Pieces of one upload on their way at once: enough to keep every hop busy, few enough to bound memory.
UPLOAD_PIECES_IN_FLIGHT = 4
#: A transfer that moves nothing for this long fails with ``RequestTimeoutError``, in seconds.
TRANSFER_IDLE_SECONDS = 120.0
#: How long one call of a transfer may take: a transfer of any size takes as long as it needs.
_NO_TIMEOUT = 30 * 24 * 60 * 60.0
_READ_PIECE_BYTES = 256 * 1024
_QUEUE_PIECES = 8


@dataclass
class TransferProgress:
    """How far a streamed transfer has come: file bytes moved so far, and all the file bytes it will
    move when known at its start (files may change meanwhile)."""

    bytes: int
    total_bytes: Optional[int] = None


ProgressHandler = Callable[[TransferProgress], None]


def _cancel(task: "Optional[asyncio.Task[Any]]") -> None:
    if task is not None:
        task.cancel()


class _Stopped(Exception):
    """The other side of a worker thread's queue went away."""


class _Pipe:
    """A bounded queue of byte pieces between the event loop and one worker thread, which either
    side can stop: a blocked ``put`` or ``get`` then raises :class:`_Stopped`."""

    def __init__(self) -> None:
        self._queue: "queue.Queue[Optional[bytes]]" = queue.Queue(maxsize=_QUEUE_PIECES)
        self.stopped = threading.Event()
        self._held = b""

    def put(self, piece: Optional[bytes]) -> None:
        while not self.stopped.is_set():
            try:
                self._queue.put(piece, timeout=0.2)
                return
            except queue.Full:
                continue
        raise _Stopped()

    def get(self) -> Optional[bytes]:
        while not self.stopped.is_set():
            try:
                return self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
        raise _Stopped()

    # The file-like side tarfile reads in stream mode ("r|").
    def read(self, size: int = -1) -> bytes:
        while not self._held:
            piece = self.get()
            if piece is None:
                return b""
            self._held = piece
        if size < 0 or size >= len(self._held):
            out, self._held = self._held, b""
        else:
            out, self._held = self._held[:size], self._held[size:]
        return out


class _Writer:
    """The file-like side tarfile writes in stream mode ("w|"): pieces of at most 1 MiB into a pipe,
    each with the file bytes read by the time it was written (progress in file bytes)."""

    def __init__(self, pipe: _Pipe, counted: List[int], marks: "queue.SimpleQueue[Tuple[int, int]]") -> None:
        self._pipe = pipe
        self._counted = counted
        self._marks = marks
        self._buffer = bytearray()
        self.written = 0

    def write(self, data: bytes) -> int:
        self._buffer += data
        while len(self._buffer) >= TRANSFER_CHUNK_BYTES:
            self._emit(bytes(self._buffer[:TRANSFER_CHUNK_BYTES]))
            del self._buffer[:TRANSFER_CHUNK_BYTES]
        return len(data)

    def flush_all(self) -> None:
        if self._buffer:
            self._emit(bytes(self._buffer))
            self._buffer.clear()

    def _emit(self, piece: bytes) -> None:
        self.written += len(piece)
        self._marks.put((self.written, self._counted[0]))
        self._pipe.put(piece)


class _CountingFile:
    """A local file read for the archive, counting the bytes read (progress) and refusing to shrink."""

    def __init__(self, fd: int, path: str, counted: List[int]) -> None:
        self._file = os.fdopen(fd, "rb")
        self._path = path
        self._counted = counted

    def read(self, size: int = -1) -> bytes:
        data = self._file.read(size if size >= 0 else _READ_PIECE_BYTES)
        self._counted[0] += len(data)
        return data

    def close(self) -> None:
        self._file.close()


def _local_entries(local: str, file_name: str) -> Tuple[List[Tuple[str, str]], int, str]:
    """What :func:`upload_from` sends: (archive name, local path) pairs, the file bytes, and the kind.
    A folder's contents are named relative to it (links kept as links, never followed); a file is
    named ``file_name``. Special files are left out."""
    try:
        info = os.lstat(local)
    except FileNotFoundError:
        raise NotFoundError(f"No file or folder at '{local}' on this machine.") from None
    if stat.S_ISREG(info.st_mode):
        return [(file_name, local)], info.st_size, "file"
    if not stat.S_ISDIR(info.st_mode):
        raise UnsupportedFileTypeError(f"'{local}' is neither a regular file nor a folder; upload files and folders only.")
    entries: List[Tuple[str, str]] = []
    total = 0

    def walk(folder: str, rel: str) -> None:
        nonlocal total
        for name in sorted(os.listdir(folder)):
            absolute = os.path.join(folder, name)
            entry = f"{rel}/{name}" if rel else name
            st = os.lstat(absolute)
            if stat.S_ISDIR(st.st_mode):
                entries.append((entry, absolute))
                walk(absolute, entry)
            elif stat.S_ISREG(st.st_mode):
                entries.append((entry, absolute))
                total += st.st_size
            elif stat.S_ISLNK(st.st_mode):
                entries.append((entry, absolute))

    walk(local, "")
    return entries, total, "directory"


def _stopping(pipe: _Pipe, work: Callable[..., None], *args: Any) -> None:
    """Runs one side of a pipe on a worker thread; when it fails, the pipe stops, so the event loop's
    side is never left waiting on it and asks the worker for its error instead."""
    try:
        work(*args)
    except BaseException:
        pipe.stopped.set()
        raise


def _pack(entries: List[Tuple[str, str]], writer: _Writer, counted: List[int], pipe: _Pipe) -> None:
    """Writes the tar stream of ``entries`` into the pipe (on a worker thread), then ``None``."""
    with tarfile.open(fileobj=cast(Any, writer), mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, absolute in entries:
            info = tar.gettarinfo(absolute, arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if not info.isreg():
                tar.addfile(info)
                continue
            fd = os.open(absolute, os.O_RDONLY | os.O_NOFOLLOW)
            source = _CountingFile(fd, absolute, counted)
            try:
                before = counted[0]
                tar.addfile(info, source)  # type: ignore[arg-type]
                if counted[0] - before < info.size:
                    raise ConflictError(f"'{absolute}' shrank while it was uploaded; upload it again once nothing writes it.")
            finally:
                source.close()
    writer.flush_all()
    pipe.put(None)


async def upload_from(
    connection: Caller,
    local: str,
    path: str,
    *,
    overwrite: Optional[bool] = None,
    on_progress: Optional[ProgressHandler] = None,
    timeout: Optional[float] = None,
) -> Tuple[FsUploadResult, str]:
    """Streams a local file or folder into the sandbox: a folder's contents land in ``path``, a file
    lands at ``path`` itself. Answers the commit's result and the kind (``file`` or ``directory``)."""
    remote = path.rstrip("/") or path
    slash = remote.rfind("/")
    file_name = remote if slash == -1 else remote[slash + 1 :]
    entries, total, kind = await asyncio.to_thread(_local_entries, local, file_name)
    if kind == "file" and file_name in ("", ".", ".."):
        raise InvalidParamsError(f"'{path}' does not name a file; give the file's path in the sandbox, e.g. 'data/{os.path.basename(local)}'.")
    into = path if kind == "directory" else ("." if slash == -1 else "/" if slash == 0 else remote[:slash])
    pipe = _Pipe()
    counted = [0]
    marks: "queue.SimpleQueue[Tuple[int, int]]" = queue.SimpleQueue()
    writer = _Writer(pipe, counted, marks)
    packer = asyncio.ensure_future(asyncio.to_thread(_stopping, pipe, _pack, entries, writer, counted, pipe))
    last = [0]

    def progress_of(acked: int) -> int:
        while not marks.empty():
            archive_bytes, file_bytes = marks.get()
            last[0] = max(last[0], file_bytes)
            if archive_bytes >= acked:
                break
        return last[0]

    async def pieces() -> Any:
        while True:
            piece = await asyncio.to_thread(pipe.get)
            if piece is None:
                return
            yield piece

    try:
        try:
            result = await _upload_pieces(connection, into, pieces(), overwrite, on_progress, total, progress_of, timeout)
        except _Stopped:
            await packer  # the packer failed (a local file unreadable or shrinking): its error is the one to report
            raise
        await packer
        if on_progress is not None:
            on_progress(TransferProgress(total, total))
        return result, kind
    finally:
        pipe.stopped.set()
        try:
            await packer
        except BaseException:  # noqa: BLE001 - the upload's own outcome is what is reported
            pass


#: A tar archive to upload: its bytes, a binary file open for reading, or an (async) iterable of byte chunks.
ArchiveSource = Union[bytes, bytearray, memoryview, BinaryIO, Iterable[bytes], AsyncIterable[bytes]]


async def _pieces_of(source: ArchiveSource) -> AsyncIterator[bytes]:
    """The archive in pieces of at most 1 MiB, however the caller holds it (a file is read on a worker thread)."""
    held = bytearray()

    async def chunks() -> AsyncIterator[bytes]:
        if isinstance(source, (bytes, bytearray, memoryview)):
            yield bytes(source)
        elif hasattr(source, "read"):
            while True:
                chunk = await asyncio.to_thread(source.read, TRANSFER_CHUNK_BYTES)  # type: ignore[union-attr]
                if not chunk:
                    return
                yield bytes(chunk)
        elif hasattr(source, "__aiter__"):
            async for chunk in source:  # type: ignore[union-attr]
                yield bytes(chunk)
        else:
            for chunk in source:  # type: ignore[union-attr]
                yield bytes(chunk)

    async for chunk in chunks():
        held += chunk
        while len(held) >= TRANSFER_CHUNK_BYTES:
            yield bytes(held[:TRANSFER_CHUNK_BYTES])
            del held[:TRANSFER_CHUNK_BYTES]
    if held:
        yield bytes(held)


async def upload_archive(
    connection: Caller,
    path: str,
    source: ArchiveSource,
    *,
    overwrite: Optional[bool] = None,
    on_progress: Optional[ProgressHandler] = None,
    total_bytes: Optional[int] = None,
    timeout: Optional[float] = None,
) -> FsUploadResult:
    """Streams a tar archive into a sandbox folder in pieces, any total size; progress counts archive bytes."""
    sent = [0]

    async def counted() -> AsyncIterator[bytes]:
        async for piece in _pieces_of(source):
            sent[0] += len(piece)
            yield piece

    result = await _upload_pieces(connection, path, counted(), overwrite, on_progress, total_bytes, lambda acked: acked, timeout)
    if on_progress is not None:
        on_progress(TransferProgress(sent[0], total_bytes if total_bytes is not None else sent[0]))
    return result


async def _upload_pieces(
    connection: Caller,
    into: str,
    pieces: Any,
    overwrite: Optional[bool],
    on_progress: Optional[ProgressHandler],
    total: Optional[int],
    progress_of: Callable[[int], int],
    timeout: Optional[float],
) -> FsUploadResult:
    what = f"The upload into '{into}'"
    deadline = None if timeout is None else time.monotonic() + timeout
    upload_id: Optional[str] = None

    def limit() -> float:
        return _NO_TIMEOUT if deadline is None else max(0.001, deadline - time.monotonic())

    try:
        params: Dict[str, Any] = {"path": into}
        if overwrite is not None:
            params["overwrite"] = overwrite
        opened, _ = await connection.call("fs.uploadOpen", params, timeout=limit())
        upload_id = str(opened.upload_id)
        in_flight: "List[asyncio.Task[Any]]" = []
        offset = 0
        acked = [0]

        async def send(piece: bytes, at: int) -> None:
            answer, _ = await connection.call("fs.uploadChunk", {"uploadId": upload_id, "offset": at}, payload=piece, timeout=min(limit(), TRANSFER_IDLE_SECONDS))
            if answer.received > acked[0]:
                acked[0] = answer.received
                if on_progress is not None:
                    on_progress(TransferProgress(progress_of(acked[0]), total))

        try:
            async for piece in pieces:
                in_flight.append(asyncio.ensure_future(send(piece, offset)))
                offset += len(piece)
                if len(in_flight) >= UPLOAD_PIECES_IN_FLIGHT:
                    await in_flight.pop(0)
            while in_flight:
                await in_flight.pop(0)
        finally:
            for task in in_flight:
                task.cancel()
        if deadline is not None and time.monotonic() > deadline:
            raise RequestTimeoutError(f"{what} did not finish within {timeout} s; it was stopped.")
        result, _ = await connection.call("fs.uploadCommit", {"uploadId": upload_id}, timeout=limit())
        return result  # type: ignore[no-any-return]
    except BaseException:
        if upload_id is not None:
            try:
                await asyncio.shield(connection.call("fs.uploadAbort", {"uploadId": upload_id}, timeout=10.0))
            except BaseException:  # noqa: BLE001 - the daemon undoes a staged upload on close too
                pass
        raise


class _Sink:
    """Where a download's entries go (on the worker thread): begin an entry, write its bytes, end it."""

    def entry(self, name: str, kind: str, mode: int, linkname: Optional[str]) -> None:
        raise NotImplementedError

    def data(self, data: bytes) -> None:
        raise NotImplementedError

    def end(self) -> None:
        raise NotImplementedError

    def undo(self) -> None:
        raise NotImplementedError


class _FolderSink(_Sink):
    """Extracts into a local folder: new files only (O_EXCL|O_NOFOLLOW), never through a link;
    :meth:`undo` removes what it made."""

    def __init__(self, local_folder: str) -> None:
        self._made: List[Tuple[str, str]] = []
        missing = []
        here = os.path.abspath(local_folder)
        while not os.path.exists(here):
            missing.append(here)
            here = os.path.dirname(here)
        os.makedirs(local_folder, exist_ok=True)
        self._made += [(p, "dir") for p in reversed(missing)]
        self._root = os.path.realpath(local_folder)
        self._file: Optional[Any] = None

    def entry(self, name: str, kind: str, mode: int, linkname: Optional[str]) -> None:
        target = os.path.join(self._root, *name.split("/"))
        parent = os.path.dirname(target)
        if not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)
            self._made.append((parent, "dir"))
        if os.path.realpath(parent) != parent:
            raise PathNotInSandboxError(f"Refusing to extract '{name}': a parent folder is a link.")
        if kind == "directory":
            try:
                existing = os.lstat(target)
            except FileNotFoundError:
                os.mkdir(target, mode | 0o700)
                self._made.append((target, "dir"))
            else:
                if not stat.S_ISDIR(existing.st_mode):
                    raise AlreadyExistsError(f"Refusing to extract '{name}': a non-folder exists there.")
        elif kind == "file":
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
            except FileExistsError:
                raise AlreadyExistsError(f"Refusing to extract '{name}': a file exists there.") from None
            self._made.append((target, "file"))
            self._file = os.fdopen(fd, "wb")
        else:
            os.symlink(linkname or "", target)
            self._made.append((target, "file"))

    def data(self, data: bytes) -> None:
        assert self._file is not None
        self._file.write(data)

    def end(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def undo(self) -> None:
        self.end()
        for made, kind in reversed(self._made):
            try:
                os.rmdir(made) if kind == "dir" else os.unlink(made)
            except OSError:
                pass


class _FileSink(_Sink):
    """Writes the one file of a download under a temporary name beside ``local_file``; :meth:`finish`
    moves it into place (replacing an existing file only with ``overwrite``)."""

    def __init__(self, remote: str, local_file: str, overwrite: bool) -> None:
        self._remote = remote
        self._target = local_file
        self._overwrite = overwrite
        base = os.path.basename(local_file)[:180]
        self._temp = os.path.join(os.path.dirname(os.path.abspath(local_file)), f".{base}.warren-{secrets.token_hex(6)}")
        self._file: Optional[Any] = None
        self.entries = 0

    def entry(self, name: str, kind: str, mode: int, linkname: Optional[str]) -> None:
        self.entries += 1
        if kind != "file" or self.entries > 1:
            raise IsADirectoryError(f"'{self._remote}' is not one regular file; download a folder with download_to.")
        self._file = os.fdopen(os.open(self._temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode), "wb")

    def data(self, data: bytes) -> None:
        assert self._file is not None
        self._file.write(data)

    def end(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def finish(self) -> None:
        if self.entries != 1:
            raise NotFoundError(f"'{self._remote}' was not downloaded as a file.")
        if self._overwrite:
            os.replace(self._temp, self._target)
        else:
            try:
                os.link(self._temp, self._target)  # link(2) refuses an existing name
            except FileExistsError:
                raise AlreadyExistsError(f"'{self._target}' exists on this machine; pass overwrite=True to replace it.") from None
            os.unlink(self._temp)

    def undo(self) -> None:
        self.end()
        try:
            os.unlink(self._temp)
        except OSError:
            pass


def _extract(pipe: _Pipe, sink: _Sink, max_bytes: Optional[int], on_file_bytes: Callable[[int], None]) -> None:
    """Reads the tar stream from the pipe (on a worker thread), checking each entry by the upload
    rules before a byte of it is written."""
    checker = TarChecker()
    declared = 0
    try:
        with tarfile.open(fileobj=cast(Any, pipe), mode="r|", errorlevel=2) as tar:
            for info in tar:
                entry = checker.check(info.name, _kind(info), info.mode, info.size, info.linkname if info.issym() else None)
                declared += entry.size if entry.kind == "file" else 0
                if max_bytes is not None and declared > max_bytes:
                    raise FileTooLargeError(f"The download makes an archive larger than the {max_bytes} bytes it allows (max_bytes).")
                sink.entry(entry.name, entry.kind, entry.mode, entry.linkname)
                if entry.kind == "file":
                    source = tar.extractfile(info)
                    done = 0
                    while source is not None:
                        data = source.read(_READ_PIECE_BYTES)
                        if not data:
                            break
                        sink.data(data)
                        done += len(data)
                        on_file_bytes(len(data))
                    if done != info.size:
                        raise InvalidParamsError(f"The archive entry '{entry.name}' is cut short.")
                sink.end()
    except tarfile.TarError as err:
        raise InvalidParamsError(f"The downloaded archive cannot be read: {err}.") from None
    # Whatever follows the archive's end is read too, so the producer is never left blocked.
    while pipe.read() != b"":
        pass


async def _stream_download(
    connection: Caller, path: str, sink: _Sink, *, max_bytes: Optional[int], on_progress: Optional[ProgressHandler], timeout: Optional[float]
) -> FsDownloadResult:
    loop = asyncio.get_running_loop()
    call: "Optional[asyncio.Task[Any]]" = None
    events: "EventStream[Tuple[int, bytes]]" = EventStream(connection, lambda: _cancel(call))
    total: List[Optional[int]] = [None]
    file_bytes = [0]
    pipe = _Pipe()

    def on_event(name: str, data: BaseModel, payload: Optional[bytes]) -> None:
        if name == "start":
            total[0] = data.total_bytes  # type: ignore[attr-defined]
            if on_progress is not None:
                on_progress(TransferProgress(0, total[0]))
        elif name == "data":
            events.push((data.offset, payload or b""), len(payload or b""))  # type: ignore[attr-defined]

    def counted(n: int) -> None:
        file_bytes[0] += n
        if on_progress is not None:
            loop.call_soon_threadsafe(on_progress, TransferProgress(file_bytes[0], total[0]))

    async def run() -> Any:
        params: Dict[str, Any] = {"path": path}
        if max_bytes is not None:
            params["maxBytes"] = max_bytes
        try:
            result, _ = await connection.call("fs.downloadStream", params, on_event=on_event, timeout=_NO_TIMEOUT if timeout is None else timeout)
        except BaseException as err:
            events.fail(err)
            raise
        events.end()
        return result

    call = asyncio.ensure_future(run())
    call.add_done_callback(lambda t: None if t.cancelled() else t.exception())
    extractor = asyncio.ensure_future(asyncio.to_thread(_stopping, pipe, _extract, pipe, sink, max_bytes, counted))
    received = 0
    try:
        while True:
            try:
                offset, data = await asyncio.wait_for(events.__anext__(), TRANSFER_IDLE_SECONDS)
            except StopAsyncIteration:
                break
            except asyncio.TimeoutError:
                raise RequestTimeoutError(f"The download of '{path}' moved nothing for {TRANSFER_IDLE_SECONDS:.0f} s; it was stopped.") from None
            # The daemon is on the sandbox's side: every offset and size it sends is checked here too.
            if offset != received:
                raise InvalidFrameError(f"The download's piece at byte {offset} came where byte {received} was due.")
            received += len(data)
            if max_bytes is not None and received > max_bytes:
                raise FileTooLargeError(f"'{path}' makes an archive larger than the {max_bytes} bytes this download allows (max_bytes).")
            try:
                await asyncio.to_thread(pipe.put, data)
            except _Stopped:
                break  # the extractor failed (a hostile entry, a local file in the way): its error is raised below
        try:
            await asyncio.to_thread(pipe.put, None)
        except _Stopped:
            pass  # the extractor stopped (it may do so at any moment): its error is raised next
        await extractor
        result = await call
        if result.bytes != received:
            raise InvalidFrameError(f"The download says it sent {result.bytes} bytes; {received} arrived.")
        return result  # type: ignore[no-any-return]
    except BaseException:
        pipe.stopped.set()
        call.cancel()
        await events.aclose()
        try:
            await extractor
        except BaseException:  # noqa: BLE001 - the first failure is the one reported
            pass
        await asyncio.to_thread(sink.undo)
        raise


async def download_to(
    connection: Caller,
    path: str,
    local_folder: str,
    *,
    max_bytes: Optional[int] = None,
    on_progress: Optional[ProgressHandler] = None,
    timeout: Optional[float] = None,
) -> FsDownloadResult:
    """Streams a sandbox file or folder into a local folder (created when missing)."""
    sink = await asyncio.to_thread(_FolderSink, local_folder)
    return await _stream_download(connection, path, sink, max_bytes=max_bytes, on_progress=on_progress, timeout=timeout)


async def download_file(
    connection: Caller,
    path: str,
    local_file: str,
    *,
    overwrite: bool = False,
    max_bytes: Optional[int] = None,
    on_progress: Optional[ProgressHandler] = None,
    timeout: Optional[float] = None,
) -> FsDownloadResult:
    """Streams one sandbox file to a local file: the local file is the whole download or untouched."""
    sink = _FileSink(path, local_file, overwrite)
    result = await _stream_download(connection, path, sink, max_bytes=max_bytes, on_progress=on_progress, timeout=timeout)
    try:
        await asyncio.to_thread(sink.finish)
    except BaseException:
        await asyncio.to_thread(sink.undo)
        raise
    return result
