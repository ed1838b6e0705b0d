"""The OpenAI Agents SDK and LangChain adapters (warren.tools.frameworks).

Neither framework can be installed on the project's machines (both need pydantic 2, which Debian 12
does not ship, and PyPI is not reachable here), so these tests inject STAND-IN modules into
``sys.modules``: small classes that reproduce exactly the constructor signatures the adapters use,
as checked against the frameworks' published sources (openai-agents 0.17.3, ``src/agents/tool.py``
``FunctionTool``; langchain-core 1.x, ``langchain_core/tools/structured.py``
``StructuredTool.from_function``, with a dict ``args_schema`` passed through to the coroutine as
keyword arguments). They are not the frameworks: they check the adapters call them as the real
ones are called, and that what the tools answer is the Python tool set's own text. The sandbox
behind the tools is a real one, on the session's real controller."""

from __future__ import annotations

import dataclasses
import json
import sys
import types
from typing import Any, Awaitable, Callable, Dict, Iterator, List, Optional

import pytest

from warren import FrameworkNotInstalledError, NotSupportedError, AsyncSandbox
from warren.tools import TOOL_SETS, builtin_tools, run_tool_call
from warren.tools.frameworks import to_langchain_tools, to_openai_agents_tools

NO_TARGET = type("Target", (), {"files": None, "commands": None})()


# ---- the stand-ins (not the frameworks; see the module's docstring) -----------------------------


@dataclasses.dataclass
class StandInFunctionTool:
    """Stand-in for ``agents.FunctionTool`` (openai-agents 0.17.3): the same leading dataclass fields in the same order."""

    name: str
    description: str
    params_json_schema: Dict[str, Any]
    on_invoke_tool: Callable[[Any, str], Awaitable[Any]]
    strict_json_schema: bool = True
    is_enabled: Any = True

    def __post_init__(self) -> None:
        # The real class rewrites the schema into strict form when this is True (ensure_strict_json_schema).
        if self.strict_json_schema:
            raise AssertionError("the adapter must pass strict_json_schema=False: the seeds' optional parameters stay optional")


class StandInStructuredTool:
    """Stand-in for ``langchain_core.tools.StructuredTool`` (langchain-core 1.x): ``from_function``'s
    signature, and ``ainvoke`` passing a dict input to the coroutine as keyword arguments, as the
    real tool does when ``args_schema`` is a JSON-schema dict."""

    def __init__(self, name: str, description: str, args_schema: Any, coroutine: Any, func: Any, return_direct: bool, response_format: str) -> None:
        self.name, self.description, self.args_schema = name, description, args_schema
        self.coroutine, self.func, self.return_direct, self.response_format = coroutine, func, return_direct, response_format

    @classmethod
    def from_function(
        cls,
        func: Optional[Callable[..., Any]] = None,
        coroutine: Optional[Callable[..., Awaitable[Any]]] = None,
        name: Optional[str] = None,
        description: Optional[str] = None,
        return_direct: bool = False,
        args_schema: Any = None,
        infer_schema: bool = True,
        *,
        response_format: str = "content",
        parse_docstring: bool = False,
        error_on_invalid_docstring: bool = False,
        **kwargs: Any,
    ) -> "StandInStructuredTool":
        if func is None and coroutine is None:
            raise ValueError("Function and/or coroutine must be provided")
        if args_schema is not None and not isinstance(args_schema, dict):
            raise TypeError(f"Invalid args_schema: expected BaseModel or dict, got {args_schema}")
        if args_schema is None:
            raise AssertionError("the adapter must pass the tool's JSON schema, not let LangChain infer one")
        source = func or coroutine
        assert source is not None
        return cls(name or source.__name__, description if description is not None else (source.__doc__ or ""), args_schema, coroutine, func, return_direct, response_format)

    async def ainvoke(self, input: Dict[str, Any]) -> Any:
        assert self.coroutine is not None
        return await self.coroutine(**input)


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    agents = types.ModuleType("agents")
    agents.FunctionTool = StandInFunctionTool  # type: ignore[attr-defined]
    core = types.ModuleType("langchain_core")
    core_tools = types.ModuleType("langchain_core.tools")
    core_tools.StructuredTool = StandInStructuredTool  # type: ignore[attr-defined]
    core.tools = core_tools  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "agents", agents)
    monkeypatch.setitem(sys.modules, "langchain_core", core)
    monkeypatch.setitem(sys.modules, "langchain_core.tools", core_tools)
    yield


