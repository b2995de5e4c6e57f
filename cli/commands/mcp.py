"""`hermes mcp serve`: the store's sessions for any MCP client (read-only)."""
from __future__ import annotations

import click

from ..context import AppContext
from ..mcp_tools import MAX_BYTES


@click.group("mcp")
def mcp() -> None:
    """Offer the store's sessions to MCP clients (Claude Desktop, Claude Code, ...).

    \b
    Example:
      hermes mcp serve
    """


@mcp.command("serve")
@click.option("--max-bytes", type=click.IntRange(2_048, 1_048_576), default=MAX_BYTES,
              show_default=True, help="Longest answer a tool gives, in bytes; longer "
              "answers are cut and say so.")
@click.pass_obj
def serve_cmd(app: AppContext, max_bytes: int) -> None:
    """Serve read-only tools over MCP's stdio transport until the client leaves.

    Tools: search_sessions, list_sessions, read_session, session_stats
    (docs/cli.md). They read the store of --home/--profile (or --store-url),
    opened read-only for each call: nothing is written, not even a schema
    upgrade or a search-index rebuild; no tool takes a path. Needs the mcp extra: pip install 'hermes-state[mcp]'.

    \b
    Example:
      hermes --home ~/.hermes mcp serve
    """
    try:
        import mcp.server.lowlevel  # noqa: F401  (the extra is installed?)
    except ImportError:
        raise click.ClickException("the MCP server needs the MCP SDK: "
                                   "pip install 'hermes-state[mcp]'") from None
    from ..mcp_server import serve
    serve(app, max_bytes)
