"""`hermes mcp serve`: the read-only tools of mcp_tools.py over MCP's stdio transport.

The MCP SDK (the ``mcp`` extra) is imported only here, and only when the
server starts. Each tool call runs in a worker thread (the store is opened,
read and closed there), so a slow search never stalls the protocol; a
`ToolError`, and any other failure, becomes a tool result with ``isError``
set and the server keeps serving. stdout carries the protocol alone: logs
go to stderr.
"""
from __future__ import annotations

import functools
import logging
import sys
from typing import Any

from . import mcp_tools
from .context import AppContext

log = logging.getLogger(__name__)

INSTRUCTIONS = ("Read-only access to the agent sessions in a hermes-state store: search "
                "their messages, list sessions, read a session a page at a time, count "
                "what the store holds. No tool changes a session or message.")


def build_server(app: AppContext, max_bytes: int) -> Any:
    """The MCP server object, its tools bound to ``app``'s store."""
    import anyio
    import mcp.types as types
    from mcp.server.lowlevel import Server

    tools = [types.Tool(name=t.name, description=t.description, input_schema=t.schema,
                        annotations=types.ToolAnnotations(read_only_hint=True,
                                                          destructive_hint=False,
                                                          open_world_hint=False))
             for t in mcp_tools.TOOLS.values()]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> Any:
        run = functools.partial(answer, app, params.name, params.arguments, max_bytes)
        text, failed = await anyio.to_thread.run_sync(run)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    is_error=failed)

    import sessiondb
    return Server("hermes-state", version=sessiondb.__version__, instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


def answer(app: AppContext, name: str, arguments: Any, max_bytes: int) -> tuple[str, bool]:
    """(text, is_error) of one tool call; never raises."""
    try:
        return mcp_tools.call(app, name, arguments, max_bytes=max_bytes), False
    except mcp_tools.ToolError as e:
        return str(e), True
    except Exception as e:  # a tool failure must not end the server
        log.exception("tool %s failed", name)
        return f"{name} failed: {type(e).__name__}: {' '.join(str(e).split())}", True


def serve(app: AppContext, max_bytes: int) -> None:
    """Serve over stdin/stdout until the client closes the connection."""
    import anyio
    from mcp.server.stdio import stdio_server

    server = build_server(app, max_bytes)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    # The CLI filters stdout for terminals (cli/terminal.py); the protocol needs
    # the real one, which the SDK then claims (stray prints go to stderr).
    saved = sys.stdout
    sys.stdout = getattr(saved, "inner", saved)
    try:
        anyio.run(main)
    finally:
        sys.stdout = saved
