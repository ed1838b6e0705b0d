"""Images on the controller's engine: pull with progress, build templates from a Dockerfile, list
and remove what Warren built. The twin of the TypeScript SDK's ``Images`` (``@warren/sdk``).

Example::

    from warren import AsyncImages, AsyncSandbox

    images = AsyncImages(base_url="http://127.0.0.1:7420", api_key="wk_...")
    await images.pull("python:3.12-slim", on_progress=lambda p: print(p.status, p.layer or ""))
    built = await images.build("./template", tag="py-tools:1", on_output=lambda t: print(t, end=""))
    async with AsyncSandbox.create(image=built.image) as sandbox:
        ...
"""

from __future__ import annotations

import asyncio
import io
import os
import posixpath
import stat as stat_module
import tarfile
from dataclasses import dataclass
from typing import Callable, List, Optional

from ._protocol import ImageEventOutput, ImageEventProgress, ListImagesResponseImagesItem
from .archive import TarChecker
from .errors import BuildContextTooLargeError, InvalidParamsError, UnsupportedFileTypeError
from .rest import RestClient, resolve_controller

#: The largest build context the SDK packs unless told otherwise (the controller has its own cap, ``images.maxBuildContextMb``).
DEFAULT_MAX_CONTEXT_BYTES = 256 * 1024 * 1024

#: One progress line of a pull (also sent while a build pulls its base images).
PullProgressEvent = ImageEventProgress
#: One image Warren built, as ``GET /v1/images`` lists it (``id``, ``tags``, ``created_at``, ``size_bytes``).
ImageInfo = ListImagesResponseImagesItem


@dataclass
class PackedContext:
    """A packed build context: the tar archive and what went into it."""

    archive: bytes
    #: The Dockerfile's path inside the archive.
    dockerfile: str
    files: int
    bytes: int


@dataclass
class PulledImage:
    image: str


@dataclass
class BuiltImage:
    image: str
    #: The image's id (``sha256:...``), when the engine said it.
    id: Optional[str]


