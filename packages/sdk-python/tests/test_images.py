"""Images: packing a build context (no Docker), and pull/build/list/remove through a real controller
on the Docker engine (WARREN_PY_ENGINE=docker), the scenarios of test/e2e/images-pull.test.ts and
images-build.test.ts. The Docker tests use only what they make: a registry they start on loopback
(Debian's docker-registry, as test/support/registry.ts does), images they build and push there, and
templates built from the local test image; everything is removed at the end."""

from __future__ import annotations

import io
import json
import os
import secrets
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

from conftest import PACKAGE, REPO, Controller
from warren import (
    BuildContextTooLargeError,
    BuildFailedError,
    ConflictError,
    ImageNotAllowedError,
    ImagePullFailedError,
    AsyncImages,
    InvalidParamsError,
    AsyncSandbox,
    UnsupportedFileTypeError,
    pack_build_context,
)
import warren

RUN = secrets.token_hex(4)
REGISTRY_BIN = "/usr/bin/docker-registry"
#: Every template this file builds is named below this, so the fixture removes them all.
PREFIX = "warren-e2e-build-py/"
LABEL = "warren.e2e=images-py"
DOCKER = os.environ.get("WARREN_PY_ENGINE") == "docker"


def members(archive: bytes) -> Dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
        return {info.name: info for info in tar.getmembers()}


# ---- the build context, packed on this machine (no Docker) -------------------------------------


def test_pack_keeps_files_folders_and_inside_links_and_drops_setuid(tmp_path: Path) -> None:
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "hello.txt").write_text("hello\n")
    (tmp_path / "files" / "tool").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "files" / "tool", 0o4755)
    os.symlink("hello.txt", tmp_path / "files" / "link.txt")
    packed = pack_build_context(tmp_path, dockerfile="docker/Dockerfile")
    assert packed.dockerfile == "docker/Dockerfile"
    assert packed.files == 3
    assert packed.bytes == len("FROM scratch\n") + len("hello\n") + len("#!/bin/sh\n")
    found = members(packed.archive)
    assert sorted(found) == ["docker", "docker/Dockerfile", "files", "files/hello.txt", "files/link.txt", "files/tool"]
    assert found["files/link.txt"].issym() and found["files/link.txt"].linkname == "hello.txt"
    assert found["files/tool"].mode == 0o755
    assert found["docker"].isdir()


def test_pack_refuses_a_link_out_of_the_context(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "sub").mkdir()
    for name, target in [("abs", "/etc/passwd"), ("up", "../../outside"), ("sub/zig", "../sub/../../x")]:
        link = tmp_path / name
        os.symlink(target, link)
        with pytest.raises(InvalidParamsError) as err:
            pack_build_context(tmp_path)
        assert "outside the context folder" in err.value.message
        assert err.value.details == {"path": name, "target": target}
        link.unlink()


def test_pack_refuses_a_fifo_and_a_socket(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(UnsupportedFileTypeError, match="a FIFO at 'pipe'"):
        pack_build_context(tmp_path)
    (tmp_path / "pipe").unlink()
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(tmp_path / "sock"))
        with pytest.raises(UnsupportedFileTypeError, match="a socket at 'sock'"):
            pack_build_context(tmp_path)
    finally:
        server.close()


def test_pack_refuses_a_context_over_its_cap_before_reading_it(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "big").write_bytes(b"x" * 5000)
    with pytest.raises(BuildContextTooLargeError) as err:
        pack_build_context(tmp_path, max_bytes=4096)
    assert err.value.code == "BUILD_CONTEXT_TOO_LARGE" and err.value.details == {"maxBytes": 4096}


