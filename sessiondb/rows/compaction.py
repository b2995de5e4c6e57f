"""Micro-compaction archival: summarise a span of live messages, keep the span.

`archive_and_compact` archives the absorbed rows (never deletes them) and
puts a rolling-summary row at their place in the ordering, in one
transaction; `restore_compaction` undoes one compaction; `apply_compaction`
does the same replacement on the agent's in-memory transcript so that its
next flush has nothing extra to write. A `compactions` row records each
compaction so it can be listed and restored.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, TYPE_CHECKING

import apsw

from ..base import Cause, InvalidInput, MessageState, StorageError
from . import leases, messages as rows, sessions
from .codec import MARKER_KEY, Persisted, UID_KEY, encode, new_uid

if TYPE_CHECKING:
    from ..base import Core

SUMMARY_KIND = "rolling_summary"


class CompactionError(InvalidInput):
    """The compaction cannot be done as asked; ``ids`` names the offending rows."""

    def __init__(self, message: str, *, ids: list[Any] | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.ids = list(ids or [])


class CompactionNotFound(StorageError):
    """No compaction with that id exists."""

    cause = Cause.NOT_FOUND


@dataclass(frozen=True)
class CompactionResult:
    """One committed compaction: what it archived and the summary it inserted."""

    compaction_id: str
    session_id: str
    summary_id: int
    position: int
    absorbed_ids: tuple[int, ...]
    absorbed_uids: tuple[str, ...]
    superseded_ids: tuple[int, ...]
    superseded_uids: tuple[str, ...]


@dataclass(frozen=True)
class RestoreResult:
    """One undone compaction: rows live again, and its summary archived."""

    compaction_id: str
    session_id: str
    summary_id: int
    restored_ids: tuple[int, ...]


def checked_ids(absorbed_ids: Any) -> list[int]:
    """The absorbed ids as a list, or `CompactionError` (nothing is read)."""
    if not isinstance(absorbed_ids, (list, tuple)) or not absorbed_ids:
        raise CompactionError("absorbed_ids must be a non-empty list of message row ids")
    bad = [i for i in absorbed_ids if isinstance(i, bool) or not isinstance(i, int)]
    if bad:
        raise CompactionError(f"message row ids must be integers, not {bad[0]!r}", ids=bad)
    if len(set(absorbed_ids)) != len(absorbed_ids):
        raise CompactionError("absorbed_ids names a row more than once")
    return list(absorbed_ids)


def _live_rows(conn: apsw.Connection, session_id: str,
               ids: list[int]) -> dict[int, rows.RowPlace]:
    found = rows.rows_by_id(conn, ids)
    bad = [i for i in ids if i not in found or found[i].session_id != session_id
           or found[i].state != MessageState.ACTIVE]
    if bad:
        raise CompactionError(f"{len(bad)} absorbed id(s) are not live messages of session "
                              f"{session_id!r}: {', '.join(map(str, bad[:10]))}", ids=bad)
    return found


def archive_and_compact(core: "Core", session_id: str, absorbed_ids: list[int],
                        summary_message: dict[str, Any], *, holder: str | None = None,
                        supersede_previous: bool = True) -> CompactionResult:
    """Replace live rows by a summary, in one transaction; nothing is deleted.

    Contract: every absorbed id must be a live row of the session (else
    `CompactionError`, nothing changed). They become 'archived' with the new
    compaction id; ``summary_message`` (given a fresh uid) is inserted as a
    rolling-summary row at the position of the first absorbed row and marked;
    rows after the span, including any appended meanwhile by other writers,
    stay live and in order. With ``supersede_previous`` older live
    rolling-summary rows of the session (only those made by compaction) are
    archived too. With ``holder`` the lease is checked in the same transaction.
    """
    ids = checked_ids(absorbed_ids)
    uid = new_uid()
    enc = encode(summary_message, uid=uid)
    cid = uuid.uuid4().hex

    def body(conn: apsw.Connection) -> tuple[int, dict[int, rows.RowPlace], int,
                                             list[rows.SummaryRow]]:
        sessions.require(conn, session_id)
        if holder is not None:
            leases.check(conn, session_id, holder, core.now())
        found = _live_rows(conn, session_id, ids)
        position = min(found[i].position for i in ids)
        superseded = ([s for s in rows.live_summaries(conn, session_id) if s.id not in found]
                      if supersede_previous else [])
        rows.set_state(conn, ids + [s.id for s in superseded], MessageState.ARCHIVED, cid)
        summary_id, _ = rows.insert(conn, session_id, enc, position, SUMMARY_KIND)
        conn.execute("INSERT INTO compactions(id, session_id, summary_id, absorbed_count,"
                     " created_at) VALUES (?, ?, ?, ?, ?)",
                     (cid, session_id, summary_id, len(ids), core.now()))
        sessions.add_message_counts(conn, session_id, core.now(), 1, enc.tool_call_total)
        return summary_id, found, position, superseded

    with core.write() as conn:
        summary_id, found, position, superseded = body(conn)
    summary_message[UID_KEY] = uid
    summary_message[MARKER_KEY] = Persisted(summary_id, enc.fingerprint)
    return CompactionResult(cid, session_id, summary_id, position, tuple(ids),
                            tuple(found[i].uid for i in ids), tuple(s.id for s in superseded),
                            tuple(s.uid for s in superseded))


def restore_compaction(core: "Core", compaction_id: str, *,
                       holder: str | None = None) -> RestoreResult:
    """Undo one compaction: its archived rows are live again, its summary is archived.

    Refused (`CompactionError`, nothing changed) when it was already restored
    or its summary is no longer live (a later compaction absorbed or
    superseded it: restore that one first).
    """
    if not isinstance(compaction_id, str) or not compaction_id:
        raise InvalidInput("a compaction id must be a non-empty string")

    def body(conn: apsw.Connection) -> tuple[str, int, list[int]]:
        row = conn.execute("SELECT session_id, summary_id, restored_at FROM compactions"
                           " WHERE id = ?", (compaction_id,)).fetchone()
        if row is None:
            raise CompactionNotFound(f"no compaction {compaction_id!r}")
        session_id, summary_id, restored_at = row
        if holder is not None:
            leases.check(conn, session_id, holder, core.now())
        if restored_at is not None:
            raise CompactionError(f"compaction {compaction_id!r} was already restored")
        summary = rows.status(conn, summary_id)
        if summary is None or summary.state != MessageState.ACTIVE:
            raise CompactionError(f"the summary of compaction {compaction_id!r} is no longer "
                                  "live; restore the compaction that archived it first",
                                  ids=[summary_id])
        restored = rows.archived_by(conn, compaction_id)
        rows.set_state(conn, restored, MessageState.ACTIVE, None)
        rows.set_state(conn, [summary_id], MessageState.ARCHIVED, compaction_id)
        conn.execute("UPDATE compactions SET restored_at = ? WHERE id = ?",
                     (core.now(), compaction_id))
        return session_id, summary_id, restored

    with core.write() as conn:
        session_id, summary_id, restored = body(conn)
    return RestoreResult(compaction_id, session_id, summary_id, tuple(restored))


def list_compactions(core: "Core", session_id: str) -> list[dict[str, Any]]:
    """The session's compactions, oldest first (ids, summary row, counts, times)."""
    with core.read() as conn:
        sessions.require(conn, session_id)
        cur = conn.execute("SELECT id, summary_id, absorbed_count, created_at, restored_at"
                           " FROM compactions WHERE session_id = ? ORDER BY created_at, rowid",
                           (session_id,))
        keys = ("compaction_id", "summary_id", "absorbed_count", "created_at", "restored_at")
        return [dict(zip(keys, r)) for r in cur]


