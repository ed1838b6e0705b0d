"""A tool set as the tool objects of agent frameworks: the OpenAI Agents SDK (``agents.FunctionTool``)
and LangChain (``langchain_core.tools.StructuredTool``). Each is a thin layer over :class:`Tool`:
the same names, descriptions and JSON schemas (the TypeScript tool sets'), and the text a tool
returns is ``run_tool_call(...).text``, the same text the other adapters and the MCP server give.

The frameworks are imported when an adapter is called, never by ``import warren``. Both need
pydantic 2, whose own API the SDK then uses (``warren._pydantic``). A missing framework raises
:class:`~warren.errors.FrameworkNotInstalledError` naming the package to install.

Checked against the frameworks' published sources: ``agents.FunctionTool`` of openai-agents 0.17
(``name``, ``description``, ``params_json_schema``, ``on_invoke_tool(ctx, args_json) -> Awaitable``,
``strict_json_schema``) and ``StructuredTool.from_function`` of langchain-core 1.x (``coroutine``,
``name``, ``description``, ``args_schema`` as a JSON-schema ``dict``, whose arguments reach the
coroutine as keyword arguments).

Example::

    from agents import Agent, Runner
    from warren.tools import builtin_tools
    from warren.tools.frameworks import to_openai_agents_tools

    agent = Agent(name="coder", instructions="...", tools=to_openai_agents_tools(builtin_tools(sandbox)))
    result = await Runner.run(agent, "Make the tests pass")
"""

from __future__ import annotations

import copy
import importlib
from typing import Any, Awaitable, Callable, List, Sequence

from ..errors import FrameworkNotInstalledError
from .adapters import json_arguments_text
from .tool import Tool, run_tool_call


def _framework(module: str, package: str, framework: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise FrameworkNotInstalledError(
            f"{framework} is not installed (the module '{module}' cannot be imported: {err}). "
            f"Install it with `pip install {package}` (it needs pydantic 2) and call again; "
            "warren.tools.adapters.to_openai_tools and the MCP server (python3 -m warren.mcp) work without it.",
            details={"package": package, "module": module},
        ) from err


def to_openai_agents_tools(tools: Sequence[Tool]) -> List[Any]:
    """The tool set as OpenAI Agents SDK tools (``agents.FunctionTool``), for ``Agent(tools=...)``.

    Strict mode is off (``strict_json_schema=False``): optional parameters stay optional, as the
    seeds define them, and the schema is the TypeScript one unchanged. A failing call returns the
    error text (``Error: ...`` with what to do next) for the model to read; it never raises.
    """
    agents = _framework("agents", "openai-agents", "The OpenAI Agents SDK")

    def invoker(tool: Tool) -> Callable[[Any, str], Awaitable[str]]:
        async def on_invoke_tool(ctx: Any, args_json: str) -> str:
            return await json_arguments_text([tool], tool.name, args_json)

        return on_invoke_tool

    return [
        agents.FunctionTool(
            name=tool.name,
            description=tool.description,
            params_json_schema=copy.deepcopy(tool.json_schema),
            on_invoke_tool=invoker(tool),
            strict_json_schema=False,
        )
        for tool in tools
    ]


def to_langchain_tools(tools: Sequence[Tool]) -> List[Any]:
    """The tool set as LangChain tools (``StructuredTool``), for ``create_agent(tools=...)``,
    ``bind_tools`` or LangGraph's ``ToolNode``. They are async: call them with ``ainvoke``.

    ``args_schema`` is the tool's JSON schema as a ``dict`` (LangChain passes the model's
    arguments through unchanged), so the Python tool checks them and a bad argument is an error
    text the model reads, as with every other adapter.
    """
    tools_module = _framework("langchain_core.tools", "langchain-core", "LangChain")

    def coroutine_for(tool: Tool) -> Callable[..., Awaitable[str]]:
        async def run(**kwargs: Any) -> str:
            return (await run_tool_call([tool], tool.name, kwargs)).text

        run.__name__ = tool.name
        run.__doc__ = tool.description
        return run

    return [
        tools_module.StructuredTool.from_function(
            coroutine=coroutine_for(tool),
            name=tool.name,
            description=tool.description,
            args_schema=copy.deepcopy(tool.json_schema),
        )
        for tool in tools
    ]


__all__ = ["to_langchain_tools", "to_openai_agents_tools"]
