"""An MCP server over stdio that offers one seed tool set bound to one sandbox, for MCP clients
(Claude Desktop, IDEs, agent frameworks with MCP support).

    python3 -m warren.mcp [--toolset builtin] [--sandbox ID [--token TOKEN]] [--image I] [--ttl 2h]
                          [--label k=v]... [--url URL] [--api-key KEY]

The flags are those of ``warren mcp`` (packages/cli), with the same meaning: without ``--sandbox``
it creates a sandbox (``--image``, ``--ttl``, ``--label``), keeps it alive while the client is
connected and removes it when the client goes away; with ``--sandbox`` it serves that one and leaves
it running. ``--tool-set`` and ``--base-url``, the old names, still work for one minor version.

It speaks MCP's JSON-RPC over newline-delimited stdio: ``initialize``, ``ping``, ``tools/list`` and
``tools/call`` (a tool's failure is a result with ``isError``, as MCP wants). Nothing but protocol
messages goes to stdout; notes go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence

from .sandbox import AsyncSandbox
from .tools import builtin_tools, codin_tools, filesystem_tools, partial_read_tools, toolsmith_tools
from .tools.adapters import call_mcp_tool, to_mcp_tools
from .tools.tool import Tool

#: The MCP revisions this server speaks, newest first; a client's is echoed when it is one of them.
PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
#: The tool sets ``--toolset`` serves, by the names ``warren mcp --toolset`` uses.
TOOL_SETS: Dict[str, Callable[[Any], List[Tool]]] = {
    "codin": codin_tools,
    "filesystem": filesystem_tools,
    "toolsmith": toolsmith_tools,
    "partial_read": partial_read_tools,
    "builtin": builtin_tools,
}
#: Names ``--toolset`` still takes from before it matched ``warren mcp``.
TOOL_SET_ALIASES = {"partialRead": "partial_read"}
#: The tool set served when ``--toolset`` is not given, in both servers.
DEFAULT_TOOL_SET = "builtin"


async def handle(tools: Sequence[Tool], message: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """Answers one JSON-RPC message (None for notifications)."""
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        return None  # a notification (notifications/initialized, cancelled): nothing to answer
    params = message.get("params") or {}
    if method == "initialize":
        asked = params.get("protocolVersion")
        result: Any = {
            "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "warren-python", "version": "0.1.0"},
        }
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        result = {"tools": to_mcp_tools(tools)}
    elif method == "tools/call":
        result = await call_mcp_tool(tools, str(params.get("name")), params.get("arguments"))
    else:
        return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"Method not found: {method}"}}
    return {"jsonrpc": "2.0", "id": ident, "result": result}


async def serve(tools: Sequence[Tool], reader: asyncio.StreamReader, write: Callable[[bytes], None]) -> None:
    """Serves MCP over a line stream until it ends."""
    while True:
        line = await reader.readline()
        if not line:
            return
        try:
            message = json.loads(line)
        except ValueError:
            write(json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}).encode() + b"\n")
            continue
        answer = await handle(tools, message) if isinstance(message, dict) else None
        if answer is not None:
            write(json.dumps(answer, ensure_ascii=False).encode() + b"\n")


def parse_duration(text: str) -> int:
    """Seconds from ``600`` or a number with ``s``, ``m``, ``h`` or ``d`` (``10m``), as ``warren`` reads ``--ttl``."""
    match = re.fullmatch(r"(\d+)([smhd]?)", text.strip())
    if not match or int(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a duration: write seconds (600) or a number with s, m, h or d (10m, 2h)")
    return int(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


def parse_label(text: str) -> "tuple[str, str]":
    """One ``--label k=v``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"'{text}' is not KEY=VALUE (for example --label owner=me)")
    return key, value


def parse_tool_set(text: str) -> str:
    """A ``--toolset`` name, old spellings mapped to the names ``warren mcp`` uses."""
    name = TOOL_SET_ALIASES.get(text, text)
    if name not in TOOL_SETS:
        raise argparse.ArgumentTypeError(f"'{text}' is not a tool set; choose one of {', '.join(TOOL_SETS)}")
    return name


