"""Transcript persistence: the flush-scan cursor and the edit operations.

An agent keeps its transcript as a Python list of message dicts and calls
`TranscriptWriter.flush` after every model response and tool result. The
writer owns the cursor (how much of that list is known to be stored) and
the operations that change already stored messages, so that every such
change drops the message's marker and pulls the cursor back by itself.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, TYPE_CHECKING

import apsw

from .base import InvalidInput, InvalidMessage, MessageState, StorageError, validate_session_id
from .rows import (EncodedMessage, MARKER_KEY, PRIVATE_PREFIX, Persisted, UID_KEY, compaction,
                   encode, leases, messages as rows, public_fields, sessions)
from .spool import spool_failed_write

if TYPE_CHECKING:
    from .face import StoreFace

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FlushResult:
    """What one flush did. ``scanned`` counts the dicts it looked at (the
    cursor's boundary dict, whose identity and marker it checks, and every
    dict after it); ``skipped`` the leading run it trusted without looking.
    ``scanned + skipped`` is the transcript's length."""

    inserted: int
    updated: int
    scanned: int
    skipped: int


@dataclass(frozen=True)
class _Cursor:
    transcript: list[Any]  # the list object last flushed successfully
    count: int             # its leading run known to be stored and unchanged
    boundary: Any          # transcript[count - 1] at that time
    marker: Any            # the boundary's marker object at that time


@dataclass(frozen=True)
class _Write:
    index: int
    message: dict[str, Any]
    enc: EncodedMessage
    marker: Persisted | None
    had_uid: bool  # may already have a row: an edit, or a retry after a failure


def _forget(message: Any) -> None:
    """Cut a dict loose from its row (it left the transcript)."""
    if isinstance(message, dict):
        message.pop(MARKER_KEY, None)
        message.pop(UID_KEY, None)


def _explicit_timestamp(message: dict[str, Any]) -> float | None:
    value = message.get("timestamp")
    return float(value) if isinstance(value, (int, float)) else None


