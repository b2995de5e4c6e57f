"""`hermes sessions ...`: read and manage stored sessions."""
from __future__ import annotations

import json
from typing import Any

import click

from sessiondb import strip_markers

from .main import AppContext, cli
from .output import emit_json, fmt_time, shorten, table, terminal_width


@cli.group()
def sessions() -> None:
    """Read, search and manage stored sessions.

    \b
    Example:
      hermes sessions list --limit 10
    """


@sessions.command("list")
@click.option("--source", help="Only sessions from this source (cli, agent, ...).")
@click.option("--limit", type=click.IntRange(1, 100000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def list_cmd(app: AppContext, source: str | None, limit: int, as_json: bool) -> None:
    """List sessions, newest first.

    \b
    Example:
      hermes sessions list --source agent --json
    """
    with app.open_store() as db:
        found = db.list_sessions(source=source, limit=limit)
    if as_json:
        emit_json({"sessions": [s.to_dict() for s in found]})
        return
    width = max(terminal_width() - 70, 12)
    table(((s.id, fmt_time(s.started_at), s.source, s.message_count,
            shorten(s.title or "", width)) for s in found),
          ("id", "started", "source", "messages", "title"))


def render_text(message: dict[str, Any]) -> str:
    """A message's readable text, tool calls folded to one line each."""
    content = message.get("content")
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif isinstance(block, dict):
                parts.append(f"[{block.get('type', 'block')}]")
        text = " ".join(parts)
    else:
        text = "" if content is None else str(content)
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        name = fn.get("name", "?") if isinstance(fn, dict) else "?"
        text += f" [tool call: {name}]"
    return text.strip()


@sessions.command("show")
@click.argument("session_id")
@click.option("--archived", is_flag=True, help="Also show archived (compacted) messages.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def show_cmd(app: AppContext, session_id: str, archived: bool, as_json: bool) -> None:
    """Show one session and its messages.

    \b
    Example:
      hermes sessions show 20260101_120000_ab12cd34
    """
    with app.open_store() as db:
        session = db.get_session(session_id)
        msgs = db.get_messages(session_id, include_archived=archived)
    if as_json:
        emit_json({"session": session.to_dict(), "messages": strip_markers(msgs)})
        return
    click.echo(f"{session.id}  {session.title or '(untitled)'}  [{session.source}]"
               f"  {session.message_count} messages")
    width = max(terminal_width() - 30, 20)
    rows = []
    for m in msgs:
        state = m.get("_db_state", "active")
        role = m["role"] if state == "active" else f"{m['role']} ({state})"
        rows.append((role, fmt_time(m.get("timestamp")), shorten(render_text(m), width)))
    table(rows, ("role", "time", "text"))