def test_pack_refuses_a_dockerfile_outside_or_missing(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    for outside in ["../Dockerfile", "/etc/Dockerfile", ".", "a/../../b"]:
        with pytest.raises(InvalidParamsError, match="not inside the build context"):
            pack_build_context(tmp_path, dockerfile=outside)
    with pytest.raises(InvalidParamsError, match="has no regular file 'docker/Dockerfile'"):
        pack_build_context(tmp_path, dockerfile="docker/Dockerfile")
    # A Dockerfile that is a link is not a regular file of the context.
    os.symlink("Dockerfile", tmp_path / "Linked")
    with pytest.raises(InvalidParamsError, match="has no regular file 'Linked'"):
        pack_build_context(tmp_path, dockerfile="Linked")
    with pytest.raises(InvalidParamsError, match="not a folder"):
        pack_build_context(tmp_path / "Dockerfile")


async def test_build_refuses_a_bad_context_before_sending_anything(tmp_path: Path) -> None:
    # No controller listens on this port: a refusal that reached the network would be a connection error.
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    os.symlink("/etc", tmp_path / "etc")
    with pytest.raises(InvalidParamsError, match="outside the context folder"):
        await AsyncImages(base_url="http://127.0.0.1:9", api_key="wk_x").build(tmp_path, tag="x:1")


# ---- the NDJSON answer, from a scripted server (what the controller's side may send) ---------------


class Scripted:
    """A loopback HTTP server answering every POST with one scripted body, chunked, line by line."""

    def __init__(self, status: int, lines: List[bytes], hold: bool = False) -> None:
        import http.server
        import threading

        self.requests: List[Dict[str, Any]] = []
        self.closed = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                outer.requests.append({"path": self.path, "type": self.headers.get("content-type"), "auth": self.headers.get("authorization"), "body": body})
                self.send_response(status)
                self.send_header("content-type", "application/x-ndjson" if status < 400 else "application/json")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                try:
                    for line in lines:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                        self.wfile.flush()
                    if hold:  # keeps the answer open until the client goes away
                        while self.rfile.read(1):
                            pass
                        outer.closed.set()
                        return
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    outer.closed.set()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self) -> "Scripted":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_a_pull_answer_skips_unknown_lines_and_ends_at_done() -> None:
    lines = [
        b'{"type":"progress","status":"Downloading","layer":"abc","current":1,"total":2}\n',
        b'{"type":"novel","x":1}\n{"no json\n',
        b'{"type":"progress","status":"Pull complete"}\n{"type":"done","image":"reg/x:1"}\n',
        b'{"type":"progress","status":"after done"}\n',
    ]
    with Scripted(200, lines) as server:
        seen: List[str] = []
        pulled = await AsyncImages(base_url=server.url, api_key="wk_test").pull("reg/x:1", on_progress=lambda e: seen.append(e.status))
        assert pulled.image == "reg/x:1"
        assert seen == ["Downloading", "Pull complete"]
        request = server.requests[0]
        assert (request["path"], request["type"], request["auth"]) == ("/v1/images/pull", "application/json", "Bearer wk_test")
        assert json.loads(request["body"]) == {"image": "reg/x:1"}


async def test_an_error_line_is_its_error_class_and_an_answer_without_done_is_upstream_unavailable(tmp_path: Path) -> None:
    from warren import UpstreamUnavailableError

    failed = b'{"type":"error","error":{"code":"BUILD_FAILED","message":"step 2 failed","details":{"output":"boom"}}}\n'
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    with Scripted(200, [b'{"type":"output","text":"Step 1/2"}\n', failed]) as server:
        output: List[str] = []
        with pytest.raises(BuildFailedError) as err:
            await AsyncImages(base_url=server.url, api_key="k").build(tmp_path, tag="t:1", on_output=output.append)
        assert err.value.details == {"output": "boom"} and output == ["Step 1/2"]
        assert server.requests[0]["path"] == "/v1/images/build?tag=t%3A1&dockerfile=Dockerfile"
        assert server.requests[0]["type"] == "application/x-tar"
        assert sorted(members(server.requests[0]["body"])) == ["Dockerfile"]
    with Scripted(200, [b'{"type":"progress","status":"Waiting"}\n']) as server:
        with pytest.raises(UpstreamUnavailableError, match="ended before it said done"):
            await AsyncImages(base_url=server.url, api_key="k").pull("reg/x:1")
    refused = b'{"error":{"code":"IMAGE_NOT_ALLOWED","message":"not allowed","suggestion":"s"}}'
    with Scripted(403, [refused]) as server:
        with pytest.raises(ImageNotAllowedError, match="not allowed"):
            await AsyncImages(base_url=server.url, api_key="k").pull("reg/x:1")


async def test_an_oversized_line_is_refused() -> None:
    from warren import InternalError
    from warren.rest import MAX_EVENT_LINE_BYTES

    with Scripted(200, [b'{"type":"output","text":"' + b"x" * (MAX_EVENT_LINE_BYTES + 10) + b'"}\n']) as server:
        with pytest.raises(InternalError, match="a line over"):
            await AsyncImages(base_url=server.url, api_key="k").pull("reg/x:1")


async def test_cancelling_a_pull_closes_its_connection() -> None:
    import asyncio

    with Scripted(200, [b'{"type":"progress","status":"Downloading"}\n'], hold=True) as server:
        seen: List[str] = []
        task = asyncio.ensure_future(AsyncImages(base_url=server.url, api_key="k").pull("reg/x:1", on_progress=lambda e: seen.append(e.status)))
        for _ in range(200):
            if seen:
                break
            await asyncio.sleep(0.01)
        assert seen == ["Downloading"]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.to_thread(server.closed.wait, 10), "the server still holds the connection"


# ---- pull and build through a real controller on Docker ----------------------------------------


