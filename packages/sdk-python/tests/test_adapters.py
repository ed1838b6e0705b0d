"""The tool sets in the shapes LLM APIs take, and the MCP server driven by the reference MCP client."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from warren import AsyncSandbox
from warren.tools import TOOL_SETS, builtin_tools
from warren.tools.adapters import dispatch_anthropic_tool_use, dispatch_openai_tool_call, to_anthropic_tools, to_mcp_tools, to_openai_tools

PACKAGE = Path(__file__).resolve().parent.parent
NO_TARGET = type("Target", (), {"files": None, "commands": None})()


def test_the_openai_anthropic_and_mcp_shapes_carry_the_typescript_definitions() -> None:
    tools = builtin_tools(NO_TARGET)
    first = TOOL_SETS["builtin"][0]
    assert to_openai_tools(tools)[0] == {"type": "function", "function": {"name": first.name, "description": first.description, "parameters": first.json_schema}}
    assert to_openai_tools(tools, api="responses")[0] == {
        "type": "function",
        "name": first.name,
        "description": first.description,
        "parameters": first.json_schema,
        "strict": False,
    }
    assert to_anthropic_tools(tools)[0] == {"name": first.name, "description": first.description, "input_schema": first.json_schema}
    assert [t["name"] for t in to_mcp_tools(tools)] == ["read_file", "write_file", "edit_file", "bash"]


async def test_openai_calls_with_arguments_that_are_not_json_answer_with_an_error_the_model_reads() -> None:
    tools = builtin_tools(NO_TARGET)
    chat = await dispatch_openai_tool_call(tools, {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{oops"}})
    assert chat["role"] == "tool" and chat["tool_call_id"] == "c1"
    assert chat["content"].startswith("Error: The arguments of bash are not valid JSON (")
    responses = await dispatch_openai_tool_call(tools, {"type": "function_call", "call_id": "r1", "name": "nope", "arguments": ""})
    assert responses == {
        "type": "function_call_output",
        "call_id": "r1",
        "output": "Error: There is no tool named 'nope'.\nCall one of: read_file, write_file, edit_file, bash.",
    }
    anthropic = await dispatch_anthropic_tool_use(tools, {"type": "tool_use", "id": "t1", "name": "bash", "input": {}})
    assert anthropic["is_error"] is True and anthropic["tool_use_id"] == "t1"


async def test_the_mcp_server_answers_the_reference_mcp_client(controller: Any) -> None:
    async with AsyncSandbox.create(base_url=controller.url, api_key=controller.api_key, policy={"root": controller.root}) as sandbox:
        server_args = ["--sandbox", sandbox.id, "--token", sandbox.token, "--url", controller.url, "--toolset", "builtin"]
        calls = [
            {"name": "write_file", "arguments": {"path": "mcp-py/a.txt", "content": "hi\n"}},
            {"name": "bash", "arguments": {"command": "cat mcp-py/a.txt; exit 4"}},
            {"name": "read_file", "arguments": {"path": "mcp-py/missing.txt"}},
        ]
        proc = await asyncio.create_subprocess_exec(
            "node",
            str(PACKAGE / "tests" / "mcp_client.mjs"),
            sys.executable,
            json.dumps(server_args),
            json.dumps(calls),
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(PACKAGE)},
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0
        answer = json.loads(out.decode().strip().splitlines()[-1])
        assert answer["server"]["name"] == "warren-python"
        assert [t["name"] for t in answer["tools"]] == ["read_file", "write_file", "edit_file", "bash"]
        assert answer["tools"][3]["inputSchema"] == TOOL_SETS["builtin"][3].json_schema
        written, ran, missing = answer["results"]
        assert written == {"content": [{"type": "text", "text": "Wrote 3 bytes to mcp-py/a.txt"}]}
        assert ran == {"content": [{"type": "text", "text": "hi\n[exit code: 4]"}]}
        assert missing["isError"] is True and missing["content"][0]["text"].startswith("Error: No such file: 'mcp-py/missing.txt'.")


async def test_the_mcp_server_creates_a_sandbox_without_sandbox_and_removes_it_when_the_client_goes(controller: Any) -> None:
    if controller.engine != "docker":
        return  # a created sandbox has the controller's default policy, which names no folder of the in-process daemons
    label = f"mcp-created-{os.getpid()}"
    server_args = ["--toolset", "builtin", "--url", controller.url, "--api-key", controller.api_key, "--ttl", "5m", "--label", f"test={label}"]
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(PACKAGE / "tests" / "mcp_client.mjs"),
        sys.executable,
        json.dumps(server_args),
        json.dumps([{"name": "bash", "arguments": {"command": "echo made"}}]),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(PACKAGE)},
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0
    answer = json.loads(out.decode().strip().splitlines()[-1])
    assert answer["results"] == [{"content": [{"type": "text", "text": "made\n"}]}]
    for _ in range(50):  # the server removes its sandbox as the client closes its stdin
        left = await AsyncSandbox.list(labels={"test": label}, base_url=controller.url, api_key=controller.api_key)
        if all(s.state == "gone" for s in left):
            break
        await asyncio.sleep(0.2)
    assert all(s.state == "gone" for s in left)
