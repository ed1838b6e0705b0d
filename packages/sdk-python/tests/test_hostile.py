"""What a hostile server (or a sandbox behind a broken relay) may send, and what the client does with it.

Each test starts a scripted WebSocket server on loopback that completes the handshake, then
answers with the bad input named in the test; the client must fail the right call with a typed
error (or ignore what names no call) and keep working.
"""

from __future__ import annotations

import asyncio
import io
import json
import struct
import tarfile
import time
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, Dict, List, Optional

import pytest
import websockets

from warren import (
    AlreadyExistsError,
    Connection,
    FrameTooLargeError,
    InternalError,
    InvalidFrameError,
    InvalidParamsError,
    NotFoundError,
    ProtocolVersionMismatchError,
    RequestTimeoutError,
    WarrenError,
    ConnectionClosedError,
    check_archive,
)
from warren._protocol import MAX_FRAME_BYTES, MAX_HEADER_BYTES, PROTOCOL_MINOR
from warren import transfer
from warren.files import Files
from warren.frame import decode_frame, encode_frame, frame_request_id

WELCOME = {"type": "welcome", "protocolVersion": 1, "protocolMinor": 2, "server": "hostile", "serverVersion": "0"}
INFO = {"agentVersion": "x", "protocolVersion": 1, "pid": 1, "uid": 1000, "rssBytes": 1, "uptimeMs": 1}

Script = Callable[[Any, Dict[str, Any], List[Dict[str, Any]]], Awaitable[None]]


class Server:
    """A loopback WebSocket server: handshake, then ``script(ws, request, seen)`` for each request."""

    def __init__(self, script: Script, welcome: Optional[Dict[str, Any]] = None) -> None:
        self.script = script
        self.welcome = welcome or WELCOME
        self.seen: List[Dict[str, Any]] = []
        self.server: Any = None

    async def __aenter__(self) -> str:
        async def handler(ws: Any, _path: str = "") -> None:
            hello = decode_frame(await ws.recv()).header
            self.seen.append(hello)
            await ws.send(encode_frame(self.welcome))
            async for message in ws:
                header = decode_frame(message).header
                self.seen.append(header)
                if header["type"] == "req":
                    await self.script(ws, header, self.seen)

        self.server = await websockets.serve(handler, "127.0.0.1", 0, max_size=None, compression=None)  # type: ignore[attr-defined]
        port = self.server.sockets[0].getsockname()[1]
        return f"ws://127.0.0.1:{port}/v1/sandboxes/x/connect"

    async def __aexit__(self, *exc: Any) -> None:
        self.server.close()
        await self.server.wait_closed()


