"""The namespaces the TypeScript SDK has, from Python: the code interpreter, ports, metrics, the
network policy and folder watches, against a real controller (tests/conftest.py), async and blocking.

Under the local engine the daemons run in the controller's process: JavaScript cells run (a Node
process per context); Python cells need ipykernel on the controller's ``python3`` and run in the
e2e tier (WARREN_PY_ENGINE=docker). An egress relay exists only for a sandbox created with
``egress`` on the Docker engine, so here the network calls read the default policy.
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
import socket
import tarfile
from pathlib import Path
from typing import Any, Dict, List

import pytest

from warren import (
    AlreadyExistsError,
    AsyncSandbox,
    FileTooLargeError,
    IsADirectoryError as WarrenIsADirectoryError,
    TransferProgress,
    CodeRunResult,
    InvalidParamsError,
    PortUnreachableError,
    Sandbox,
    WatchOverflow,
    display_image,
)
from warren._protocol import CodeRunResultResultsItem

pytestmark = pytest.mark.controller

#: A TCP server for one connection that answers every chunk in upper case, and "bye" at its end.
ECHO_SERVER = """
import socket, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", int(sys.argv[1])))
server.listen()
client, _ = server.accept()
while True:
    data = client.recv(65536)
    if not data:
        break
    client.sendall(data.upper())
