"""Tools as data: a definition from docs/toolsets.json (name, description, input schema) and a run
that never raises. Whatever fails (bad arguments, a sandbox error) comes back as an error result a
model can act on, as in the TypeScript SDK's ``defineTool``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence

from .._pydantic import BaseModel, ValidationError, validate

from ..errors import WarrenError
from ._definitions import TOOL_SETS, ToolDefinition

#: A tool's error result: ``{"isError": True, "code", "error", "suggestion"?, ...}``.
ToolError = Dict[str, Any]


def tool_error(code: str, error: str, suggestion: Optional[str] = None, **extra: Any) -> ToolError:
    """Makes an error result."""
    result: ToolError = {"isError": True, "code": code, "error": error}
    if suggestion is not None:
        result["suggestion"] = suggestion
    result.update(extra)
    return result


def is_tool_error(value: Any) -> bool:
    return isinstance(value, dict) and value.get("isError") is True


def tool_error_from(err: BaseException) -> ToolError:
    """Turns anything a sandbox call raised into an error result, keeping the SDK error's code and suggestion."""
    if isinstance(err, ToolFailure):
        return err.result
    if isinstance(err, WarrenError):
        return tool_error(err.code, err.message, err.suggestion)
    return tool_error("INTERNAL", str(err))


class ToolFailure(Exception):
    """Raised inside a tool to end it with an error result."""

    def __init__(self, result: ToolError) -> None:
        super().__init__(result.get("error"))
        self.result = result


def error_text(error: ToolError) -> str:
    """Text form of an error result: ``Error: ...`` and the suggestion."""
    return f"Error: {error['error']}\n{error['suggestion']}" if error.get("suggestion") else f"Error: {error['error']}"


def js_number(value: Any) -> str:
    """A number as JavaScript prints it (``2`` for 2.0), so texts match the TypeScript tool sets'."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _js_values(value: Any) -> Any:
    """Values as JavaScript holds them: a whole float is a number like any other (``2``, not ``2.0``)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _js_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_js_values(v) for v in value]
    return value


def to_json(value: Any) -> str:
    """``JSON.stringify(value, null, 2)``, as the TypeScript tool sets serialise results."""
    return json.dumps(_js_values(value), indent=2, ensure_ascii=False)


def utf16_length(text: str) -> int:
    """``text.length`` in JavaScript: UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


Execute = Callable[[BaseModel], Awaitable[Any]]


@dataclass
class Tool:
    """One tool: data an LLM API can be given (``name``, ``description``, ``json_schema``) and a ``run``
    that never raises (``asyncio`` cancellation aside)."""

    definition: ToolDefinition
    execute: Execute
    #: Turns a failure into this tool's error result; it gets the error and the arguments as given.
    on_error: Callable[[ToolError, Any], ToolError] = lambda error, args: error
    render: Optional[Callable[[Any], str]] = None

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def description(self) -> str:
        return self.definition.description

    @property
    def json_schema(self) -> Dict[str, Any]:
        """The JSON Schema of the arguments, the TypeScript tool's own."""
        return self.definition.json_schema

    @property
    def output(self) -> str:
        return self.definition.output

    async def run(self, args: Any) -> Any:
        """Checks the arguments, runs the tool, and returns its result or an error result."""
        try:
            parsed = validate(self.definition.input, args if args is not None else {})
        except ValidationError as err:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}" for e in err.errors())
            return self.on_error(
                tool_error("INVALID_ARGUMENTS", f"Invalid arguments for {self.name}: {problems}.", f"Call {self.name} again with arguments that match its input schema."),
                args,
            )
        try:
            result = await self.execute(parsed)
        except (WarrenError, ToolFailure) as err:
            return self.on_error(tool_error_from(err), args)
        except Exception as err:  # noqa: BLE001 - a tool reports, never raises
            return self.on_error(tool_error_from(err), args)
        return self.on_error(result, args) if is_tool_error(result) else result

    def to_text(self, result: Any) -> str:
        """The text a model reads for a result of this tool."""
        if self.render is not None:
            return self.render(result)
        if is_tool_error(result):
            return error_text(result)
        if isinstance(result, str) and self.output == "text":
            return result
        return to_json(result)


@dataclass
class ToolCallOutcome:
    tool: Optional[Tool]
    result: Any
    text: str
    is_error: bool


async def run_tool_call(tools: Sequence[Tool], name: str, args: Any) -> ToolCallOutcome:
    """Runs one call by tool name; an unknown name is an error result that lists the tools there are."""
    tool = next((t for t in tools if t.name == name), None)
    if tool is None:
        result = tool_error("UNKNOWN_TOOL", f"There is no tool named '{name}'.", f"Call one of: {', '.join(t.name for t in tools)}.")
        return ToolCallOutcome(None, result, f"Error: {result['error']}\n{result['suggestion']}", True)
    result = await tool.run(args)
    return ToolCallOutcome(tool, result, tool.to_text(result), is_tool_error(result))


def definitions(tool_set: str) -> Dict[str, ToolDefinition]:
    """A seed tool set's definitions by tool name, from docs/toolsets.json."""
    return {d.name: d for d in TOOL_SETS[tool_set]}


def in_order(tool_set: str, tools: Dict[str, Tool]) -> List[Tool]:
    """The tools in the seed's order; every definition must have its implementation."""
    names = [d.name for d in TOOL_SETS[tool_set]]
    missing = set(names) ^ set(tools)
    if missing:
        raise RuntimeError(f"The {tool_set} tool set's implementations and definitions differ: {sorted(missing)}")
    return [tools[n] for n in names]
