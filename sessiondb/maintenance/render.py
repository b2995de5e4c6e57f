"""Readable renderings of stored messages: one-line text and Markdown.

Tool calls are folded to one line each (name and shortened arguments) so a
transcript stays scannable; block lists show their text blocks and name
the other block types.
"""
from __future__ import annotations

import json
import time
from typing import Any

from ..base import MessageState
from ..rows import Session, StoredMessage

ARGUMENT_WIDTH = 120


def _when(ts: float | None) -> str:
    """UTC time; a stored value no calendar can hold (a row written before
    times were range-checked) is rendered as the number, never a crash."""
    if ts is None:
        return "-"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ts))
    except (OverflowError, OSError, ValueError, TypeError):
        return f"{ts!r} (out of range)"


def content_text(message: dict[str, Any]) -> str:
    """The text of ``content``: text blocks joined, other blocks as ``[type]``."""
    content = message.get("content")
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif isinstance(block, dict):
                parts.append(f"[{block.get('type', 'block')}]")
        return " ".join(parts)
    return "" if content is None else str(content)


def tool_call_names(message: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, arguments) of each tool call, OpenAI- or flat-shaped."""
    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        if not isinstance(fn, dict):
            fn = {}
        args = fn.get("arguments", fn.get("input", ""))
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False, sort_keys=True)
        out.append((str(fn.get("name", "?")), args))
    return out


def render_text(message: dict[str, Any]) -> str:
    """One line of readable text for a message, tool calls folded."""
    text = content_text(message)
    for name, _args in tool_call_names(message):
        text += f" [tool call: {name}]"
    return text.strip()


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def markdown_session_header(session: Session) -> str:
    model = f" · model: {session.model}" if session.model else ""
    lines = [f"# {session.title or '(untitled)'}", "",
             f"- id: `{session.id}`",
             f"- source: {session.source}{model}",
             f"- started: {_when(session.started_at)} · ended: {_when(session.ended_at)}",
             f"- messages: {session.message_count}", ""]
    return "\n".join(lines) + "\n"


def markdown_message(m: StoredMessage) -> str:
    msg = m.message
    role = str(msg.get("role"))
    if msg.get("tool_call_id"):
        role += f" (result of `{msg['tool_call_id']}`)"
    if m.state != MessageState.ACTIVE:
        role += f" ({m.state})"
    parts = [f"### {role} · {_when(m.timestamp)}", ""]
    text = content_text(msg)
    if text:
        parts += [text, ""]
    for name, args in tool_call_names(msg):
        parts.append(f"- tool call `{name}`: `{_shorten(args, ARGUMENT_WIDTH)}`")
    if msg.get("tool_calls"):
        parts.append("")
    return "\n".join(parts) + "\n"
