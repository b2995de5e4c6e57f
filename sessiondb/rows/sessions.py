"""Session rows: the SQL behind create/get/list/end/rename/delete.

Functions here take a connection that the caller has already put in the
right transaction; `SessionDB` owns transactions and error translation.
"""
from __future__ import annotations

import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any

import apsw

from ..base import SessionNotFound, one, validate_session_id

_COLUMNS = ("id", "parent_session_id", "source", "model", "title", "started_at",
            "updated_at", "ended_at", "end_reason", "message_count", "tool_call_count",
            "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM sessions"


@dataclass(frozen=True)
class Session:
    """One session row. Counters cover every message ever appended."""

    id: str
    parent_session_id: str | None
    source: str
    model: str | None
    title: str | None
    started_at: float
    updated_at: float
    ended_at: float | None
    end_reason: str | None
    message_count: int
    tool_call_count: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def new_session_id(now: float) -> str:
    """Sortable by creation time, unique enough without coordination."""
    stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(now))
    return f"{stamp}_{secrets.token_hex(4)}"


def exists(conn: apsw.Connection, session_id: str) -> bool:
    return conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is not None


def require(conn: apsw.Connection, session_id: str) -> None:
    if not exists(conn, session_id):
        raise SessionNotFound(f"no session {session_id!r}")


def create(conn: apsw.Connection, session_id: str | None, *, source: str, model: str | None,
           title: str | None, parent_session_id: str | None, now: float) -> str:
    """Insert, or fill in a known session without replacing values by NULL."""
    sid = validate_session_id(session_id) if session_id is not None else new_session_id(now)
    if parent_session_id is not None:
        validate_session_id(parent_session_id)
        if parent_session_id != sid:
            require(conn, parent_session_id)
    conn.execute(
        "INSERT INTO sessions(id, parent_session_id, source, model, title, started_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(id) DO UPDATE SET"
        "  parent_session_id = COALESCE(excluded.parent_session_id,"
        " sessions.parent_session_id),"
        "  model = COALESCE(excluded.model, sessions.model),"
        "  title = COALESCE(excluded.title, sessions.title)",
        (sid, parent_session_id, source, model, title, now, now))
    return sid


def get(conn: apsw.Connection, session_id: str) -> Session:
    row = conn.execute(f"{_SELECT} WHERE id = ?", (session_id,)).fetchone()
    if row is None:
        raise SessionNotFound(f"no session {session_id!r}")
    return Session(*row)


def select(where: list[str]) -> str:
    """The session SELECT with these WHERE terms (ANDed), if any."""
    return _SELECT + (f" WHERE {' AND '.join(where)}" if where else "")


_ARCHIVED = "id IN (SELECT session_id FROM session_flags WHERE archived_at IS NOT NULL)"


def filters(*, source: str | None = None, since: float | None = None,
            before: float | None = None,
            archived: bool | None = None) -> tuple[list[str], list[Any]]:
    """WHERE terms and their arguments for the filters every session listing takes.

    ``archived``: None for every session, False without archived ones, True
    for archived ones only (see sessiondb/maintenance/lifecycle.py)."""
    where: list[str] = [] if archived is None else [_ARCHIVED if archived
                                                    else f"NOT {_ARCHIVED}"]
    args: list[Any] = []
    for term, value in (("source = ?", source), ("started_at >= ?", since),
                        ("started_at < ?", before)):
        if value is not None:
            where.append(term)
            args.append(value)
    return where, args


def list_(conn: apsw.Connection, *, source: str | None, limit: int,
          before: float | None, since: float | None = None,
          archived: bool | None = None) -> list[Session]:
    where, args = filters(source=source, since=since, before=before, archived=archived)
    sql = select(where) + " ORDER BY started_at DESC, id DESC LIMIT ?"
    return [Session(*r) for r in conn.execute(sql, (*args, limit))]


def update(conn: apsw.Connection, session_id: str, now: float, **fields: Any) -> None:
    sets = ", ".join(f"{k} = ?" for k in fields)
    conn.execute(f"UPDATE sessions SET {sets}, updated_at = ? WHERE id = ?",
                 (*fields.values(), now, session_id))
    if conn.changes() == 0:
        raise SessionNotFound(f"no session {session_id!r}")


def add_message_counts(conn: apsw.Connection, session_id: str, now: float, messages: int,
                       tool_calls: int) -> None:
    """Count appended messages and their tool calls (only the columns they move)."""
    conn.execute("UPDATE sessions SET message_count = message_count + ?,"
                 " tool_call_count = tool_call_count + ?, updated_at = ? WHERE id = ?",
                 (messages, tool_calls, now, session_id))


def add_usage(conn: apsw.Connection, session_id: str, now: float, *, input_tokens: int,
              output_tokens: int, cache_read_tokens: int, cache_write_tokens: int) -> None:
    """Add model token usage to the session's counters."""
    conn.execute(
        "UPDATE sessions SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ?,"
        " cache_read_tokens = cache_read_tokens + ?, cache_write_tokens = cache_write_tokens + ?,"
        " updated_at = ? WHERE id = ?",
        (input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, now, session_id))


def delete(conn: apsw.Connection, session_id: str) -> int:
    """Delete a session and (by cascade) its messages; returns messages removed."""
    require(conn, session_id)
    (count,) = one(conn.execute("SELECT count(*) FROM messages WHERE session_id = ?",
                            (session_id,)))
    conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
    return count
