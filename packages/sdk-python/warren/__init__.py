"""Warren's Python SDK: sandboxes for AI agents, driven over one WebSocket.

Example::

    import asyncio
    from warren import Sandbox

    async def main() -> None:
        async with Sandbox.create(base_url="http://127.0.0.1:7420", api_key="wk_...") as sandbox:
            await sandbox.files.write("a.py", "print(6 * 7)")
            print((await sandbox.commands.run("python3 a.py")).stdout)

    asyncio.run(main())
"""

from ._protocol import ERROR_CODES, METHODS, PROTOCOL_MINOR, PROTOCOL_VERSION, SandboxInfo
from .archive import ArchiveEntry, check_archive
from .channel import MAX_REPEATS, Channel, ReconnectOptions
from .commands import AttachExit, CommandResult, Commands, ExitEvent, OutputEvent, ProcessHandle, ProcessInfo, ShellSession
from .connection import Connection, ProtocolInfo
from .errors import *  # noqa: F401,F403 - every error class is public API
from .errors import ERROR_CLASSES, FrameworkNotInstalledError, WarrenError, error_from_wire, make_error
from .files import CharSlice, DownloadedArchive, Files, LineSlice
from .images import BuiltImage, ImageInfo, Images, PackedContext, PulledImage, PullProgressEvent, pack_build_context
from .pty import Pty, PtyExit, Terminal
from .sandbox import Sandbox, Snapshots, Volumes

__version__ = "0.1.0"

__all__ = [
    "ArchiveEntry",
    "Channel",
    "MAX_REPEATS",
    "ReconnectOptions",
    "AttachExit",
    "BuiltImage",
    "ImageInfo",
    "Images",
    "PackedContext",
    "PulledImage",
    "PullProgressEvent",
    "pack_build_context",
    "CharSlice",
    "CommandResult",
    "Commands",
    "Connection",
    "DownloadedArchive",
    "ERROR_CLASSES",
    "ERROR_CODES",
    "FrameworkNotInstalledError",
    "ExitEvent",
    "Files",
    "LineSlice",
    "METHODS",
    "OutputEvent",
    "PROTOCOL_MINOR",
    "PROTOCOL_VERSION",
    "ProcessHandle",
    "ProcessInfo",
    "ProtocolInfo",
    "Pty",
    "PtyExit",
    "Sandbox",
    "SandboxInfo",
    "ShellSession",
    "Snapshots",
    "Volumes",
    "Terminal",
    "WarrenError",
    "check_archive",
    "error_from_wire",
    "make_error",
    *[cls.__name__ for cls in ERROR_CLASSES.values()],
]