def raw_frame(header: Dict[str, Any], payload: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return struct.pack(">I", len(text)) + text + payload


async def answer_info(ws: Any, req: Dict[str, Any]) -> None:
    await ws.send(encode_frame({"type": "res", "id": req["id"], "result": INFO}))


async def test_an_oversized_frame_fails_the_call_it_names_and_the_connection_lives_on() -> None:
    async def script(ws: Any, req: Dict[str, Any], _seen: Any) -> None:
        if req["params"].get("path") == "big":
            await ws.send(raw_frame({"type": "res", "id": req["id"], "result": {}}, b"x" * (MAX_FRAME_BYTES + 1)))
        else:
            await answer_info(ws, req)

    async with Server(script) as url:
        conn = await Connection.open(url, "t")
        try:
            with pytest.raises(FrameTooLargeError):
                await conn.call("fs.read", {"path": "big"}, timeout=30)
            result, _ = await conn.call("system.info", {})
            assert result.agent_version == "x"
        finally:
            await conn.close()


async def test_a_message_over_the_websocket_cap_closes_the_connection_with_a_typed_error() -> None:
    async def script(ws: Any, req: Dict[str, Any], _seen: Any) -> None:
        await ws.send(raw_frame({"type": "res", "id": req["id"], "result": {}}, b"x" * (64 * 1024 * 1024 + 1)))

    async with Server(script) as url:
        conn = await Connection.open(url, "t")
        with pytest.raises(ConnectionClosedError, match="1009"):
            await conn.call("system.info", {}, timeout=30)
        assert not conn.is_open
        await conn.close()


async def test_answers_to_unknown_ids_and_text_frames_are_ignored() -> None:
    async def script(ws: Any, req: Dict[str, Any], _seen: Any) -> None:
        await ws.send(encode_frame({"type": "res", "id": req["id"] + 1000, "result": {"forged": True}}))
        await ws.send(encode_frame({"type": "evt", "id": 99999, "event": "stdout", "data": {"offset": 0}}, b"noise"))
        await ws.send(encode_frame({"type": "res", "id": "not-ours", "result": {}}))
        await ws.send("a text frame")
        await answer_info(ws, req)

    async with Server(script) as url:
        conn = await Connection.open(url, "t")
        try:
            result, _ = await conn.call("system.info", {})
            assert result.pid == 1
        finally:
            await conn.close()


async def test_a_result_that_does_not_match_the_schema_is_an_internal_error() -> None:
    async def script(ws: Any, req: Dict[str, Any], _seen: Any) -> None:
        bad = {**INFO, "pid": "one"} if req["method"] == "system.info" else {"path": "a", "size": -1}
        await ws.send(encode_frame({"type": "res", "id": req["id"], "result": bad}))

    async with Server(script) as url:
        conn = await Connection.open(url, "t")
        try:
            with pytest.raises(InternalError, match="off-contract"):
                await conn.call("system.info", {})
            with pytest.raises(InternalError, match="off-contract"):
                await conn.call("fs.stat", {"path": "a"})
        finally:
            await conn.close()


async def test_fields_a_newer_server_adds_are_dropped_not_refused() -> None:
    async def script(ws: Any, req: Dict[str, Any], _seen: Any) -> None:
        await ws.send(encode_frame({"type": "res", "id": req["id"], "result": {**INFO, "addedLater": [1, 2]}, "alsoNew": 1}))

    async with Server(script) as url:
        conn = await Connection.open(url, "t")
        try:
            result, _ = await conn.call("system.info", {})
            assert not hasattr(result, "addedLater") and result.uid == 1000
        finally:
            await conn.close()


async def test_an_event_off_contract_fails_the_call_and_cancels_it_on_the_server() -> None:
    async def script(ws: Any, req: Dict[str, Any], _seen: Any) -> None:
        await ws.send(encode_frame({"type": "evt", "id": req["id"], "event": "stdout", "data": {"offset": "zero"}}, b"x"))

    server = Server(script)
    async with server as url:
        conn = await Connection.open(url, "t")
        try:
            with pytest.raises(InternalError, match="'stdout' event off-contract"):
                await conn.call("process.exec", {"cmd": "true", "stream": True}, on_event=lambda *a: None)
            await asyncio.sleep(0.1)
            assert {"type": "cancel", "id": 1} in server.seen
        finally:
            await conn.close()


async def test_a_header_that_is_not_a_frame_fails_the_call_it_names() -> None:
    async def script(ws: Any, req: Dict[str, Any], _seen: Any) -> None:
        await ws.send(raw_frame({"type": "res", "id": req["id"]}))  # no result: not a valid res header
        await ws.send(struct.pack(">I", 10) + b"{}")  # a length that runs past the end, naming no call

    async with Server(script) as url:
        conn = await Connection.open(url, "t")
        try:
            with pytest.raises(InvalidFrameError, match="invalid"):
                await conn.call("system.info", {})
        finally:
            await conn.close()


async def test_an_unknown_error_code_keeps_its_code_on_a_generic_error() -> None:
    async def script(ws: Any, req: Dict[str, Any], _seen: Any) -> None:
        await ws.send(encode_frame({"type": "err", "id": req["id"], "error": {"code": "BRAND_NEW", "message": "from the future", "details": {"n": 1}}}))

    async with Server(script) as url:
        conn = await Connection.open(url, "t")
        try:
            with pytest.raises(WarrenError) as caught:
                await conn.call("system.info", {})
            assert type(caught.value) is WarrenError
            assert (caught.value.code, caught.value.message, caught.value.details) == ("BRAND_NEW", "from the future", {"n": 1})
        finally:
            await conn.close()


async def test_known_error_codes_become_their_classes() -> None:
    async def script(ws: Any, req: Dict[str, Any], _seen: Any) -> None:
        await ws.send(encode_frame({"type": "err", "id": req["id"], "error": {"code": "NOT_FOUND", "message": "No file at 'a'", "details": {"path": "a"}}}))

    async with Server(script) as url:
        conn = await Connection.open(url, "t")
        try:
            with pytest.raises(NotFoundError) as caught:
                await conn.call("fs.stat", {"path": "a"})
            assert caught.value.status == 404 and "list the parent" in caught.value.suggestion
        finally:
            await conn.close()


async def test_a_different_major_version_is_refused_at_the_handshake() -> None:
    async def script(ws: Any, req: Dict[str, Any], _seen: Any) -> None:
        return None

    async with Server(script, {**WELCOME, "protocolVersion": 2}) as url:
        with pytest.raises(ProtocolVersionMismatchError, match="speaks protocol 2.2"):
            await Connection.open(url, "t")


async def test_the_lower_minor_is_negotiated_and_the_client_sends_its_own() -> None:
    server = Server(lambda *a: asyncio.sleep(0), {**WELCOME, "protocolMinor": 1})
    async with server as url:
        conn = await Connection.open(url, "t")
        assert (conn.protocol.minor, conn.protocol.server_minor) == (1, 1)
        await conn.close()
    hello = server.seen[0]
    assert hello["type"] == "hello" and hello["protocolVersion"] == 1 and hello["protocolMinor"] == PROTOCOL_MINOR


async def test_task_cancellation_and_timeouts_send_the_protocols_cancel() -> None:
    async def script(ws: Any, req: Dict[str, Any], _seen: Any) -> None:
        return None  # never answers

    server = Server(script)
    async with server as url:
        conn = await Connection.open(url, "t")
        try:
            task = asyncio.ensure_future(conn.call("process.exec", {"cmd": "sleep 100"}))
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            with pytest.raises(RequestTimeoutError, match="fs.stat did not answer"):
                await conn.call("fs.stat", {"path": "a"}, timeout=0.2)
            await asyncio.sleep(0.1)
            cancels = [h for h in server.seen if h["type"] == "cancel"]
            assert cancels == [{"type": "cancel", "id": 1}, {"type": "cancel", "id": 2}]
        finally:
            await conn.close()


async def test_params_are_checked_before_anything_is_sent() -> None:
    server = Server(lambda ws, req, seen: answer_info(ws, req))
    async with server as url:
        conn = await Connection.open(url, "t")
        try:
            with pytest.raises(InvalidParamsError, match="fs.read"):
                await conn.call("fs.read", {"path": ""})
            with pytest.raises(InvalidParamsError):
                await conn.call("fs.read", {"path": "a", "unknown": 1})
            with pytest.raises(InvalidParamsError):
                await conn.call("process.exec", {"cmd": "x", "timeoutMs": "5"})  # no coercion
            with pytest.raises(FrameTooLargeError):
                await conn.call("fs.write", {"path": "a"}, payload=b"x" * MAX_FRAME_BYTES)
            assert [h for h in server.seen if h["type"] == "req"] == []
        finally:
            await conn.close()


def test_the_request_id_of_a_frame_too_large_to_decode_is_read_from_its_top_level_keys() -> None:
    assert frame_request_id(raw_frame({"type": "res", "id": 7, "result": {}})) == 7
    # A string inside the params cannot pose as the id.
    assert frame_request_id(raw_frame({"type": "req", "params": {"id": 5}, "id": 9, "method": "m"})) == 9
    assert frame_request_id(raw_frame({"type": "res", "result": {"id": 3}})) is None
    # Past the 4 KiB window the id is not looked for.
    assert frame_request_id(raw_frame({"type": "res", "pad": "x" * 5000, "id": 4})) is None
    assert frame_request_id(struct.pack(">I", MAX_HEADER_BYTES + 1) + b'{"type":"res","id":12,') == 12
    with pytest.raises(FrameTooLargeError) as caught:
        decode_frame(struct.pack(">I", MAX_HEADER_BYTES + 1) + b'{"type":"res","id":12,')
    assert caught.value.details == {"id": 12}


def tar_of(*entries: tarfile.TarInfo, data: bytes = b"") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info in entries:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buffer.getvalue()


def entry(name: str, kind: bytes = tarfile.REGTYPE, **fields: Any) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in fields.items():
        setattr(info, key, value)
    return info


HOSTILE_ARCHIVES = {
    "a .. segment": tar_of(entry("../escape.txt")),
    "a nested .. segment": tar_of(entry("a/../../escape.txt")),
    "an absolute name": tar_of(entry("/etc/passwd")),
    "a symbolic link that leaves": tar_of(entry("link", tarfile.SYMTYPE, linkname="../../etc")),
    "an absolute symbolic link": tar_of(entry("link", tarfile.SYMTYPE, linkname="/etc/passwd")),
    "an entry below a link": tar_of(entry("d", tarfile.SYMTYPE, linkname="x"), entry("d/file")),
    "a hard link": tar_of(entry("f"), entry("h", tarfile.LNKTYPE, linkname="f")),
    "a device": tar_of(entry("dev", tarfile.CHRTYPE, devmajor=1, devminor=3)),
    "a FIFO": tar_of(entry("fifo", tarfile.FIFOTYPE)),
    "a setuid file": tar_of(entry("suid", mode=0o4755)),
    "a name twice": tar_of(entry("same"), entry("same")),
}


@pytest.mark.parametrize("why", sorted(HOSTILE_ARCHIVES))
def test_hostile_archives_are_refused_before_anything_is_written(why: str) -> None:
    with pytest.raises(InvalidParamsError, match="refused"):
        check_archive(HOSTILE_ARCHIVES[why])


def test_a_corrupt_archive_is_refused() -> None:
    good = bytearray(tar_of(entry("a.txt", size=3), data=b"abc"))
    good[148:156] = b"0000000\0"  # a wrong checksum
    with pytest.raises(InvalidParamsError):
        check_archive(bytes(good))


def test_well_formed_archives_pass_with_clean_names() -> None:
    archive = tar_of(entry("./dir", tarfile.DIRTYPE, mode=0o755), entry("dir/a.txt", size=3), entry("dir/l", tarfile.SYMTYPE, linkname="a.txt"), data=b"abc")
    entries = check_archive(archive)
    assert [(e.name, e.kind) for e, _ in entries] == [("dir", "directory"), ("dir/a.txt", "file"), ("dir/l", "symlink")]
    assert entries[1][1] == b"abc"


async def test_download_checks_what_the_sandbox_sends_and_download_to_writes_nothing(tmp_path: Any) -> None:
    async def script(ws: Any, req: Dict[str, Any], _seen: Any) -> None:
        archive = tar_of(entry("ok.txt", size=3), entry("link", tarfile.SYMTYPE, linkname="../../etc"), data=b"abc")
        result = {"path": "/x", "files": 1, "directories": 0, "symlinks": 1, "bytes": len(archive), "skipped": []}
        if req["method"] == "fs.downloadStream":  # download_to streams: a good entry first, then the hostile one
            await ws.send(encode_frame({"type": "evt", "id": req["id"], "event": "start", "data": {"totalBytes": 3}}))
            for at in range(0, len(archive), 1024):
                await ws.send(encode_frame({"type": "evt", "id": req["id"], "event": "data", "data": {"offset": at}}, archive[at : at + 1024]))
            await ws.send(encode_frame({"type": "res", "id": req["id"], "result": result}))
        else:
            await ws.send(encode_frame({"type": "res", "id": req["id"], "result": result}, archive))

    async with Server(script) as url:
        conn = await Connection.open(url, "t")
        try:
            files = Files(lambda: conn)
            with pytest.raises(InvalidParamsError, match="leaves the archive folder"):
                await files.download("x")
            with pytest.raises(InvalidParamsError, match="leaves the archive folder"):
                await files.download_to("x", str(tmp_path / "out"))
            # The good entry written before the hostile one arrived is removed with the folder it made.
            assert not (tmp_path / "out").exists()
        finally:
            await conn.close()


async def test_approval_requests_are_answered_by_the_handler_and_denied_without_one() -> None:
    async def script(ws: Any, req: Dict[str, Any], _seen: Any) -> None:
        await ws.send(encode_frame({"type": "evt", "id": req["id"], "event": "approval", "data": {"operation": "write", "path": "/out/a.txt", "bytes": 3}}))
        answer = decode_frame(await ws.recv()).header
        _seen.append(answer)
        if answer["allow"]:
            await ws.send(encode_frame({"type": "res", "id": req["id"], "result": {"path": "/out/a.txt", "bytesWritten": 3, "created": True}}))
        else:
            await ws.send(encode_frame({"type": "err", "id": req["id"], "error": {"code": "APPROVAL_DENIED", "message": "write of '/out/a.txt' needs approval"}}))

    server = Server(script)
    async with server as url:
        conn = await Connection.open(url, "t")
        try:
            with pytest.raises(WarrenError) as denied:
                await conn.call("fs.write", {"path": "/out/a.txt"}, payload=b"abc")
            assert denied.value.code == "APPROVAL_DENIED"
            asked: List[Any] = []

            async def allow(request: Any, method: str) -> bool:
                asked.append((request.operation, request.path, method))
                return True

            conn.on_approval = allow
            result, _ = await conn.call("fs.write", {"path": "/out/a.txt"}, payload=b"abc")
            assert result.bytes_written == 3 and asked == [("write", "/out/a.txt", "fs.write")]

            def broken(request: Any, method: str) -> bool:
                raise RuntimeError("a handler that fails denies")

            conn.on_approval = broken
            with pytest.raises(WarrenError, match="needs approval"):
                await conn.call("fs.write", {"path": "/out/a.txt"}, payload=b"abc")
            answers = [h["allow"] for h in server.seen if h["type"] == "approval"]
            assert answers == [False, True, False]
        finally:
            await conn.close()


class _SlowSink(transfer._Sink):
    """A local disk slower than the sandbox sends: the queues fill, then the second entry is refused."""

    def __init__(self) -> None:
        self.entries = 0
        self.undone = False

    def entry(self, name: str, kind: str, mode: int, linkname: Optional[str]) -> None:
        self.entries += 1
        if self.entries == 2:
            raise AlreadyExistsError(f"Refusing to extract '{name}': a file exists there.")

    def data(self, data: bytes) -> None:
        time.sleep(0.005)

    def end(self) -> None:
        pass

    def undo(self) -> None:
        self.undone = True


class _StreamingPeer:
    """Answers fs.downloadStream at once with every piece of ``archive`` (no backpressure of its own)."""

    def __init__(self, archive: bytes) -> None:
        self.archive = archive

    async def call(self, method: str, params: Any, *, payload: Any = None, on_event: Any = None, timeout: Any = None) -> Any:
        assert method == "fs.downloadStream" and on_event is not None
        on_event("start", SimpleNamespace(total_bytes=len(self.archive)), None)
        for at in range(0, len(self.archive), 64 * 1024):
            on_event("data", SimpleNamespace(offset=at), self.archive[at : at + 64 * 1024])
            await asyncio.sleep(0)
        return SimpleNamespace(bytes=len(self.archive)), None

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def test_a_download_refused_while_its_queues_are_full_fails_instead_of_waiting_forever() -> None:
    first = b"x" * (8 * 1024 * 1024)
    archive = tar_of(entry("big.bin", size=len(first)), entry("second.txt", size=len(first)), data=first)
    sink = _SlowSink()
    with pytest.raises(AlreadyExistsError, match="second.txt"):
        await asyncio.wait_for(transfer._stream_download(_StreamingPeer(archive), "x", sink, max_bytes=None, on_progress=None, timeout=None), 60)
    assert sink.undone
