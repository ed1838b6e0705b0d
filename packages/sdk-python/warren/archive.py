"""The tar rules the agent applies to uploads, applied by this SDK to what it downloads.

A sandbox's content is hostile: a downloaded archive could name ``../../.bashrc``, an absolute
path, a device, a hard link, or a symbolic link that leaves the folder and an entry written through
it. :func:`check_archive` refuses all of those before anything is returned or written, with the
same rules (and messages) as ``TarChecker`` in packages/protocol/src/tar-rules.ts; archives are
parsed with the standard library's ``tarfile``, which refuses bad checksums and truncated data.
"""

from __future__ import annotations

import io
import os
import posixpath
import stat
import tarfile
from dataclasses import dataclass
from typing import List, Optional, Set, Tuple

from .errors import AlreadyExistsError, InvalidParamsError, PathNotInSandboxError

MAX_ENTRIES = 100_000
MAX_DEPTH = 64
MAX_NAME_BYTES = 4096
MAX_BYTES = 1024 * 1024 * 1024

_ALLOWED = "Allowed: a ustar, GNU or PAX tar archive of regular files, folders and relative symbolic links"


@dataclass
class ArchiveEntry:
    """One checked entry: a clean relative name (``/``-separated, no ``.`` or ``..``) and its kind."""

    name: str
    kind: str  # 'file' | 'directory' | 'symlink'
    mode: int
    size: int
    linkname: Optional[str] = None


class TarChecker:
    """Checks an archive's entries one by one, remembering what it saw (names, links, folders, bytes)."""

    def __init__(self) -> None:
        self._names: Set[str] = set()
        self._links: Set[str] = set()
        self._dirs: Set[str] = set()
        self._entries = 0
        self._bytes = 0

    def check(self, raw: str, kind_flag: str, mode: Optional[int], size: int, linkname: Optional[str]) -> ArchiveEntry:
        shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in raw)[:200]

        def refuse(why: str) -> InvalidParamsError:
            return InvalidParamsError(f"The archive entry '{shown}' is refused: {why}. Nothing was written. {_ALLOWED}.", details={"entry": shown})

        self._entries += 1
        if self._entries > MAX_ENTRIES:
            raise refuse(f"the archive has more than {MAX_ENTRIES} entries")
        if "\0" in raw:
            raise refuse("its name has a NUL byte")
        if len(raw.encode("utf-8", errors="surrogateescape")) > MAX_NAME_BYTES:
            raise refuse(f"its name is longer than {MAX_NAME_BYTES} bytes")
        if raw.startswith("/"):
            raise refuse("its name is absolute")
        segments = [s for s in raw.split("/") if s not in ("", ".")]
        if ".." in segments:
            raise refuse("its name has a .. segment")
        if any("\\" in s for s in segments):
            raise refuse("its name has a backslash")
        if not segments:
            raise refuse("its name is empty")
        if len(segments) > MAX_DEPTH:
            raise refuse(f"it is deeper than {MAX_DEPTH} folders")
        name = "/".join(segments)
        if kind_flag == "file":
            kind = "file"
        elif kind_flag == "directory":
            kind = "directory"
        elif kind_flag == "symlink":
            kind = "symlink"
        elif kind_flag == "link":
            raise refuse("hard links are not extracted")
        else:
            raise refuse(f"entries of type {kind_flag} (devices, FIFOs and the like) are not extracted")
        if mode is None:
            mode = 0o755 if kind == "directory" else 0o644
        if mode & 0o6000:
            raise refuse("it has the setuid or setgid bit")
        for i in range(1, len(segments)):
            if "/".join(segments[:i]) in self._links:
                raise refuse("it lies below a symbolic link of the same archive")
        if name in self._names:
            raise refuse("the archive holds this name twice")
        size = max(0, size) if kind == "file" else 0
        self._bytes += size
        if self._bytes > MAX_BYTES:
            raise refuse(f"the archive holds more than {MAX_BYTES} bytes")
        entry = ArchiveEntry(name, kind, mode & 0o777, size)
        if kind == "symlink":
            target = linkname or ""
            if target == "" or "\0" in target:
                raise refuse("its link target is empty or has a NUL byte")
            if target.startswith("/"):
                raise refuse("its link target is absolute")
            parts = [s for s in target.split("/") if s not in ("", ".")]
            first_down = next((i for i, s in enumerate(parts) if s != ".."), -1)
            if first_down != -1 and ".." in parts[first_down:]:
                raise refuse("its link target has a .. after a folder name")
            lands = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
            if lands == ".." or lands.startswith("../"):
                raise refuse("its link target leaves the archive folder")
            entry.linkname = target
            self._links.add(name)
        for i in range(1, len(segments)):
            prefix = "/".join(segments[:i])
            if prefix in self._names and prefix not in self._dirs:
                raise refuse("a parent of it is a file in the same archive")
        self._names.add(name)
        if kind == "directory":
            self._dirs.add(name)
        return entry


def _kind(info: tarfile.TarInfo) -> str:
    if info.type in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE):
        return "file"
    if info.type == tarfile.DIRTYPE:
        return "directory"
    if info.type == tarfile.SYMTYPE:
        return "symlink"
    if info.type == tarfile.LNKTYPE:
        return "link"
    return {tarfile.CHRTYPE: "character-device", tarfile.BLKTYPE: "block-device", tarfile.FIFOTYPE: "fifo"}.get(info.type, repr(info.type))


def check_archive(archive: bytes) -> List[Tuple[ArchiveEntry, bytes]]:
    """Parses a whole archive and checks every entry; raises InvalidParamsError on the first bad one.

    An empty input is an empty archive.
    """
    if not archive:
        return []
    checker = TarChecker()
    out: List[Tuple[ArchiveEntry, bytes]] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:", errorlevel=2) as tar:
            for info in tar:
                entry = checker.check(info.name, _kind(info), info.mode, info.size, info.linkname if info.issym() else None)
                data = b""
                if entry.kind == "file":
                    handle = tar.extractfile(info)
                    data = handle.read() if handle is not None else b""
                    if len(data) != info.size:
                        raise InvalidParamsError(f"The archive entry '{entry.name}' is cut short. Nothing was written. {_ALLOWED}.")
                out.append((entry, data))
    except tarfile.TarError as err:
        raise InvalidParamsError(f"The archive cannot be read: {err}. Nothing was written. {_ALLOWED}.") from None
    return out


def extract_archive(archive: bytes, local_folder: str) -> List[ArchiveEntry]:
    """Extracts a checked archive into a local folder: new files only (O_EXCL), never through a link."""
    entries = check_archive(archive)
    os.makedirs(local_folder, exist_ok=True)
    root = os.path.realpath(local_folder)
    for entry, data in entries:
        target = os.path.join(root, *entry.name.split("/"))
        parent = os.path.dirname(target)
        os.makedirs(parent, exist_ok=True)
        if os.path.realpath(parent) != parent:
            raise PathNotInSandboxError(f"Refusing to extract '{entry.name}': a parent folder is a link.")
        if entry.kind == "directory":
            try:
                existing = os.lstat(target)
            except FileNotFoundError:
                os.mkdir(target, entry.mode | 0o700)
            else:
                if not stat.S_ISDIR(existing.st_mode):
                    raise AlreadyExistsError(f"Refusing to extract '{entry.name}': a non-folder exists there.")
        elif entry.kind == "file":
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, entry.mode)
            except FileExistsError:
                raise AlreadyExistsError(f"Refusing to extract '{entry.name}': a file exists there.") from None
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        else:
            os.symlink(entry.linkname or "", target)
    return [entry for entry, _ in entries]
