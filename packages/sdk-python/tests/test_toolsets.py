"""The seed tool sets against a real controller, replaying the transcripts the TypeScript tool sets
replay (test/fixtures/toolsets, run by test/integration/toolsets-transcripts.test.ts): the same
calls must give a model the same texts, whichever SDK runs them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

from warren import Sandbox
from warren.tools import TOOL_SETS, Tool, builtin_tools, codin_tools, filesystem_tools, is_tool_error, partial_read_tools, run_tool_call

FIXTURES = Path(__file__).resolve().parents[3] / "test" / "fixtures" / "toolsets"
TRANSCRIPTS = sorted(FIXTURES.glob("*.json"))
SETS: Dict[str, Callable[[Any], List[Tool]]] = {"builtin": builtin_tools, "codin": codin_tools, "filesystem": filesystem_tools, "partialRead": partial_read_tools}


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[p.name for p in TRANSCRIPTS])
async def test_transcripts_shared_with_the_typescript_tool_sets(controller: Any, path: Path) -> None:
    transcript = json.loads(path.read_text())
    async with Sandbox.create(base_url=controller.url, api_key=controller.api_key, policy={"root": controller.root}) as sandbox:
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
