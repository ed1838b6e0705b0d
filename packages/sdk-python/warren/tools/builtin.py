"""Seed 004 (BuiltinToolsSkill): ``read_file`` (``LINE#ID|content``), ``write_file``, ``edit_file``
(hash-anchored batch that refuses stale anchors), ``bash`` (30 s default timeout). Texts are the
TypeScript SDK's (packages/sdk/src/tools/builtin.ts), checked by the shared transcripts."""

from __future__ import annotations

import json
import math
import re
from typing import Any, Dict, List, Union

from ..commands import CommandResult
from .tool import Tool, definitions, in_order, js_number, tool_error

_ANCHOR = re.compile(r"^([1-9][0-9]*)#([0-9A-F]{4})$")


def format_bash_output(result: CommandResult, timeout_seconds: float) -> str:
    """The command's combined output, then ``[exit code: N]`` when it failed or ``[timed out after N seconds]``."""
    notes: List[str] = []
    if result.truncated:
        notes.append("[output truncated]")
    if result.timed_out:
        notes.append(f"[timed out after {js_number(timeout_seconds)} seconds]")
    elif result.exit_code != 0:
        notes.append(f"[exit code: {result.exit_code if result.exit_code is not None else 'killed by a signal'}]")
    output = result.stdout + result.stderr
    if not notes:
        return output
    return output + "\n".join(notes) if output == "" or output.endswith("\n") else f"{output}\n" + "\n".join(notes)


def parse_edits_json(text: str) -> Union[Dict[str, Any], str]:
    """Decodes ``edit_file``'s ``edits_json``: the edits, or a problem a model can act on."""
    try:
        value = json.loads(text)
    except ValueError as err:
        return f"edits_json is not valid JSON ({err})."
    problems: List[str] = []
    if not isinstance(value, list) or not value:
        return "edits_json does not match the edit schema: (root): must be a non-empty array of edits."
    for i, edit in enumerate(value):
        if not isinstance(edit, dict):
            problems.append(f"{i}: must be an object")
            continue
        extra = set(edit) - {"op", "pos", "end", "lines"}
        if extra:
            problems.append(f"{i}: unknown keys {sorted(extra)}")
        if edit.get("op") not in ("replace", "append", "prepend"):
            problems.append(f'{i}.op: must be "replace", "append" or "prepend"')
        for key in ("pos", "end"):
            if key in edit and not (isinstance(edit[key], str) and _ANCHOR.match(edit[key])):
                problems.append(f'{i}.{key}: must be a LINE#ID anchor such as "10#A1B2", copied from read_file')
        if "pos" not in edit:
            problems.append(f"{i}.pos: required")
        if not isinstance(edit.get("lines"), list) or not all(isinstance(line, str) for line in edit.get("lines", [])):
            problems.append(f"{i}.lines: must be an array of strings")
    if problems:
        return f"edits_json does not match the edit schema: {'; '.join(problems)}."
    for edit in value:
        if "end" in edit and edit["op"] != "replace":
            return f'"end" is only allowed with op "replace" (got op "{edit["op"]}").'
        if "end" in edit and int(edit["end"].split("#")[0]) < int(edit["pos"].split("#")[0]):
            return f'"end" ({edit["end"]}) comes before "pos" ({edit["pos"]}).'
    return {"edits": value}


def builtin_tools(sandbox: Any) -> List[Tool]:
    """Seed 004's tools over a sandbox (anything with ``files`` and ``commands``)."""
    files, commands = sandbox.files, sandbox.commands
    defs = definitions("builtin")

    async def read_file(args: Any) -> str:
        anchored = await files.read_anchored(args.path)
        text = "\n".join(f"{line.anchor}|{line.text}" for line in anchored.lines)
        if anchored.truncated:
            return f"{text}\n[showing lines 1-{len(anchored.lines)} of {anchored.total_lines}: use bash (e.g. sed -n) to see the rest]"
        return text

    async def write_file(args: Any) -> str:
        written = await files.write(args.path, args.content)
        return f"Wrote {written.bytes_written} bytes to {args.path}"

    async def edit_file(args: Any) -> Any:
        parsed = parse_edits_json(args.edits_json)
        if isinstance(parsed, str):
            return tool_error(
                "INVALID_ARGUMENTS",
                parsed,
                'Pass edits_json as a JSON array of {"op", "pos", "end"?, "lines"} objects with anchors copied from read_file.',
            )
        await files.edit_lines(args.file_path, parsed["edits"])
        count = len(parsed["edits"])
        return (
            f"Applied {count} edit{'' if count == 1 else 's'} to {args.file_path}. "
            "Line numbers and hashes may have changed: read_file again before the next edit."
        )

    async def bash(args: Any) -> str:
        # `exec 2>&1` merges stderr into stdout at the file-descriptor level, so the order is the order printed.
        result = await commands.run(f"exec 2>&1\n{args.command}", timeout=math.ceil(args.timeout * 1000) / 1000)
        return format_bash_output(result, args.timeout)

    return in_order(
        "builtin",
        {
            "read_file": Tool(defs["read_file"], read_file),
            "write_file": Tool(defs["write_file"], write_file),
            "edit_file": Tool(defs["edit_file"], edit_file),
            "bash": Tool(defs["bash"], bash),
        },
    )
