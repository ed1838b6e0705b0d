"""The seed tool sets against a real controller, replaying the transcripts the TypeScript tool sets
replay (test/fixtures/toolsets, run by test/integration/toolsets-transcripts.test.ts): the same
calls must give a model the same texts, whichever SDK runs them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

from warren import AsyncSandbox
from warren.tools import TOOL_SETS, Tool, builtin_tools, codin_tools, filesystem_tools, is_tool_error, partial_read_tools, run_tool_call, toolsmith_tools

FIXTURES = Path(__file__).resolve().parents[3] / "test" / "fixtures" / "toolsets"
TRANSCRIPTS = sorted(FIXTURES.glob("*.json"))
SETS: Dict[str, Callable[[Any], List[Tool]]] = {"builtin": builtin_tools, "codin": codin_tools, "filesystem": filesystem_tools, "partialRead": partial_read_tools, "toolsmith": toolsmith_tools}


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[p.name for p in TRANSCRIPTS])
async def test_transcripts_shared_with_the_typescript_tool_sets(controller: Any, path: Path) -> None:
    transcript = json.loads(path.read_text())
    async with AsyncSandbox.create(base_url=controller.url, api_key=controller.api_key, policy={"root": controller.root}) as sandbox:
        await sandbox.commands.run(f"rm -rf {transcript['folder']}")  # the local controller's sandboxes share one root
        tools = SETS[transcript["toolSet"]](sandbox)
        for file, content in transcript.get("files", {}).items():
            await sandbox.files.write(file, content)
        for step in transcript["steps"]:
            outcome = await run_tool_call(tools, step["tool"], step["args"])
            seen = {"tool": step["tool"], "isError": outcome.is_error, "text": outcome.text}
            if "text" in step:
                assert seen == {"tool": step["tool"], "isError": step.get("isError", False), "text": step["text"].replace("{root}", controller.root)}
            else:
                assert (seen["tool"], seen["isError"]) == (step["tool"], step.get("isError", False))
            if "textStartsWith" in step:
                assert (step["tool"], outcome.text[: len(step["textStartsWith"])]) == (step["tool"], step["textStartsWith"])
            if "code" in step:
                assert (step["tool"], outcome.result["code"] if is_tool_error(outcome.result) else None) == (step["tool"], step["code"])


def test_every_tool_set_is_offered_with_the_typescript_definitions() -> None:
    document = json.loads((FIXTURES.parents[2] / "docs" / "toolsets.json").read_text())
    assert list(TOOL_SETS) == list(document)
    for name, make in SETS.items():
        tools = make(type("Target", (), {"files": None, "commands": None})())
        assert [(t.name, t.description, t.output, t.json_schema) for t in tools] == [
            (d["name"], d["description"], d["output"], d["inputSchema"]) for d in document[name]
        ]


async def test_a_bad_argument_is_an_error_result_not_an_exception() -> None:
    tools = builtin_tools(type("Target", (), {"files": None, "commands": None})())
    outcome = await run_tool_call(tools, "bash", {"command": "ls", "extra": 1})
    assert outcome.is_error and outcome.result["code"] == "INVALID_ARGUMENTS"
    assert outcome.text.startswith("Error: Invalid arguments for bash: extra:") and outcome.text.endswith("Call bash again with arguments that match its input schema.")


def test_pytest_summaries_count_and_round_as_the_typescript_ones() -> None:
    from warren.tools import summarise_failures, summarise_pytest
    from warren.tools.tool import to_json

    tests = [{"name": "t.py::a", "status": "passed", "message": ""}, {"name": "t.py::b", "status": "passed", "message": ""}]
    tests.append({"name": "t.py::c", "status": "error", "message": "boom"})
    summary = summarise_pytest("./sandbox/ds", {"exit_code": 1, "output": "log", "tests": tests})
    assert (summary["passed"], summary["failed"], summary["total"], summary["success_rate"], summary["error_log"]) == (2, 1, 3, 66.67, "log")
    all_passed = summarise_pytest("d", {"exit_code": 0, "output": "log", "tests": tests[:2]})
    assert '"success_rate": 100,' in to_json(all_passed) and all_passed["error_log"] == ""
    assert summarise_failures({"exit_code": 5, "output": "none", "tests": []}) == {"failed_count": 0, "failing_tests": [], "error_log": ""}


async def test_toolsmith_logs_every_operation(controller: Any) -> None:
    async with AsyncSandbox.create(base_url=controller.url, api_key=controller.api_key, policy={"root": controller.root}) as sandbox:
        log: List[Dict[str, Any]] = []
        tools = toolsmith_tools(sandbox, on_log=log.append)
        await run_tool_call(tools, "write_file", {"file_path": "./sandbox/tx-log/a.py", "content": "é\n"})
        await run_tool_call(tools, "read_file", {"file_path": "./sandbox/tx-log/missing.py"})
        assert [(e["action"], e["operation"], e["status"]) for e in log] == [("FIX", "write_file", "success"), ("ANALYSIS", "read_file", "error")]
        assert log[0]["details"] == {"file_path": "./sandbox/tx-log/a.py", "bytes_written": 3}
        assert log[1]["details"]["error"].startswith("FileNotFoundError: ") and log[1]["timestamp"].endswith("Z")
