"""Built-in tools: search past sessions, read a range of a past session."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from sessiondb import StoreFace, strip_markers

from .memory import HomeTools
from .tools import Tool, ToolRegistry

SEARCH_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "Words or a \"quoted phrase\"."},
        "session_id": {"type": "string"}, "role": {"type": "string"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50},
    },
    "required": ["query"],
}
MESSAGES_SCHEMA = {
    "type": "object",
    "properties": {
        "session_id": {"type": "string"},
        "start": {"type": "integer", "minimum": 0},
        "count": {"type": "integer", "minimum": 1, "maximum": 50},
    },
    "required": ["session_id"],
}


def session_search_tool(db: StoreFace, current: str | None = None) -> Tool:
    """Search past sessions; the agent's own ``current`` session is left out
    unless asked for by id (its messages are already in the context)."""
    def session_search(query: str, session_id: str | None = None, role: str | None = None,
                       limit: int = 10) -> list[dict[str, Any]]:
        limit = min(limit, 50)
        spare = 0 if session_id is not None or current is None else limit
        hits = [h for h in db.search(query, session_id=session_id, role=role,
                                     limit=limit + spare)
                if session_id is not None or h.session_id != current][:limit]
        return [{"session_id": h.session_id, "message_id": h.message_id, "role": h.role,
                 "title": h.session_title, "snippet": h.snippet, "archived": h.archived}
                for h in hits]
    return Tool("session_search", "Search the messages of past sessions.", SEARCH_SCHEMA,
                session_search)


def session_messages_tool(db: StoreFace) -> Tool:
    def session_messages(session_id: str, start: int = 0, count: int = 20) -> list[dict[str, Any]]:
        # A page, never the whole session: at most start + 50 rows are read.
        msgs = strip_markers(db.get_messages(session_id, limit=start + min(count, 50)))
        return msgs[start:]
    return Tool("session_messages", "Read a range of messages of a past session.",
                MESSAGES_SCHEMA, session_messages)


def default_registry(db: StoreFace, current: str | None = None,
                     home: Path | None = None) -> ToolRegistry:
    """Session search and reading, and, when ``home`` is given, the memory and
    skill tools (write origin ``assistant_tool``)."""
    tools = [session_search_tool(db, current), session_messages_tool(db)]
    if home is not None:
        tools += HomeTools(home, "assistant_tool", current or "").tools()
    return ToolRegistry(tools)