# -- the in-memory side -------------------------------------------------------

def _keys(message: Any) -> set[Any]:
    """What ties a dict to its row: its uid and, when marked, its row id
    (uids are hex strings, row ids ints, so the two never collide)."""
    if not isinstance(message, dict):
        return set()
    marker = message.get(MARKER_KEY)
    keys = {message.get(UID_KEY)} - {None}
    if isinstance(marker, Persisted):
        keys.add(marker.id)
    return keys


def rebuild(messages: list[Any], result: CompactionResult, summary_message: dict[str, Any],
            trusted: int = 0) -> tuple[int, int]:
    """Replace the absorbed dicts (matched by uid or row id) with ``summary_message`` in
    place and drop superseded summaries. Returns (summary index, how many
    leading dicts of the new list come from the first ``trusted`` old ones)."""
    if not isinstance(summary_message.get(MARKER_KEY), Persisted) or \
            summary_message[MARKER_KEY].id != result.summary_id:
        raise InvalidInput("the summary message is not the one this compaction stored")
    absorbed = {*result.absorbed_uids, *result.absorbed_ids}
    dropped = absorbed | {*result.superseded_uids, *result.superseded_ids}
    if not any(_keys(m) & absorbed for m in messages):
        raise InvalidInput("none of the absorbed messages is in this transcript")
    kept: list[Any] = []
    gone: list[Any] = []
    summary_index, still_trusted = -1, 0
    for old_index, m in enumerate(messages):
        keys = _keys(m)
        if keys & dropped:
            gone.append(m)
            if summary_index >= 0 or not keys & absorbed:
                continue
            summary_index, m = len(kept), summary_message
        kept.append(m)
        still_trusted += old_index < trusted
    messages[:] = kept
    for m in gone:  # they left the transcript: cut them loose from their rows
        m.pop(MARKER_KEY, None)
        m.pop(UID_KEY, None)
    return summary_index, still_trusted


def apply_compaction(messages: list[Any], result: CompactionResult,
                     summary_message: dict[str, Any]) -> int:
    """The in-memory side of `archive_and_compact`: the absorbed dicts are
    replaced by the (marked) summary dict, superseded summaries removed.
    Returns the summary's index. A `TranscriptWriter` on this list should use
    `TranscriptWriter.compact` instead, which also keeps its cursor."""
    return rebuild(messages, result, summary_message)[0]


__all__ = ["archive_and_compact", "restore_compaction", "apply_compaction",
           "list_compactions", "CompactionResult", "RestoreResult", "CompactionError",
           "CompactionNotFound", "SUMMARY_KIND"]
