"""Seed 003: ``read_partial_files``, many files in one call, each by line range (at most 500 lines) or
character range (at most 50,000 characters), with packages/sdk/src/tools/partial-read.ts's texts."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Union

from ..errors import WarrenError
from ..files import CharSlice, LineSlice
from .tool import Tool, ToolFailure, definitions, tool_error, tool_error_from


def format_line_segment(path: str, piece: LineSlice) -> str:
    header = f"--- File: {path} (lines {piece.start_line}-{piece.end_line}) ---"
    if piece.end_line < piece.start_line:
        return f"{header}\nNo lines read: start_line {piece.start_line} is beyond the end of the file ({piece.total_lines} lines)."
    content = piece.content
    content = content[:-2] if content.endswith("\r\n") else content[:-1] if content.endswith("\n") else content
    return f"{header}\n{content}"


def format_char_segment(path: str, piece: CharSlice) -> str:
    header = f"--- File: {path} (characters {piece.offset}-{piece.offset + piece.chars_read}) ---"
    if piece.chars_read == 0 and piece.offset >= piece.total_chars:
        return f"{header}\nNo characters read: start_character {piece.offset} is beyond the end of the file ({piece.total_chars} characters)."
    return f"{header}\n{piece.content}"


def format_failed_segment(request: Any, message: str) -> str:
    if request.start_line is not None:
        rng = f"lines {request.start_line}-{request.start_line + (request.line_count or 1) - 1}"
    else:
        rng = f"characters {request.start_character}-{(request.start_character or 0) + (request.length or 0)}"
    return f"--- File: {request.path} ({rng}) ---\nError: {message}"


def parse_excluded_extensions(value: Union[Sequence[str], str, None]) -> List[str]:
    items = value.split(",") if isinstance(value, str) else list(value or [])
    out = [ext.strip().lower() for ext in items]
    return [ext if ext.startswith(".") else f".{ext}" for ext in out if ext]


def _problem(request: Any) -> Optional[str]:
    lines = request.start_line is not None or request.line_count is not None
    chars = request.start_character is not None or request.length is not None
    if lines and chars:
        return "use either line-based parameters (start_line, line_count) or character-based parameters (start_character, length), not both"
    if lines and (request.start_line is None or request.line_count is None):
        return "line-based reading needs both start_line and line_count"
    if chars and (request.start_character is None or request.length is None):
        return "character-based reading needs both start_character and length"
    if not lines and not chars:
        return "specify either line-based parameters (start_line, line_count) or character-based parameters (start_character, length)"
    return None


def partial_read_tools(sandbox: Any, *, excluded_file_extensions: Union[Sequence[str], str, None] = None) -> List[Tool]:
    files = sandbox.files
    excluded = parse_excluded_extensions(excluded_file_extensions)
    definition = definitions("partialRead")["read_partial_files"]
    if excluded:
        note = f" Files with these extensions cannot be read: {', '.join(excluded)}."
        definition = definition._replace(description=definition.description + note)

    async def read(args: Any) -> Any:
        problems = [f"requests.{i}: {p}" for i, p in enumerate(_problem(r) for r in args.requests) if p is not None]
        if problems:
            raise ToolFailure(
                tool_error(
                    "INVALID_ARGUMENTS",
                    f"Invalid arguments for read_partial_files: {'; '.join(problems)}.",
                    "Call read_partial_files again with arguments that match its input schema.",
                )
            )
        segments: List[str] = []
        for request in args.requests:
            ext = next((e for e in excluded if request.path.lower().endswith(e)), None)
            if ext is not None:
                segments.append(format_failed_segment(request, f"reading {ext} files is not allowed (excluded extensions: {', '.join(excluded)})."))
                continue
            try:
                if request.start_line is not None:
                    piece = await files.read_lines(request.path, start_line=request.start_line, end_line=request.start_line + request.line_count - 1)
                    segments.append(format_line_segment(request.path, piece))
                else:
                    chars = await files.read_chars(request.path, offset=request.start_character, length=request.length)
                    segments.append(format_char_segment(request.path, chars))
            except WarrenError as err:
                error = tool_error_from(err)
                if error["code"] == "CANCELLED":
                    return error
                segments.append(format_failed_segment(request, f"{error['error']} {error['suggestion']}" if error.get("suggestion") else error["error"]))
        return "\n\n".join(segments)

    return [Tool(definition, read)]
