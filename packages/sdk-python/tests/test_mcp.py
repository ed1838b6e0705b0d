"""The MCP server's command line: the flags of ``warren mcp`` (packages/cli), with the same meaning."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from warren.mcp import DEFAULT_TOOL_SET, TOOL_SETS, parse_args, parser


def test_takes_the_flags_of_warren_mcp() -> None:
    visible = sorted(
        flag
        for action in parser()._actions
        if action.help != argparse.SUPPRESS
        for flag in action.option_strings
        if flag.startswith("--")
    )
    assert visible == ["--api-key", "--help", "--image", "--label", "--sandbox", "--token", "--toolset", "--ttl", "--url"]
    assert list(TOOL_SETS) == ["codin", "filesystem", "toolsmith", "partial_read", "builtin"]
    assert DEFAULT_TOOL_SET == "builtin"


def test_creates_a_sandbox_without_sandbox_and_reads_ttl_and_labels_as_warren_does() -> None:
    args = parse_args(["--toolset", "codin", "--image", "python:3.12-slim", "--ttl", "2h", "--label", "owner=me", "--label", "k=a=b", "--url", "http://h:1", "--api-key", "wk_x"])
    assert (args.toolset, args.sandbox, args.image, args.ttl, args.label, args.url, args.api_key) == (
        "codin",
        None,
        "python:3.12-slim",
        7200,
        [("owner", "me"), ("k", "a=b")],
        "http://h:1",
        "wk_x",
    )
    assert parse_args([]).toolset == "builtin"
    assert parse_args(["--ttl", "600"]).ttl == 600


def test_serves_an_existing_sandbox_with_its_token() -> None:
    args = parse_args(["--sandbox", "sb1", "--token", "tok", "--toolset", "filesystem"])
    assert (args.sandbox, args.token, args.toolset) == ("sb1", "tok", "filesystem")


def test_old_flag_names_still_work_with_a_notice(capsys: Any) -> None:
    args = parse_args(["--sandbox", "sb1", "--tool-set", "partialRead", "--base-url", "http://h:1"])
    assert (args.toolset, args.url) == ("partial_read", "http://h:1")
    err = capsys.readouterr().err
    assert "--tool-set is deprecated" in err and "use --toolset" in err
    assert "--base-url is deprecated" in err and "use --url" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--toolset", "nope"],
        ["--ttl", "soon"],
        ["--label", "novalue"],
        ["--token", "tok"],
        ["--sandbox", "sb1", "--image", "alpine"],
        ["--sandbox", "sb1", "--ttl", "10m"],
    ],
)
def test_a_usage_error_exits_2_as_warren_does(argv: Any, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip()