class TranscriptWriter:
    """Writes one session's in-memory transcript, costing O(new messages).

    Contract:
    - ``flush(messages)`` stores every unmarked dict (insert, or rewrite of
      its row when it carries the ``_db_uid`` of one) and rewrites every
      marked dict whose content no longer matches its fingerprint, in one
      transaction, then marks them. It starts after the cursor: the leading
      run of the *same list object* flushed last time, trusted while its last
      dict is the same object with the same marker. Flushing an unchanged
      list writes nothing (and, touching no row, checks no lease); a new
      writer, or a different list object, rescans everything once.
    - Change stored messages only through ``update``, ``replace``,
      ``fill_tail``, ``rewind`` and ``compact``; they drop the marker and pull
      the cursor back to the change. Editing a stored dict by hand inside the
      trusted run is not seen by the next flush.
    - A failed flush raises the store's typed ``StorageError`` unchanged,
      writes nothing, resets the cursor (the next flush rescans), leaves the
      dicts it could not write in ``unwritten`` and, for the causes the spool
      takes (corrupt, replaced, disk full, read-only, I/O), spools them.
    - New messages go at the end: a new dict placed before a stored one is
      refused (``InvalidInput``), as is a dict that appears twice.
    """

    def __init__(self, db: "StoreFace", session_id: str, *, holder: str | None = None) -> None:
        self.db = db
        self.session_id = validate_session_id(session_id)
        self.holder = holder
        self._cursor: _Cursor | None = None
        self.unwritten: tuple[dict[str, Any], ...] = ()

    # -- the cursor ----------------------------------------------------------

    def invalidate(self) -> None:
        """Forget the cursor; the next flush rescans the whole transcript."""
        self._cursor = None

    def _resume_point(self, messages: list[Any]) -> int:
        """How many leading dicts the next flush may skip (O(1))."""
        c = self._cursor
        if c is None or c.transcript is not messages or not 0 < c.count <= len(messages):
            return 0
        last = messages[c.count - 1]
        if last is not c.boundary or last.get(MARKER_KEY) is not c.marker:
            return 0
        return c.count

    def _set_cursor(self, messages: list[Any], count: int) -> None:
        if count <= 0:
            self._cursor = None
            return
        last = messages[count - 1]
        self._cursor = _Cursor(messages, count, last, last.get(MARKER_KEY))

    def _pull_back(self, messages: list[Any], index: int) -> None:
        """Trust at most ``messages[:index]`` from now on."""
        self._set_cursor(messages, min(self._resume_point(messages), index))

    # -- flush ---------------------------------------------------------------

    def flush(self, messages: list[dict[str, Any]], *, holder: str | None = None) -> FlushResult:
        """Store what changed since the cursor; see the class docstring."""
        if not isinstance(messages, list):
            raise InvalidMessage("a transcript must be a list of message dicts")
        holder = self.holder if holder is None else holder
        start = self._resume_point(messages)
        self._cursor = None  # stays unset unless this flush succeeds
        self.unwritten = ()
        plan: list[_Write] = []
        try:
            last_marked = self._plan(messages, start, plan)
            ids, inserted, updated = (self._write(plan, holder, last_marked) if plan
                                      else ([], 0, 0))
        except BaseException as e:
            self.unwritten = tuple(w.message for w in plan)
            if isinstance(e, StorageError):  # keep what could not be written
                spool_failed_write(self.db.core, self.session_id, list(self.unwritten), e)
            raise
        for w, rid in zip(plan, ids):
            w.message[MARKER_KEY] = Persisted(rid, w.enc.fingerprint)
        self._set_cursor(messages, len(messages))
        skipped = max(start - 1, 0)  # the boundary dict itself was looked at
        return FlushResult(inserted, updated, len(messages) - skipped, skipped)

    def _plan(self, messages: list[Any], start: int, plan: list[_Write]) -> int:
        """Collect the dicts from ``start`` on that need a write. Uids are
        given before the write, so a retry after any failure is idempotent.
        Returns the index of the last marked dict (-1: none), unchanged ones
        included: a row inserted before it would be out of order."""
        seen: set[int] = set()
        last_marked = -1
        for i in range(start, len(messages)):
            m = messages[i]
            enc = encode(m, index=i)
            if id(m) in seen:
                raise InvalidInput(f"message {i} is the same dict as an earlier one; "
                                   "a transcript cannot hold one dict twice")
            seen.add(id(m))
            marker = m.get(MARKER_KEY)
            if not isinstance(marker, Persisted):
                marker = None
            else:
                last_marked = i
                if marker.fingerprint == enc.fingerprint:
                    continue
            had_uid = m.get(UID_KEY) == enc.uid
            if marker is None:  # a marked dict is written by row id; never invent its uid
                m[UID_KEY] = enc.uid
            plan.append(_Write(i, m, enc, marker, had_uid))
        return last_marked

    def _write(self, plan: list[_Write], holder: str | None,
               last_marked: int) -> tuple[list[int], int, int]:
        def body(conn: apsw.Connection, start: int) -> tuple[tuple[list[int], int, int], int]:
            if holder is not None:
                leases.check(conn, self.session_id, holder, self.db.now())
            return self._apply(conn, plan, start, last_marked)
        # As appends: the session check and the position seek are one statement,
        # skipped while nothing else committed since this handle's last write to
        # the session.
        return self.db.session_write(self.session_id, body)

    def _apply(self, conn: apsw.Connection, plan: list[_Write], position: int,
               last_marked: int) -> tuple[tuple[list[int], int, int], int]:
        """Per dict: one UPDATE (marked, changed), one SELECT and at most one
        UPDATE (unmarked with a uid), or one INSERT (new) at ``position`` on.
        ((ids, inserted, updated), next position)."""
        sid = self.session_id
        ids: list[int] = []
        inserted = updated = calls = 0
        for w in plan:
            if w.marker is not None:
                stored: rows.StoredRow | None = rows.StoredRow(w.marker.id, "",
                                                               MessageState.ACTIVE)
            else:
                stored = rows.find_uid(conn, sid, w.enc.uid) if w.had_uid else None
            if stored is None:
                rid, new = rows.insert(conn, sid, w.enc, position)
                if new:
                    if w.index < last_marked:
                        raise InvalidInput(f"message {w.index} is new but comes before stored "
                                           f"message {last_marked}; new messages can only be "
                                           "added at the end")
                    ids.append(rid)
                    position, inserted = position + 1, inserted + 1
                    calls += w.enc.tool_call_total
                    continue
                # The uid was known after all: treat it as the stored row it is.
                stored = rows.find_uid(conn, sid, w.enc.uid) or rows.StoredRow(rid, "", "")
            if inserted:
                raise InvalidInput(f"message {w.index} is already stored but comes after a new "
                                   "message; new messages can only be added at the end")
            updated += self._rewrite(conn, w, stored)
            ids.append(stored.id)
        if inserted:
            sessions.add_message_counts(conn, sid, self.db.now(), inserted, calls)
        return (ids, inserted, updated), position

    def _rewrite(self, conn: apsw.Connection, w: _Write, stored: rows.StoredRow) -> bool:
        """Bring a stored row up to date; False if it was."""
        rid, fingerprint, state = stored
        if state == MessageState.ACTIVE and fingerprint == w.enc.fingerprint:
            return False
        if not rows.rewrite(conn, self.session_id, rid, w.enc, _explicit_timestamp(w.message)):
            raise InvalidInput(f"message {w.index} belongs to row {rid}, which is not a live "
                               f"message of session {self.session_id!r}; reload the transcript")
        return True

    # -- edit operations -------------------------------------------------------

    @staticmethod
    def _index(messages: list[Any], index: int) -> int:
        if not isinstance(messages, list):
            raise InvalidInput("a transcript must be a list of message dicts")
        if isinstance(index, bool) or not isinstance(index, int):
            raise InvalidInput("a message index must be an integer")
        i = index + len(messages) if index < 0 else index
        if not 0 <= i < len(messages):
            raise InvalidInput(f"no message at index {index} (transcript has {len(messages)})")
        if not isinstance(messages[i], dict):
            raise InvalidMessage(f"message {i} is not a dict", index=i)
        return i

    def update(self, messages: list[dict[str, Any]], index: int, **fields: Any) -> dict[str, Any]:
        """Set fields (``content``, ``finish_reason``, ...) of one message in place."""
        i = self._index(messages, index)
        if not fields:
            raise InvalidInput("update needs at least one field")
        private = sorted(k for k in fields if k.startswith(PRIVATE_PREFIX))
        if private:
            raise InvalidInput(f"fields starting with {PRIVATE_PREFIX!r} belong to the store: "
                               f"{', '.join(private)}")
        message = messages[i]
        encode({**message, **fields}, index=i)  # refuse bad values before changing anything
        self._pull_back(messages, i)
        message.pop(MARKER_KEY, None)
        message.update(fields)
        return message

    def replace(self, messages: list[dict[str, Any]], index: int,
                message: dict[str, Any]) -> dict[str, Any]:
        """Put a copy of ``message`` in place of message ``index``; it takes
        over the old message's row on the next flush. Returns the copy."""
        i = self._index(messages, index)
        encode(message, index=i)
        fresh = public_fields(message)
        old = messages[i]
        if isinstance(old.get(UID_KEY), str):
            fresh[UID_KEY] = old[UID_KEY]
        self._pull_back(messages, i)
        messages[i] = fresh
        _forget(old)
        return fresh

    def fill_tail(self, messages: list[dict[str, Any]], content: Any,
                  **fields: Any) -> dict[str, Any]:
        """Fill the empty assistant message at the end (a streaming placeholder)."""
        last = messages[-1] if isinstance(messages, list) and messages else None
        if not (isinstance(last, dict) and last.get("role") == "assistant"
                and last.get("content") in (None, "", [])):
            raise InvalidInput("the transcript does not end with an empty assistant message")
        return self.update(messages, len(messages) - 1, content=content, **fields)

    def rewind(self, messages: list[dict[str, Any]], count: int, *,
               holder: str | None = None) -> list[dict[str, Any]]:
        """Remove the last ``count`` messages; their rows become 'rewound' (kept
        on disk, no longer live) in one transaction. Returns the removed dicts."""
        if not isinstance(messages, list):
            raise InvalidInput("a transcript must be a list of message dicts")
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= len(messages):
            raise InvalidInput(f"cannot rewind {count!r} of {len(messages)} messages")
        if count == 0:
            return []
        tail = messages[len(messages) - count:]
        uids = [m[UID_KEY] for m in tail if isinstance(m, dict) and isinstance(m.get(UID_KEY), str)]
        if uids:
            holder = self.holder if holder is None else holder
            def body(conn: apsw.Connection) -> None:
                sessions.require(conn, self.session_id)
                if holder is not None:
                    leases.check(conn, self.session_id, holder, self.db.now())
                rows.rewind_uids(conn, self.session_id, uids)
            with self.db.atomic() as conn:
                body(conn)
        self._pull_back(messages, len(messages) - count)
        del messages[len(messages) - count:]
        for m in tail:
            _forget(m)
        return tail

    def compact(self, messages: list[dict[str, Any]], absorbed_ids: list[int],
                summary_message: dict[str, Any], *, holder: str | None = None,
                supersede_previous: bool = True) -> compaction.CompactionResult:
        """Micro-compact stored messages of this transcript: the store side
        (`archive_and_compact`) and the in-memory side in one call."""
        wanted = set(compaction.checked_ids(absorbed_ids))
        have = {m[MARKER_KEY].id for m in messages
                if isinstance(m, dict) and isinstance(m.get(MARKER_KEY), Persisted)}
        missing = sorted(wanted - have, key=repr)
        if missing:
            raise compaction.CompactionError(
                "these rows are not flushed messages of this transcript (flush first): "
                + ", ".join(map(repr, missing[:10])), ids=missing)
        result = self.db.archive_and_compact(
            self.session_id, absorbed_ids, summary_message, supersede_previous=supersede_previous,
            holder=self.holder if holder is None else holder)
        trusted = self._resume_point(messages)
        _, still_trusted = compaction.rebuild(messages, result, summary_message, trusted)
        self._set_cursor(messages, still_trusted)
        return result

    # -- verification ----------------------------------------------------------

    def verify(self, messages: list[dict[str, Any]]) -> list[str]:
        """Findings where the live rows differ from ``messages`` (empty: equal).

        A full read of the session, for tests and diagnostics; findings name
        indexes and row ids, never message text.
        """
        stored = self.db.get_messages(self.session_id)
        findings = []
        if len(stored) != len(messages):
            findings.append(f"{len(stored)} live rows but {len(messages)} messages in memory")
        for i, (row, m) in enumerate(zip(stored, messages)):
            rid = row[MARKER_KEY].id
            if not isinstance(m, dict) or public_fields(row) != public_fields(m):
                findings.append(f"message {i}: row {rid} differs from the transcript")
            elif isinstance(m.get(MARKER_KEY), Persisted) and m[MARKER_KEY].id != rid:
                findings.append(f"message {i}: marked as row {m[MARKER_KEY].id}, stored as {rid}")
        return findings


__all__ = ["TranscriptWriter", "FlushResult"]
