"""Message rows: idempotent inserts by uid, ordered loads with markers.

Functions take a connection already in the right transaction.
"""
from __future__ import annotations

from typing import Any, Iterable

import apsw

from .codec import MARKER_KEY, UID_KEY, EncodedMessage, Persisted, decode

ACTIVE = "active"
ARCHIVED = "archived"
REWOUND = "rewound"
STATE_KEY = "_db_state"
COMPACTION_KEY = "_db_compaction_id"

_INSERT = (
    "INSERT INTO messages(session_id, uid, position, role, content_kind, content, tool_calls,"
    " tool_call_id, tool_name, finish_reason, timestamp, token_count, meta, fingerprint, kind)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT(session_id, uid) DO NOTHING RETURNING id")


def next_position(conn: apsw.Connection, session_id: str) -> int:
    """One past the highest position in the session (an index seek)."""
    row = conn.execute("SELECT max(position) FROM messages WHERE session_id = ?",
                       (session_id,)).fetchone()
    return (row[0] or 0) + 1


def insert(conn: apsw.Connection, session_id: str, enc: EncodedMessage, position: int,
           kind: str = "message") -> tuple[int, bool]:
    """Insert one encoded message; (row id, inserted?). A known uid is a no-op."""
    row = conn.execute(_INSERT, (
        session_id, enc.uid, position, enc.role, enc.content_kind, enc.content, enc.tool_calls,
        enc.tool_call_id, enc.tool_name, enc.finish_reason, enc.timestamp, enc.token_count,
        enc.meta, enc.fingerprint, kind)).fetchone()
    if row is not None:
        return row[0], True
    (existing,) = conn.execute("SELECT id FROM messages WHERE session_id = ? AND uid = ?",
                               (session_id, enc.uid)).fetchone()
    return existing, False


_LOAD = ("SELECT id, uid, role, content_kind, content, tool_calls, meta, fingerprint, state,"
         " compaction_id FROM messages WHERE session_id = ?")


def _marked(row: tuple, with_state: bool) -> dict[str, Any]:
    rid, uid, role, kind, content, tool_calls, meta, fp, state, compaction_id = row
    message = decode(role, kind, content, tool_calls, meta)
    message[UID_KEY] = uid
    message[MARKER_KEY] = Persisted(rid, fp)
    if with_state:
        message[STATE_KEY] = state
        message[COMPACTION_KEY] = compaction_id
    return message


def load(conn: apsw.Connection, session_id: str, *, include_archived: bool = False,
         tail: int | None = None) -> list[dict[str, Any]]:
    """Messages of a session in order, each marked as persisted.

    With ``include_archived`` every row is returned with its ``_db_state``.
    ``tail`` limits the result to the last N rows (cheap resume).
    """
    sql = _LOAD if include_archived else _LOAD + " AND state = 'active'"
    if tail is None:
        rows: Iterable[tuple] = conn.execute(sql + " ORDER BY position, id", (session_id,))
    else:
        desc = list(conn.execute(sql + " ORDER BY position DESC, id DESC LIMIT ?",
                                 (session_id, tail)))
        rows = reversed(desc)
    return [_marked(r, include_archived) for r in rows]
