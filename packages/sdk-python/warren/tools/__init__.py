"""The seed tool sets over a sandbox, with the TypeScript SDK's names, schemas and texts.

Definitions (names, descriptions, input schemas) are generated from docs/toolsets.json; the texts a
model reads are checked against the TypeScript SDK's by shared transcripts (test/fixtures/toolsets).

Example::

    tools = builtin_tools(sandbox)
    outcome = await run_tool_call(tools, "bash", {"command": "ls"})
    print(outcome.text)
"""

from ._definitions import TOOL_SETS, ToolDefinition
from .builtin import builtin_tools, format_bash_output, parse_edits_json
from .codin import codin_tools, format_codin_exec, format_codin_list, format_codin_read
from .filesystem import filesystem_error_class, filesystem_error_text, filesystem_tools
from .partial_read import partial_read_tools
from .toolsmith import summarise_failures, summarise_pytest, to_sandbox_path, toolsmith_error, toolsmith_tools
from .tool import Tool, ToolCallOutcome, ToolError, error_text, is_tool_error, run_tool_call, tool_error

__all__ = [
    "TOOL_SETS",
    "Tool",
    "ToolCallOutcome",
    "ToolDefinition",
    "ToolError",
    "builtin_tools",
    "codin_tools",
    "format_codin_exec",
    "format_codin_list",
    "format_codin_read",
    "partial_read_tools",
    "error_text",
    "filesystem_error_class",
    "filesystem_error_text",
    "filesystem_tools",
    "format_bash_output",
    "is_tool_error",
    "parse_edits_json",
    "run_tool_call",
    "summarise_failures",
    "summarise_pytest",
    "to_sandbox_path",
    "toolsmith_error",
    "toolsmith_tools",
    "tool_error",
]