# ---- the tests ---------------------------------------------------------------------------------


def test_a_missing_framework_is_a_typed_error_naming_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes the import fail, whether or not the framework is installed.
    monkeypatch.setitem(sys.modules, "agents", None)
    monkeypatch.setitem(sys.modules, "langchain_core", None)
    monkeypatch.setitem(sys.modules, "langchain_core.tools", None)
    tools = builtin_tools(NO_TARGET)
    with pytest.raises(FrameworkNotInstalledError) as openai_err:
        to_openai_agents_tools(tools)
    assert "pip install openai-agents" in openai_err.value.message
    assert openai_err.value.details == {"package": "openai-agents", "module": "agents"}
    assert openai_err.value.code == "NOT_SUPPORTED" and isinstance(openai_err.value, NotSupportedError) and isinstance(openai_err.value, ImportError)
    with pytest.raises(ImportError, match="pip install langchain-core"):
        to_langchain_tools(tools)


def test_both_carry_the_typescript_names_descriptions_and_schemas(stand_ins: None) -> None:
    for set_name, make in [("builtin", builtin_tools)]:
        expected = TOOL_SETS[set_name]
        tools = make(NO_TARGET)
        agents_tools = to_openai_agents_tools(tools)
        lc_tools = to_langchain_tools(tools)
        assert [(t.name, t.description, t.params_json_schema) for t in agents_tools] == [(d.name, d.description, d.json_schema) for d in expected]
        assert [(t.name, t.description, t.args_schema) for t in lc_tools] == [(d.name, d.description, d.json_schema) for d in expected]
        assert all(t.strict_json_schema is False for t in agents_tools)
        assert all(t.func is None and t.coroutine is not None and t.response_format == "content" for t in lc_tools)
        # The schemas are copies: a framework that rewrites one does not change the tool set's.
        agents_tools[0].params_json_schema["title"] = "changed"
        assert tools[0].json_schema == expected[0].json_schema and "title" not in expected[0].json_schema


async def test_calls_answer_the_python_tool_sets_texts_on_a_real_sandbox(controller: Any, stand_ins: None) -> None:
    async with AsyncSandbox.create(base_url=controller.url, api_key=controller.api_key, policy={"root": controller.root}) as sandbox:
        tools = builtin_tools(sandbox)
        agents_tools = {t.name: t for t in to_openai_agents_tools(tools)}
        lc_tools = {t.name: t for t in to_langchain_tools(tools)}
        calls: List[Dict[str, Any]] = [
            {"name": "write_file", "arguments": {"path": "fw-py/a.txt", "content": "hi\n"}},
            {"name": "bash", "arguments": {"command": "cat fw-py/a.txt; exit 4"}},
            {"name": "read_file", "arguments": {"path": "fw-py/missing.txt"}},
            {"name": "edit_file", "arguments": {"path": "fw-py/a.txt"}},  # missing required arguments
        ]
        for call in calls:
            direct = (await run_tool_call(tools, call["name"], call["arguments"])).text
            via_agents = await agents_tools[call["name"]].on_invoke_tool(None, json.dumps(call["arguments"]))
            via_langchain = await lc_tools[call["name"]].ainvoke(call["arguments"])
            assert via_agents == direct, call
            assert via_langchain == direct, call
        # The texts the TypeScript tool set gives for the same calls (test_adapters.py checks them over MCP too).
        assert await agents_tools["write_file"].on_invoke_tool(None, json.dumps(calls[0]["arguments"])) == "Wrote 3 bytes to fw-py/a.txt"
        assert await lc_tools["bash"].ainvoke(calls[1]["arguments"]) == "hi\n[exit code: 4]"
        missing = await lc_tools["read_file"].ainvoke(calls[2]["arguments"])
        assert missing.startswith("Error: No such file: 'fw-py/missing.txt'.")
        bad_args = await agents_tools["edit_file"].on_invoke_tool(None, json.dumps(calls[3]["arguments"]))
        assert bad_args.startswith("Error: ")
        # A model's arguments that are not JSON come back as an error text, as dispatch_openai_tool_call answers.
        not_json = await agents_tools["bash"].on_invoke_tool(None, "{oops")
        assert not_json.startswith("Error: The arguments of bash are not valid JSON (")
        assert (await sandbox.files.read("fw-py/a.txt")) == "hi\n"
