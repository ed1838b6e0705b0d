"""A tool set in the shapes LLM APIs and MCP clients take, and their calls dispatched back to it;
the same shapes and texts as packages/sdk/src/tools/adapters.ts."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Sequence

from .tool import Tool, run_tool_call, tool_error


def to_openai_tools(tools: Sequence[Tool], *, api: str = "chat") -> List[Dict[str, Any]]:
    """The OpenAI ``tools`` parameter: Chat Completions shape by default, ``api="responses"`` for the Responses API.
    Strict mode is off: optional parameters stay optional, as the seeds define them."""
    if api == "responses":
        return [{"type": "function", "name": t.name, "description": t.description, "parameters": t.json_schema, "strict": False} for t in tools]
    return [{"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.json_schema}} for t in tools]


def to_anthropic_tools(tools: Sequence[Tool]) -> List[Dict[str, Any]]:
    """The Anthropic Messages API ``tools`` parameter: ``{name, description, input_schema}``."""
    return [{"name": t.name, "description": t.description, "input_schema": t.json_schema} for t in tools]


def to_mcp_tools(tools: Sequence[Tool]) -> List[Dict[str, Any]]:
    """The tool set as an MCP server lists it (``tools/list``)."""
    return [{"name": t.name, "description": t.description, "inputSchema": t.json_schema} for t in tools]


async def call_mcp_tool(tools: Sequence[Tool], name: str, args: Any) -> Dict[str, Any]:
    """Answers an MCP ``tools/call``: the tool's text as one text item, ``isError`` when it failed."""
    outcome = await run_tool_call(tools, name, args if args is not None else {})
    result: Dict[str, Any] = {"content": [{"type": "text", "text": outcome.text}]}
    if outcome.is_error:
        result["isError"] = True
    return result


async def json_arguments_text(tools: Sequence[Tool], name: str, raw: str) -> str:
    """Runs the tool ``name`` with arguments given as a JSON text, as a model sends them, and
    returns the text the model reads; arguments that are not a JSON object are an error it reads."""
    try:
        args = json.loads(raw) if raw.strip() != "" else {}
    except ValueError as err:
        error = tool_error("INVALID_ARGUMENTS", f"The arguments of {name} are not valid JSON ({err}).", f"Call {name} again with a JSON object that matches its schema.")
        return f"Error: {error['error']}\n{error['suggestion']}"
    return (await run_tool_call(tools, name, args)).text


async def dispatch_openai_tool_call(tools: Sequence[Tool], call: Dict[str, Any]) -> Dict[str, Any]:
    """Runs an OpenAI function call and answers in the shape the same API expects back: a Chat
    Completions ``tool_call`` gets a ``{"role": "tool", ...}`` message, a Responses ``function_call``
    item a ``{"type": "function_call_output", ...}`` item. Arguments that are not JSON are an error the model reads."""
    chat = "function" in call
    name = call["function"]["name"] if chat else call["name"]
    raw = call["function"]["arguments"] if chat else call["arguments"]
    text = await json_arguments_text(tools, name, raw)
    if chat:
        return {"role": "tool", "tool_call_id": call["id"], "content": text}
    return {"type": "function_call_output", "call_id": call["call_id"], "output": text}


async def dispatch_anthropic_tool_use(tools: Sequence[Tool], block: Dict[str, Any]) -> Dict[str, Any]:
    """Runs an Anthropic ``tool_use`` block and answers with its ``tool_result`` block."""
    outcome = await run_tool_call(tools, block["name"], block.get("input"))
    result: Dict[str, Any] = {"type": "tool_result", "tool_use_id": block["id"], "content": outcome.text}
    if outcome.is_error:
        result["is_error"] = True
    return result
