"""An MCP server over stdio that offers one seed tool set bound to one sandbox, for MCP clients
(Claude Desktop, IDEs, agent frameworks with MCP support).

    python3 -m warren.mcp --sandbox ID --token TOKEN [--base-url URL] [--tool-set builtin]

It speaks MCP's JSON-RPC over newline-delimited stdio: ``initialize``, ``ping``, ``tools/list`` and
``tools/call`` (a tool's failure is a result with ``isError``, as MCP wants). Nothing but protocol
messages goes to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence

from .sandbox import AsyncSandbox
from .tools import builtin_tools, codin_tools, filesystem_tools, partial_read_tools, toolsmith_tools
from .tools.adapters import call_mcp_tool, to_mcp_tools
from .tools.tool import Tool

#: The MCP revisions this server speaks, newest first; a client's is echoed when it is one of them.
PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
TOOL_SETS: Dict[str, Callable[[Any], List[Tool]]] = {
    "builtin": builtin_tools,
    "codin": codin_tools,
    "filesystem": filesystem_tools,
    "partialRead": partial_read_tools,
    "toolsmith": toolsmith_tools,
}


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


async def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m warren.mcp", description="Serve one Warren tool set over MCP (stdio).")
    parser.add_argument("--sandbox", required=True, help="the sandbox id")
    parser.add_argument("--token", help="the sandbox's token (or a derived one); WARREN_API_KEY otherwise")
    parser.add_argument("--base-url", help="the controller's URL (WARREN_URL, else http://127.0.0.1:7420)")
    parser.add_argument("--tool-set", default="builtin", choices=sorted(TOOL_SETS))
    args = parser.parse_args(argv)
    sandbox = await AsyncSandbox.connect(args.sandbox, token=args.token, base_url=args.base_url)
    try:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        out = sys.stdout.buffer

        def write(data: bytes) -> None:
            out.write(data)
            out.flush()

        await serve(TOOL_SETS[args.tool_set](sandbox), reader, write)
    finally:
        await sandbox.close()


if __name__ == "__main__":
    asyncio.run(main())
