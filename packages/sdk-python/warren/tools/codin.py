"""Seed 000 ("Codin"): ``sandbox_read_file``, ``sandbox_write_file``, ``sandbox_exec``,
``sandbox_list_files``, with packages/sdk/src/tools/codin.ts's texts."""

from __future__ import annotations

import math
import posixpath
from typing import Any, List, Optional, Sequence

from ..commands import CommandResult
from ..files import LineSlice
from .tool import Tool, definitions, in_order, js_number

CODIN_DEFAULT_MAX_LINES = 1000
CODIN_DEFAULT_MAX_FILES = 100
CODIN_DEFAULT_EXEC_TIMEOUT_SECONDS = 60


def join_shown(folder: str, child: str) -> str:
    """``child`` shown under the folder it was listed from (``.`` adds nothing)."""
    if folder in (".", "", "./"):
        return child
    return posixpath.normpath(posixpath.join(folder, child))


def format_codin_read(path: str, piece: LineSlice, start_line: Optional[int], end_line: Optional[int], max_lines: int) -> str:
    total = piece.total_lines
    if start_line is None and end_line is None and total <= max_lines:
        return piece.content
    start = max(1, start_line if start_line is not None else 1)
    wanted_end = min(total, total if end_line is None else max(1, end_line))
    truncated = wanted_end - start + 1 > max_lines
    end = start + max_lines - 1 if truncated else wanted_end
    header = [f"# File: {path}", f"# Lines {start}-{end} of {total} total"]
    if truncated:
        header.append(f"# Output truncated to {max_lines} lines")
    return "\n".join(header) + "\n\n" + ("" if start > end else piece.content)


def format_codin_exec(result: CommandResult, timeout_seconds: float) -> str:
    if result.timed_out:
        parts = [f"Command timed out after {js_number(timeout_seconds)} seconds (killed)"]
    else:
        parts = [f"Exit code: {result.exit_code if result.exit_code is not None else 'none (killed by a signal)'}"]
    if result.stdout != "":
        parts.append(f"STDOUT:\n{result.stdout}")
    if result.stderr != "":
        parts.append(f"STDERR:\n{result.stderr}")
    if result.stdout == "" and result.stderr == "":
        parts.append("(no output)")
    if result.truncated:
        parts.append("(output truncated: the command printed more than the sandbox keeps)")
    return "\n".join(part[:-1] if part.endswith("\n") else part for part in parts) + "\n"


def format_codin_list(path: str, entries: Sequence[Any], truncated: bool, max_files: int) -> str:
    if not entries:
        return f"# No files in {path}"
    lines = [join_shown(path, entry.path) + ("/" if entry.type == "directory" else "") for entry in entries]
    if truncated:
        lines.append(f"# Output truncated to {max_files} files")
    return "\n".join(lines)


def codin_tools(sandbox: Any) -> List[Tool]:
    files, commands = sandbox.files, sandbox.commands
    defs = definitions("codin")

    async def read_file(args: Any) -> str:
        piece = await files.read_lines(args.path, start_line=args.start_line, end_line=args.end_line, max_lines=args.max_lines)
        return format_codin_read(args.path, piece, args.start_line, args.end_line, args.max_lines)

    async def write_file(args: Any) -> str:
        written = await files.write(args.path, args.content)
        return f"Wrote {written.bytes_written} bytes to {args.path}"

    async def execute(args: Any) -> str:
        timeout = args.timeout if args.timeout is not None else CODIN_DEFAULT_EXEC_TIMEOUT_SECONDS
        result = await commands.run(args.cmd, cwd=args.cwd, env=args.env, timeout=math.ceil(timeout * 1000) / 1000)
        return format_codin_exec(result, timeout)

    async def list_files(args: Any) -> str:
        listing = await files.list(args.path, recursive=args.recursive, limit=args.max_files)
        entries = listing.entries[: args.max_files]
        return format_codin_list(args.path, entries, listing.truncated or len(listing.entries) > args.max_files, args.max_files)

    return in_order(
        "codin",
        {
            "sandbox_read_file": Tool(defs["sandbox_read_file"], read_file),
            "sandbox_write_file": Tool(defs["sandbox_write_file"], write_file),
            "sandbox_exec": Tool(defs["sandbox_exec"], execute),
            "sandbox_list_files": Tool(defs["sandbox_list_files"], list_files),
        },
    )