class AsyncImages:
    """Images on the controller's engine. Needs the API key (these are operator calls).

    A create of an image the engine lacks pulls it too, and simply waits; pull first (or pass
    ``on_pull_progress`` to ``Sandbox.create``) to show progress. Cancel a call by cancelling its task.
    """

    def __init__(self, *, base_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        url, key = resolve_controller(base_url, api_key)
        self._rest = RestClient(url, key)

    async def pull(self, image: str, *, on_progress: Optional[Callable[[PullProgressEvent], None]] = None) -> PulledImage:
        """Pulls ``image`` unless the engine has it; returns once it is there. Refused before any
        pull when its registry is not allowed (``ImageNotAllowedError``); ``ImagePullFailedError``,
        ``ImageTooLargeError`` otherwise."""

        def on_event(event: object) -> None:
            if on_progress is not None and isinstance(event, ImageEventProgress):
                on_progress(event)

        done = await self._rest.pull_image(image, on_event)
        return PulledImage(done.image)

    async def build(
        self,
        context: "str | os.PathLike[str]",
        *,
        tag: str,
        dockerfile: Optional[str] = None,
        max_context_bytes: Optional[int] = None,
        on_output: Optional[Callable[[str], None]] = None,
        on_progress: Optional[Callable[[PullProgressEvent], None]] = None,
    ) -> BuiltImage:
        """Packs the folder ``context`` (:func:`pack_build_context`: links never followed, links out
        of the folder and special files refused, a size cap) and builds it on the controller as
        ``tag`` (``name[:tag]`` without a registry host), streaming the output to ``on_output``.
        A failed step raises ``BuildFailedError`` with the end of the output in ``details["output"]``."""
        packed = await asyncio.to_thread(pack_build_context, context, dockerfile=dockerfile, max_bytes=max_context_bytes)

        def on_event(event: object) -> None:
            if isinstance(event, ImageEventOutput):
                if on_output is not None:
                    on_output(event.text)
            elif isinstance(event, ImageEventProgress) and on_progress is not None:
                on_progress(event)

        done = await self._rest.build_image(packed.archive, tag, packed.dockerfile, on_event)
        return BuiltImage(done.image, done.id)

    async def list(self) -> List[ImageInfo]:
        """The images Warren built, newest first."""
        return await self._rest.list_images()

    async def remove(self, image: str) -> None:
        """Removes an image Warren built, by id or name; other images are refused (``ForbiddenError``)."""
        await self._rest.remove_image(image)


def pack_build_context(folder: "str | os.PathLike[str]", *, dockerfile: Optional[str] = None, max_bytes: Optional[int] = None) -> PackedContext:
    """Packs a folder as a build context (a tar archive), never following a link.

    A symbolic link is packed as a link when its target is relative and stays inside the folder,
    and refused otherwise; a file is read through a descriptor opened with ``O_NOFOLLOW``, so a file
    swapped for a link while packing is refused too. Sockets, FIFOs and devices are refused
    (``UnsupportedFileTypeError``); setuid/setgid bits are dropped; every entry passes the same
    rules the controller applies. Content past ``max_bytes`` (default 256 MiB) is refused before it
    is read (``BuildContextTooLargeError``). The same rules as the TypeScript ``packBuildContext``.
    """
    limit = DEFAULT_MAX_CONTEXT_BYTES if max_bytes is None else max_bytes
    shown = os.fspath(folder)
    try:
        root = os.path.realpath(shown, strict=True)
        if not stat_module.S_ISDIR(os.lstat(root).st_mode):
            raise NotADirectoryError("not a folder")
    except OSError as err:
        raise InvalidParamsError(
            f"The build context '{shown}' is not a folder that can be read ({err.strerror or err}); name the folder with the Dockerfile."
        ) from None
    wanted = _inside_context(dockerfile if dockerfile is not None else "Dockerfile")
    checker = TarChecker()
    out = io.BytesIO()
    state = {"bytes": 0, "files": 0, "dockerfile": False}

    def too_large() -> BuildContextTooLargeError:
        return BuildContextTooLargeError(
            f"The build context '{shown}' holds more than {limit} bytes (max_context_bytes); build from a folder with only what the Dockerfile copies.",
            details={"maxBytes": limit},
        )

    def add(tar: tarfile.TarFile, info: tarfile.TarInfo, body: Optional[bytes] = None) -> None:
        kind = "directory" if info.isdir() else "symlink" if info.issym() else "file"
        try:
            checker.check(info.name, kind, info.mode, info.size, info.linkname if info.issym() else None)
        except InvalidParamsError as err:
            raise InvalidParamsError(str(err).replace("Nothing was written.", "Nothing was sent."), details={"path": info.name}) from None
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        tar.addfile(info, io.BytesIO(body) if body is not None else None)

    def walk(tar: tarfile.TarFile, relative: str) -> None:
        for name in sorted(os.listdir(os.path.join(root, relative) if relative else root)):
            rel = name if relative == "" else f"{relative}/{name}"
            full = os.path.join(root, rel)
            info_stat = os.lstat(full)
            mode = stat_module.S_IMODE(info_stat.st_mode) & 0o777
            if stat_module.S_ISDIR(info_stat.st_mode):
                info = tarfile.TarInfo(rel)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, int(info_stat.st_mtime)
                add(tar, info)
                walk(tar, rel)
            elif stat_module.S_ISLNK(info_stat.st_mode):
                target = os.readlink(full)
                if target.startswith("/") or _escapes(rel, target):
                    raise InvalidParamsError(
                        f"The build context has a link '{rel}' -> '{target}' that points outside the context folder; links are packed as links, "
                        "never followed, and must stay inside. Copy the file into the context instead.",
                        details={"path": rel, "target": target},
                    )
                info = tarfile.TarInfo(rel)
                info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, target, 0o777, int(info_stat.st_mtime)
                add(tar, info)
            elif stat_module.S_ISREG(info_stat.st_mode):
                if state["bytes"] + info_stat.st_size > limit:
                    raise too_large()
                try:
                    fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
                except OSError as err:
                    raise InvalidParamsError(
                        f"Could not read '{rel}' of the build context ({err.strerror or err}); it may have been replaced by a link while packing."
                    ) from None
                with os.fdopen(fd, "rb") as handle:
                    opened = os.fstat(handle.fileno())
                    if not stat_module.S_ISREG(opened.st_mode):
                        raise InvalidParamsError(f"'{rel}' of the build context changed while packing; pack it again.")
                    if state["bytes"] + opened.st_size > limit:
                        raise too_large()
                    body = handle.read(limit - state["bytes"] + 1)
                state["bytes"] += len(body)
                if state["bytes"] > limit:
                    raise too_large()
                state["files"] += 1
                if rel == wanted:
                    state["dockerfile"] = True
                info = tarfile.TarInfo(rel)
                info.type, info.mode, info.size, info.mtime = tarfile.REGTYPE, mode, len(body), int(info_stat.st_mtime)
                add(tar, info, body)
            else:
                kind = (
                    "a socket"
                    if stat_module.S_ISSOCK(info_stat.st_mode)
                    else "a FIFO"
                    if stat_module.S_ISFIFO(info_stat.st_mode)
                    else "a device"
                )
                raise UnsupportedFileTypeError(
                    f"The build context has {kind} at '{rel}'; a context holds regular files, folders and links only. Build from a folder without it.",
                    details={"path": rel},
                )

    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        walk(tar, "")
    if not state["dockerfile"]:
        raise InvalidParamsError(
            f"The build context '{shown}' has no regular file '{wanted}'; put the Dockerfile inside the context folder, or name it with dockerfile.",
            details={"dockerfile": wanted},
        )
    return PackedContext(out.getvalue(), wanted, int(state["files"]), int(state["bytes"]))


def _inside_context(given: str) -> str:
    """The Dockerfile's path as the archive names it; refused when it would leave the context."""
    normal = posixpath.normpath(given.replace(os.sep, "/")) if given else "."
    if normal.startswith("/") or normal == ".." or normal.startswith("../") or normal == "." or "\0" in normal:
        raise InvalidParamsError(
            f"The Dockerfile '{given}' is not inside the build context; give its path relative to the context folder, e.g. Dockerfile or docker/Dockerfile."
        )
    return normal.rstrip("/")


def _escapes(rel: str, target: str) -> bool:
    """True when a relative link target, taken from the link's folder, leaves the context (any ``..`` after a step down counts: it is taken physically)."""
    parts = [s for s in target.split("/") if s not in ("", ".")]
    first_down = next((i for i, s in enumerate(parts) if s != ".."), -1)
    if first_down != -1 and ".." in parts[first_down:]:
        return True
    lands = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    return lands == ".." or lands.startswith("../")


__all__ = [
    "BuiltImage",
    "DEFAULT_MAX_CONTEXT_BYTES",
    "ImageInfo",
    "Images",
    "PackedContext",
    "PullProgressEvent",
    "PulledImage",
    "pack_build_context",
]