def parser() -> argparse.ArgumentParser:
    """The command line, flag for flag the one of ``warren mcp``."""
    p = argparse.ArgumentParser(
        prog="python3 -m warren.mcp",
        description="Serve one Warren tool set over MCP (stdio), for a sandbox it creates (removed when the client goes away) or an existing one (--sandbox).",
    )
    p.add_argument("--toolset", type=parse_tool_set, default=DEFAULT_TOOL_SET, metavar="NAME", help=f"the tool set to serve: {', '.join(TOOL_SETS)} (default {DEFAULT_TOOL_SET})")
    p.add_argument("--tool-set", dest="toolset", type=parse_tool_set, help=argparse.SUPPRESS)  # deprecated spelling
    p.add_argument("--sandbox", metavar="ID", help="serve this existing sandbox (left running when the client goes away)")
    p.add_argument("--token", help="with --sandbox: the sandbox's token, or a narrower derived one, instead of the API key")
    p.add_argument("--image", help="image of the sandbox it creates (default: the controller's default image)")
    p.add_argument("--ttl", type=parse_duration, metavar="DURATION", help="ttl of the sandbox it creates, kept alive while the client is connected: seconds or 10m, 2h")
    p.add_argument("--label", type=parse_label, action="append", default=[], metavar="K=V", help="a label for the sandbox it creates (repeatable)")
    p.add_argument("--url", help="the controller (default WARREN_URL, else http://127.0.0.1:7420)")
    p.add_argument("--base-url", dest="url", help=argparse.SUPPRESS)  # deprecated spelling
    p.add_argument("--api-key", help="the API key (default WARREN_API_KEY)")
    return p


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parses the command line; a deprecated flag name gets one line on stderr, and a usage error exits 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    for old, new in (("--tool-set", "--toolset"), ("--base-url", "--url")):
        if any(a == old or a.startswith(old + "=") for a in argv):
            sys.stderr.write(f"warren mcp: {old} is deprecated and goes away in the next minor version; use {new}\n")
    if args.sandbox is None and args.token is not None:
        parser().error("--token needs --sandbox (a created sandbox is reached with the API key)")
    if args.sandbox is not None and (args.image is not None or args.ttl is not None or args.label):
        parser().error("--image, --ttl and --label describe the sandbox it creates; leave them out with --sandbox")
    return args


async def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    owned = args.sandbox is None
    if owned:
        options: Dict[str, Any] = {"labels": {"warren.mcp": args.toolset, **dict(args.label)}}
        if args.image:
            options["image"] = args.image
        if args.ttl:
            options["ttl_seconds"] = args.ttl
        sandbox = await AsyncSandbox.create(base_url=args.url, api_key=args.api_key, **options)
    else:
        sandbox = await AsyncSandbox.connect(args.sandbox, token=args.token, base_url=args.url, api_key=args.api_key)
    tools = TOOL_SETS[args.toolset](sandbox)
    note = ", removed when this server ends" if owned else ""
    sys.stderr.write(f"warren mcp: serving the {args.toolset} tool set ({len(tools)} tools) on sandbox {sandbox.id}{note}\n")
    loop = asyncio.get_running_loop()
    serving = asyncio.current_task()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if serving is not None:
            loop.add_signal_handler(sig, serving.cancel)
    keepalive: "Optional[asyncio.Task[None]]" = None
    if owned:
        # Keep a created sandbox from expiring while the client is still connected.
        ttl = float((await sandbox.get_info()).settings.ttl_seconds)
        keepalive = asyncio.create_task(_keep_alive(sandbox, min(max(ttl / 3, 5.0), 60.0)))
    try:
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        out = sys.stdout.buffer

        def write(data: bytes) -> None:
            out.write(data)
            out.flush()

        await serve(tools, reader, write)
    finally:
        if keepalive is not None:
            keepalive.cancel()
        if owned:
            try:
                await sandbox.kill()
                sys.stderr.write(f"warren mcp: removed sandbox {sandbox.id}\n")
            except Exception as err:  # the client is gone; say it and end anyway
                sys.stderr.write(f"warren mcp: could not remove sandbox {sandbox.id}: {err}\n")
        else:
            await sandbox.close()


async def _keep_alive(sandbox: AsyncSandbox, every_seconds: float) -> None:
    while True:
        await asyncio.sleep(every_seconds)
        try:
            await sandbox.keepalive()
        except Exception:  # a missed keepalive is retried at the next interval
            pass


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