def docker(*args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(["docker", *args], input=stdin, capture_output=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)} failed: {done.stderr.decode(errors='replace')[-2000:]}")
    return done.stdout.decode()


def image_present(name: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", name], capture_output=True).returncode == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def registry() -> Iterator[str]:
    """Debian's docker-registry on a free loopback port with its own storage; yields its host part."""
    if not DOCKER:
        pytest.skip("needs the Docker engine: WARREN_PY_ENGINE=docker (scripts/test e2e runs it)")
    if not os.path.exists(REGISTRY_BIN):
        pytest.skip(f"{REGISTRY_BIN} is missing (apt-get install docker-registry; scripts/lib/common.sh ensure_registry)")
    folder = tempfile.mkdtemp(prefix="warren-registry-py-")
    port = free_port()
    config = Path(folder) / "config.yml"
    config.write_text(
        "version: 0.1\nlog: { level: info }\nstorage:\n"
        f"  filesystem: {{ rootdirectory: {folder}/data }}\n  delete: {{ enabled: true }}\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen([REGISTRY_BIN, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    host = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with urllib.request.urlopen(f"http://{host}/v2/", timeout=2) as res:  # noqa: S310 - the registry this test started
                    if res.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the test registry did not start on {host}")
            time.sleep(0.1)
        yield host
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def images_controller(registry: str) -> Iterator[Controller]:
    """A controller on Docker whose images settings allow only the test registry's warren-e2e path."""
    settings = {
        "images": {
            "allowedRegistries": [f"{registry}/warren-e2e"],
            "pull": "missing",
            "maxPullMb": 1024,
            "maxBuildContextMb": 16,
            "buildNetwork": "none",
            "timeoutMs": 120_000,
        }
    }
    args = ["node", str(PACKAGE / "scripts" / "local-controller.mjs"), "--docker", "--config", json.dumps(settings)]
    proc = subprocess.Popen(args, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the controller did not start (exit code {proc.wait(30)}); run `pnpm build` first")
        info = json.loads(line)
        yield Controller(info["url"], info["apiKey"], info["root"], info["engine"])
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        labelled = docker("images", "-q", "--filter", f"label={LABEL}").split()
        built = [
            ref
            for ref in docker("images", "--filter", "label=warren.build", "--format", "{{.Repository}}:{{.Tag}}").split()
            if ref.startswith(PREFIX) or ref.startswith(f"{registry}/warren-e2e/")
        ]
        pulled = [ref for ref in docker("images", "--format", "{{.Repository}}:{{.Tag}}").split() if ref.startswith(f"{registry}/")]
        for ref in {*labelled, *built, *pulled}:
            subprocess.run(["docker", "rmi", "-f", ref], capture_output=True)


def base_image() -> str:
    """A small image with /bin/sh: the test busybox image when scripts/build-images made it, else the default image."""
    return "warren/test-busybox:latest" if image_present("warren/test-busybox:latest") else "warren/sandbox:latest"


def publish(registry: str, source: str, name: str) -> None:
    """Pushes ``source`` to the test registry as ``name`` and removes the local name, so the engine lacks it."""
    docker("tag", source, name)
    docker("push", name)
    docker("rmi", name)
    assert not image_present(name)


def random_image(name: str, size: int) -> None:
    """An image FROM scratch holding one file of random bytes (so its layer does not compress)."""
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for entry, data in [("Dockerfile", b"FROM scratch\nCOPY blob /blob\n"), ("blob", os.urandom(size))]:
            info = tarfile.TarInfo(entry)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    docker("build", "-q", "--label", LABEL, "-t", name, "-", stdin=context.getvalue())


async def test_pull_streams_the_layer_progress_of_a_real_download(registry: str, images_controller: Controller) -> None:
    image = f"{registry}/warren-e2e/blob-py:{RUN}"
    random_image(image, 2 * 1024 * 1024)
    publish(registry, image, image)
    events: List[Any] = []
    images = AsyncImages(base_url=images_controller.url, api_key=images_controller.api_key)
    pulled = await images.pull(image, on_progress=events.append)
    assert pulled.image == image
    statuses = [e.status for e in events]
    assert "Pull complete" in statuses
    assert any(e.status == "Downloading" and isinstance(e.total, (int, float)) and e.total > 1024 * 1024 for e in events)
    assert image_present(image)


async def test_create_with_pull_progress_pulls_then_runs_the_sandbox(registry: str, images_controller: Controller) -> None:
    image = f"{registry}/warren-e2e/shell-py:{RUN}"
    publish(registry, base_image(), image)
    seen: List[str] = []
    async with AsyncSandbox.create(
        base_url=images_controller.url, api_key=images_controller.api_key, image=image, on_pull_progress=lambda e: seen.append(e.status)
    ) as sandbox:
        result = await sandbox.commands.run(["sh", "-c", "echo pulled"])
        assert (result.exit_code, result.stdout) == (0, "pulled\n")
        assert (await sandbox.info()).image == image
    assert seen, "the create showed no pull progress"
    assert image_present(image)


async def test_pull_refuses_a_registry_that_is_not_allowed_and_reports_a_missing_image(registry: str, images_controller: Controller) -> None:
    images = AsyncImages(base_url=images_controller.url, api_key=images_controller.api_key)
    for image in [f"{registry}/other/x:1", f"{registry}/warren-e2e-evil/x:1"]:
        with pytest.raises(ImageNotAllowedError):
            await images.pull(image)
    missing = f"{registry}/warren-e2e/missing-py:{RUN}"
    with pytest.raises(ImagePullFailedError):
        await images.pull(missing)
    assert not image_present(missing)


async def test_build_streams_output_then_a_sandbox_runs_the_template_and_it_is_listed_and_removed(
    tmp_path: Path, registry: str, images_controller: Controller
) -> None:
    context = tmp_path / "ctx"
    (context / "docker").mkdir(parents=True)
    (context / "files").mkdir()
    (context / "docker" / "Dockerfile").write_text(
        f"FROM {base_image()}\nCOPY files/ /opt/template/\n"
        'RUN test "$(ls /sys/class/net)" = lo && echo step-ran-offline\n'
        "RUN cat /opt/template/hello.txt && cat /opt/template/link.txt\n"
    )
    (context / "files" / "hello.txt").write_text("hello from the python context\n")
    (context / "files" / "nonce").write_text(secrets.token_hex(8))
    os.symlink("hello.txt", context / "files" / "link.txt")
    output: List[str] = []
    tag = f"{PREFIX}tmpl:{RUN}"
    images = AsyncImages(base_url=images_controller.url, api_key=images_controller.api_key)
    built = await images.build(context, tag=tag, dockerfile="docker/Dockerfile", on_output=output.append)
    assert built.image == tag and built.id is not None and built.id.startswith("sha256:")
    text = "".join(output)
    assert "Step 1/" in text and "step-ran-offline" in text
    assert text.count("hello from the python context") >= 2  # the file and the link to it
    assert any(tag in i.tags for i in await images.list())
    async with AsyncSandbox.create(base_url=images_controller.url, api_key=images_controller.api_key, image=tag) as sandbox:
        result = await sandbox.commands.run(["cat", "/opt/template/hello.txt"])
        assert (result.exit_code, result.stdout) == (0, "hello from the python context\n")
    await images.remove(tag)
    assert not image_present(tag)


async def test_a_failing_step_is_build_failed_with_the_output_and_leaves_no_image(tmp_path: Path, images_controller: Controller) -> None:
    (tmp_path / "Dockerfile").write_text(f"FROM {base_image()}\nRUN echo about-to-fail-py && exit 3\n")
    tag = f"{PREFIX}broken:{RUN}"
    with pytest.raises(BuildFailedError) as err:
        await AsyncImages(base_url=images_controller.url, api_key=images_controller.api_key).build(tmp_path, tag=tag)
    assert "about-to-fail-py" in (err.value.details or {}).get("output", "")
    assert not image_present(tag)


async def test_build_refuses_a_base_image_not_allowed_and_a_name_warren_did_not_build(tmp_path: Path, images_controller: Controller) -> None:
    images = AsyncImages(base_url=images_controller.url, api_key=images_controller.api_key)
    (tmp_path / "Dockerfile").write_text("FROM localhost:5999/not-allowed/base:1\nRUN true\n")
    with pytest.raises(ImageNotAllowedError):
        await images.build(tmp_path, tag=f"{PREFIX}x:{RUN}")
    (tmp_path / "Dockerfile").write_text(f"FROM {base_image()}\n")
    with pytest.raises(ConflictError):
        await images.build(tmp_path, tag=base_image())
    assert not image_present(f"{PREFIX}x:{RUN}")


def test_the_sync_twin_builds_lists_and_removes(tmp_path: Path, images_controller: Controller) -> None:
    (tmp_path / "Dockerfile").write_text(f"FROM {base_image()}\nCOPY note /note\nRUN cat /note\n")
    (tmp_path / "note").write_text(f"sync build {secrets.token_hex(8)}\n")
    tag = f"{PREFIX}sync:{RUN}"
    images = warren.Images(base_url=images_controller.url, api_key=images_controller.api_key)
    output: List[str] = []
    built = images.build(str(tmp_path), tag=tag, on_output=output.append)
    assert built.image == tag
    assert "sync build" in "".join(output)
    assert any(tag in i.tags for i in images.list())
    images.remove(tag)
    assert not image_present(tag)