client.sendall(b"bye")
client.close()
"""


def opts(controller: Any) -> Dict[str, Any]:
    return {"base_url": controller.url, "api_key": controller.api_key, "policy": {"root": controller.root}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_code_cells_keep_state_stream_output_and_report_errors_as_results(controller: Any) -> None:
    async with AsyncSandbox.create(**opts(controller)) as sandbox:
        context = await sandbox.code.create_context(language="javascript")
        await sandbox.code.run("let n = 6", context=context)
        streamed: List[str] = []
        result = await sandbox.code.run("console.log('seven'); n * 7", context=context.id, on_stdout=streamed.append)
        assert isinstance(result, CodeRunResult)
        assert result.stdout == "seven\n" and "".join(streamed) == "seven\n"
        assert [r.data["text/plain"] for r in result.results if r.is_main_result] == ["42"]
        failed = await sandbox.code.run("throw new Error('no')", context=context)
        assert failed.error is not None and "no" in failed.error.value
        assert context.id in [c.id for c in await sandbox.code.list_contexts()]
        restarted = await sandbox.code.restart_context(context)
        assert restarted.id == context.id
        gone = await sandbox.code.run("typeof n", context=context)
        assert gone.results[0].data["text/plain"] == "'undefined'"
        assert await sandbox.code.remove_context(context) is True
        assert await sandbox.code.remove_context(context.id) is False


def test_display_image_passes_a_real_png_and_refuses_what_only_claims_to_be_one() -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
    text = base64.b64encode(png).decode()
    wrapped = text[:10] + "\n" + text[10:]  # Jupyter breaks long base64 into lines
    image = display_image(CodeRunResultResultsItem(isMainResult=False, data={"image/png": wrapped}, truncated=False))
    assert image is not None and image.data == png and image.mime_type == "image/png"
    for fake in ("not base64!", base64.b64encode(b"GIF89a....").decode(), 42):
        assert display_image(CodeRunResultResultsItem(isMainResult=False, data={"image/png": fake}, truncated=False)) is None


async def test_a_raw_port_connection_reaches_a_server_in_the_sandbox(controller: Any) -> None:
    port = free_port()
    async with AsyncSandbox.create(**opts(controller)) as sandbox:
        server = await sandbox.commands.start(["python3", "-c", ECHO_SERVER, str(port)])
        try:
            for _ in range(100):  # until the server listens
                try:
                    connection = await sandbox.ports.connect(port, connect_timeout=1)
                    break
                except PortUnreachableError:
                    await asyncio.sleep(0.1)
            else:
                raise AssertionError("the server did not start")
            async with connection:
                await connection.write(b"hello")
                assert await connection.read() == b"HELLO"
                await connection.end()
                assert await connection.read() == b"bye"
                assert await connection.read() == b""
        finally:
            await server.kill()
        with pytest.raises(PortUnreachableError):
            await sandbox.ports.connect(free_port(), connect_timeout=1)


async def test_port_urls_are_signed_and_scoped_to_the_sandbox_and_port(controller: Any) -> None:
    async with AsyncSandbox.create(**opts(controller)) as sandbox:
        url = await sandbox.ports.url(3000, ttl_seconds=600)
        assert url.startswith(controller.url) and f"/v1/sandboxes/{sandbox.id}/ports/3000/" in url and "warren_sig=" in url
        assert sandbox.ports.base_url(3000) == f"{controller.url}/v1/sandboxes/{sandbox.id}/ports/3000/"
        with pytest.raises(InvalidParamsError):
            await sandbox.ports.url(70000)


async def test_metrics_and_the_network_policy_are_read_per_sandbox(controller: Any) -> None:
    async with AsyncSandbox.create(**opts(controller)) as sandbox:
        usage = await sandbox.metrics()
        assert usage.sandbox_id == sandbox.id and usage.memory_bytes >= 0 and usage.pids >= 0
        policy = await sandbox.network.get()
        assert policy.egress.mode == "none" and policy.version >= 0
        log = await sandbox.network.events()
        assert log.entries == [] or log.entries[0].seq >= 0
        with pytest.raises(InvalidParamsError):
            await sandbox.network.update({"mode": "sometimes"})


async def test_a_watch_reports_changes_until_it_is_closed(controller: Any) -> None:
    async with AsyncSandbox.create(**opts(controller)) as sandbox:
        await sandbox.files.mkdir("src")
        async with await sandbox.files.watch("src") as watcher:
            assert watcher.watched_folders >= 1
            await sandbox.files.write("src/a.txt", "x")
            seen: List[str] = []
            async for event in watcher:
                assert not isinstance(event, WatchOverflow), event
                seen.append(event.path)
                if event.path.endswith("src/a.txt") or event.path == "a.txt":
                    break
        assert await watcher.done() == "closed"


def test_the_blocking_sandbox_has_the_same_namespaces(controller: Any) -> None:
    with Sandbox.create(**opts(controller)) as sandbox:
        result = sandbox.code.run("1 + 1", language="javascript")
        assert result.results[0].data["text/plain"] == "2"
        assert sandbox.metrics().sandbox_id == sandbox.id
        assert "warren_sig=" in sandbox.ports.url(8080)
        assert sandbox.network.get().egress.mode == "none"
        sandbox.files.mkdir("w")
        with sandbox.files.watch("w") as watcher:
            sandbox.files.write("w/b.txt", "y")
            for event in watcher:
                if getattr(event, "path", "").endswith("b.txt"):
                    break


async def test_streamed_uploads_and_downloads_move_any_size_with_progress(controller: Any, tmp_path: Path) -> None:
    local = tmp_path / "dataset"
    (local / "deep").mkdir(parents=True)
    big = os.urandom(3 * 1024 * 1024 + 17)  # more than one 1 MiB piece
    (local / "big.bin").write_bytes(big)
    (local / "deep" / "a.txt").write_text("alpha")
    (local / "link").symlink_to("deep/a.txt")
    async with AsyncSandbox.create(**opts(controller)) as sandbox:
        up: List[TransferProgress] = []
        result = await sandbox.files.upload_from(str(local), "data", on_progress=up.append)
        assert result.files == 2 and result.symlinks == 1
        assert up[-1].bytes == up[-1].total_bytes == len(big) + 5
        assert [p.bytes for p in up] == sorted(p.bytes for p in up)
        assert await sandbox.files.read_text("data/deep/a.txt") == "alpha"
        single = await sandbox.files.upload_from(str(local / "deep" / "a.txt"), "one/b.txt")
        assert single.files == 1 and await sandbox.files.read_text("one/b.txt") == "alpha"

        down: List[TransferProgress] = []
        await sandbox.files.download_to("data", str(tmp_path / "back"), on_progress=down.append)
        assert (tmp_path / "back" / "big.bin").read_bytes() == big
        assert os.readlink(tmp_path / "back" / "link") == "deep/a.txt"
        assert down[0].bytes == 0 and down[-1].bytes == down[-1].total_bytes == len(big) + 5

        # An existing local file is never replaced, and a failed download leaves nothing it made.
        (tmp_path / "again").mkdir()
        (tmp_path / "again" / "big.bin").write_bytes(b"mine")
        with pytest.raises(AlreadyExistsError):
            await sandbox.files.download_to("data", str(tmp_path / "again"))
        assert sorted(os.listdir(tmp_path / "again")) == ["big.bin"] and (tmp_path / "again" / "big.bin").read_bytes() == b"mine"

        target = tmp_path / "big.copy"
        await sandbox.files.download_file("data/big.bin", str(target))
        assert target.read_bytes() == big
        with pytest.raises(AlreadyExistsError):
            await sandbox.files.download_file("data/deep/a.txt", str(target))
        await sandbox.files.download_file("data/deep/a.txt", str(target), overwrite=True)
        assert target.read_text() == "alpha"
        with pytest.raises(WarrenIsADirectoryError):
            await sandbox.files.download_file("data", str(tmp_path / "x"))
        with pytest.raises(FileTooLargeError):
            await sandbox.files.download_to("data", str(tmp_path / "capped"), max_bytes=1024)
        assert not (tmp_path / "capped" / "big.bin").exists()
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary file left


def test_the_blocking_sandbox_streams_transfers_too(controller: Any, tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("blocking")
    with Sandbox.create(**opts(controller)) as sandbox:
        seen: List[TransferProgress] = []
        sandbox.files.upload_from(str(tmp_path / "f.txt"), "f.txt", on_progress=seen.append)
        sandbox.files.download_file("f.txt", str(tmp_path / "g.txt"), on_progress=seen.append)
        assert (tmp_path / "g.txt").read_text() == "blocking" and seen[-1].bytes == 8


async def test_a_download_refused_at_its_first_entry_stops_at_once_however_much_follows(controller: Any, tmp_path: Path) -> None:
    # More follows the refused entry than the queues between the socket and the disk hold (a few MiB):
    # the refusal must reach the caller, not leave the download waiting for a reader that is gone.
    size = 24 * 1024 * 1024
    async with AsyncSandbox.create(**opts(controller)) as sandbox:
        await sandbox.files.mkdir("heavy")
        for name in ("b.bin", "c.bin"):  # whichever the daemon sends first is refused, the other follows
            made = await sandbox.commands.run(f"head -c {size} /dev/urandom > {controller.root}/heavy/{name}")
            assert made.exit_code == 0 and (await sandbox.files.stat(f"heavy/{name}")).size == size, made
            (tmp_path / name).write_text("mine")
        with pytest.raises(AlreadyExistsError):
            await asyncio.wait_for(sandbox.files.download_to("heavy", str(tmp_path)), 60)
        assert sorted(os.listdir(tmp_path)) == ["b.bin", "c.bin"] and (tmp_path / "b.bin").read_text() == "mine"


async def test_python_cells_run_in_a_jupyter_kernel_and_charts_come_back_as_images(controller: Any) -> None:
    if controller.engine != "docker":
        pytest.skip("Python cells need ipykernel inside the sandbox: run with WARREN_PY_ENGINE=docker")
    async with AsyncSandbox.create(**opts(controller)) as sandbox:
        await sandbox.code.run("x = 6")
        result = await sandbox.code.run("x * 7")
        assert [r.data["text/plain"] for r in result.results if r.is_main_result] == ["42"]
        failed = await sandbox.code.run("1 / 0")
        assert failed.error is not None and failed.error.name == "ZeroDivisionError"
        chart = await sandbox.code.run("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
        images = [image for image in map(display_image, chart.results) if image is not None]
        assert images and images[0].mime_type == "image/png", chart.results


async def test_upload_streams_an_archive_from_a_file_or_an_iterator_with_progress(controller: Any, tmp_path: Path) -> None:
    payload = os.urandom(2 * 1024 * 1024 + 3)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("blob.bin")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    archive = buffer.getvalue()
    (tmp_path / "a.tar").write_bytes(archive)
    async with AsyncSandbox.create(**opts(controller)) as sandbox:
        seen: List[TransferProgress] = []
        with open(tmp_path / "a.tar", "rb") as source:
            result = await sandbox.files.upload("from-file", source, on_progress=seen.append, total_bytes=len(archive))
        assert result.files == 1 and seen[-1].bytes == seen[-1].total_bytes == len(archive) and len(seen) > 1

        async def chunks() -> Any:
            for at in range(0, len(archive), 100_000):
                yield archive[at : at + 100_000]

        await sandbox.files.upload("from-iterator", chunks())
        small = await sandbox.files.upload("one-frame", archive, on_progress=seen.append)  # 2 MiB: one frame
        assert small.files == 1 and seen[-1].bytes == len(archive)
        for folder in ("from-file", "from-iterator", "one-frame"):
            assert (await sandbox.files.stat(f"{folder}/blob.bin")).size == len(payload)
