"""Seed 001's ``FileSystemToolset``: ``read`` (a ReadResult), ``write``, ``edit``, ``delete``, ``move``,
``copy``, ``list_files``. Errors name the seed's error class (``PathNotWritableError: ...``), as in
packages/sdk/src/tools/filesystem.ts."""

from __future__ import annotations

import posixpath
from typing import Any, Dict, List

from .tool import Tool, ToolError, definitions, in_order, is_tool_error, to_json, utf16_length

_CLASSES = {
    "PATH_NOT_IN_SANDBOX": "PathNotInSandboxError",
    "PATH_NOT_WRITABLE": "PathNotWritableError",
    "PERMISSION_ESCALATION": "SandboxPermissionEscalationError",
    "SUFFIX_NOT_ALLOWED": "SuffixNotAllowedError",
    "FILE_TOO_LARGE": "FileTooLargeError",
    "EDIT_NOT_FOUND": "EditError",
    "EDIT_NOT_UNIQUE": "EditError",
}


def filesystem_error_class(code: str) -> str:
    """The seed 001 error class a Warren error code corresponds to (``SandboxError`` for the rest)."""
    return _CLASSES.get(code, "SandboxError")


def filesystem_error_text(error: ToolError) -> str:
    name = error.get("error_class") or filesystem_error_class(error["code"])
    return f"{name}: {error['error']}\n{error['suggestion']}" if error.get("suggestion") else f"{name}: {error['error']}"


def _on_error(error: ToolError, _args: Any = None) -> ToolError:
    return {**error, "error_class": filesystem_error_class(error["code"])}


def _on_write_error(error: ToolError, _args: Any = None) -> ToolError:
    # A credential that may not write at all is, to a model, a path it cannot write.
    return {**error, "error_class": "PathNotWritableError" if error["code"] == "FORBIDDEN" else filesystem_error_class(error["code"])}


def _text(result: Any) -> str:
    if is_tool_error(result):
        return filesystem_error_text(result)
    return result if isinstance(result, str) else to_json(result)


def filesystem_tools(sandbox: Any) -> List[Tool]:
    """Seed 001's tools over a sandbox; hand it a narrowed handle (``await sandbox.derive(...)``) to give a model less."""
    files = sandbox.files
    defs = definitions("filesystem")

    async def make_parent(path: str) -> None:
        parent = posixpath.dirname(path)
        if parent not in ("", ".", "/"):
            await files.mkdir(parent, parents=True)

    async def read(args: Any) -> Dict[str, Any]:
        piece = await files.read_chars(args.path, offset=args.offset, length=args.max_chars)
        return {"content": piece.content, "truncated": piece.truncated, "total_chars": piece.total_chars, "offset": piece.offset, "chars_read": piece.chars_read}

    async def write(args: Any) -> str:
        await files.write(args.path, args.content)
        return f"Wrote {utf16_length(args.content)} characters to {args.path}"

    async def edit(args: Any) -> str:
        await files.edit(args.path, args.old_text, args.new_text)
        return f"Edited {args.path}: replaced 1 occurrence"

    async def delete(args: Any) -> str:
        await files.delete(args.path)
        return f"Deleted {args.path}"

    async def move(args: Any) -> str:
        await make_parent(args.destination)
        await files.move(args.source, args.destination, overwrite=True)
        return f"Moved {args.source} to {args.destination}"

    async def copy(args: Any) -> str:
        await make_parent(args.destination)
        await files.copy(args.source, args.destination, overwrite=True)
        return f"Copied {args.source} to {args.destination}"

    async def list_files(args: Any) -> List[str]:
        return await files.glob(args.path, args.pattern)  # type: ignore[no-any-return]

    def tool(name: str, execute: Any, on_error: Any) -> Tool:
        return Tool(defs[name], execute, on_error, _text)

    return in_order(
        "filesystem",
        {
            "read": tool("read", read, _on_error),
            "write": tool("write", write, _on_write_error),
            "edit": tool("edit", edit, _on_write_error),
            "delete": tool("delete", delete, _on_write_error),
            "move": tool("move", move, _on_write_error),
            "copy": tool("copy", copy, _on_write_error),
            "list_files": tool("list_files", list_files, _on_error),
        },
    )
