"""Keyset pages of sessions and messages, for readers that stream.

Exports and long listings read a bounded page at a time and resume after
the last key they saw (sessions by ``(started_at, id)``, messages by
``(position, id)``), so memory never depends on how much is stored and a
row that exists for the whole read is returned exactly once. Each page is
its own read transaction: rows appended while a stream runs may or may not
be included, never duplicated.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apsw

from ..base import one
from . import sessions
from .codec import decode, kind_text, uid_text
from .sessions import Session

SessionKey = tuple[float, str]
MessageKey = tuple[int, int]


@dataclass(frozen=True)
class StoredMessage:
    """One message row: the public message dict plus the row's own fields."""

    key: MessageKey
    uid: str
    timestamp: float
    state: str
    compaction_id: str | None
    kind: str
    message: dict[str, Any]


def session_page(conn: apsw.Connection, *, after: SessionKey | None, limit: int,
                 source: str | None = None, since: float | None = None) -> list[Session]:
    """Up to ``limit`` sessions, oldest first, strictly after ``after``."""
    where, args = sessions.filters(source=source, since=since)
    if after is not None:
        where.append("(started_at > ? OR (started_at = ? AND id > ?))")
        args += [after[0], after[0], after[1]]
    sql = sessions.select(where) + " ORDER BY started_at, id LIMIT ?"
    return [Session(*r) for r in conn.execute(sql, (*args, limit))]


_MESSAGES = ("SELECT position, id, uid, timestamp, state, compaction_id, kind, role,"
             " content_kind, content, tool_calls, meta, finish_reason FROM messages WHERE session_id = ?")


def message_page(conn: apsw.Connection, session_id: str, *, after: MessageKey | None,
                 limit: int, include_archived: bool = True) -> list[StoredMessage]:
    """Up to ``limit`` messages of a session in order, strictly after ``after``."""
    sql = _MESSAGES
    args: list[Any] = [session_id]
    if not include_archived:
        sql += " AND state = 'active'"
    if after is not None:
        # Row values compare lexicographically and use the (session, position, id) index.
        sql += " AND (position, id) > (?, ?)"
        args += [after[0], after[1]]
    sql += " ORDER BY position, id LIMIT ?"
    return _stored(conn.execute(sql, (*args, limit)))


def _stored(rows: Any) -> list[StoredMessage]:
    out = []
    for (position, rid, uid, ts, state, comp, kind, role, ckind, content, calls,
         meta, finish) in rows:
        out.append(StoredMessage((position, rid), uid_text(uid), ts, state, comp, kind_text(kind),
                                 decode(role, ckind, content, calls, meta, finish)))
    return out


END = 2 ** 63 - 1  # a row id above every other: (position, END) is "after position"


def last_page(conn: apsw.Connection, session_id: str, *, before: int | None, limit: int,
              include_archived: bool = True) -> list[StoredMessage]:
    """The last ``limit`` messages of a session before position ``before``
    (None: the newest), in order."""
    sql = _MESSAGES
    args: list[Any] = [session_id]
    if not include_archived:
        sql += " AND state = 'active'"
    if before is not None:
        sql += " AND position < ?"
        args.append(before)
    sql += " ORDER BY position DESC, id DESC LIMIT ?"
    rows = list(conn.execute(sql, (*args, limit)))
    return _stored(reversed(rows))


@dataclass(frozen=True)
class Window:
    """One page of a session for display: its rows, how many there are in
    all, and whether rows exist before or after the page."""

    rows: list[StoredMessage]
    total: int
    more_before: bool
    more_after: bool


def window(conn: apsw.Connection, session_id: str, *, limit: int, before: int | None = None,
           after: int | None = None, include_archived: bool = True) -> Window:
    """The first ``limit`` rows after position ``after``, else the last
    ``limit`` before ``before`` (None: the newest), in one read."""
    state = "" if include_archived else " AND state = 'active'"
    (total,) = one(conn.execute(f"SELECT count(*) FROM messages WHERE session_id = ?{state}",
                            (session_id,)))
    if after is not None:
        rows = message_page(conn, session_id, after=(after, END), limit=limit,
                            include_archived=include_archived)
        rows = [r for r in rows if before is None or r.key[0] < before]
    else:
        rows = last_page(conn, session_id, before=before, limit=limit,
                         include_archived=include_archived)
    if not rows:
        return Window(rows, total, False, False)

    def exists(cond: str, position: int) -> bool:
        return conn.execute(f"SELECT 1 FROM messages WHERE session_id = ?{state}"
                            f" AND position {cond} ? LIMIT 1",
                            (session_id, position)).fetchone() is not None
    return Window(rows, total, exists("<", rows[0].key[0]), exists(">", rows[-1].key[0]))


def message_window(conn: apsw.Connection, session_id: str, message_id: int, *, context: int,
                   include_archived: bool = False) -> list[StoredMessage] | None:
    """The message ``message_id`` of a session with up to ``context`` rows
    before and after it (those filtered like `message_page`; the named row
    is always included), in order; None when the session has no such row."""
    target = _stored(conn.execute(_MESSAGES + " AND id = ?", (session_id, message_id)))
    if not target:
        return None
    key = target[0].key
    live = "" if include_archived else " AND state = 'active'"
    before = _stored(conn.execute(
        _MESSAGES + live + " AND (position, id) < (?, ?) ORDER BY position DESC, id DESC"
        " LIMIT ?", (session_id, *key, context)))
    after = message_page(conn, session_id, after=key, limit=context,
                         include_archived=include_archived) if context else []
    return [*reversed(before), *target, *after]


def count_messages(conn: apsw.Connection, session_ids: list[str] | None) -> int:
    """How many message rows these sessions (``None``: all) hold, for a progress total."""
    if session_ids is None:
        return int(one(conn.execute("SELECT count(*) FROM messages"))[0])
    total = 0
    for sid in session_ids:
        (n,) = one(conn.execute("SELECT count(*) FROM messages WHERE session_id = ?",
                            (sid,)))
        total += n
    return total
