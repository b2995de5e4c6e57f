"""Message rows: idempotent inserts by uid, ordered loads with markers.

Functions take a connection already in the right transaction.
"""
from __future__ import annotations

from typing import Any, Iterable, NamedTuple

import apsw

from ..base import InvalidMessage, one
from ..index import search_index
from .codec import (EncodedMessage, MARKER_KEY, MESSAGE_KIND, Persisted, ROLE_CODES, ROLE_NAMES,
                    UID_KEY, decode, fingerprint_key, fingerprint_text, kind_key, kind_text,
                    role_key, stored_meta, uid_key, uid_text)

STATE_KEY = "_db_state"


def _plain(value: Any) -> Any:
    return value


def _plain_meta(meta: str, finish_reason: str | None) -> str:
    return meta


class Forms(NamedTuple):
    """The functions that turn logical values into a connection's stored forms."""

    uid: Any
    fingerprint: Any
    meta: Any
    role: Any
    kind: Any


_COMPACT_FORMS = Forms(uid_key, fingerprint_key, stored_meta, role_key, kind_key)
_PLAIN_FORMS = Forms(_plain, _plain, _plain_meta, _plain, _plain)


def _forms(conn: Any) -> Forms:
    """uid, fingerprint, meta, role and kind to their stored forms: compact
    on SQLite (m010, m012, docs/row-format.md); as they are on a connection
    that says ``COMPACT_ROWS = False`` (the PostgreSQL adapter: its schema
    is text)."""
    return _COMPACT_FORMS if getattr(conn, "COMPACT_ROWS", True) else _PLAIN_FORMS


def key_for(conn: Any, uid: str) -> Any:
    """``uid`` as the connection's rows store it (for a lookup by uid)."""
    return _forms(conn).uid(uid)
COMPACTION_KEY = "_db_compaction_id"

_INSERT = (
    "INSERT INTO messages(session_id, uid, position, role, content_kind, content, tool_calls,"
    " tool_call_id, tool_name, finish_reason, timestamp, token_count, meta, fingerprint, kind)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT(session_id, uid) DO NOTHING")


def start_position(conn: apsw.Connection, session_id: str) -> int | None:
    """One past the highest position in the session (an index seek), or None
    when the session does not exist: one statement for the write paths'
    existence check and position seek."""
    row = conn.execute("SELECT (SELECT max(position) FROM messages WHERE session_id = ?1)"
                       " FROM sessions WHERE id = ?1", (session_id,)).fetchone()
    return None if row is None else (row[0] or 0) + 1


def insert(conn: apsw.Connection, session_id: str, enc: EncodedMessage, position: int,
           kind: str = "message") -> tuple[int, bool]:
    """Insert one encoded message; (row id, inserted?). A known uid is a no-op."""
    f = _forms(conn)
    key = f.uid(enc.uid)
    conn.execute(_INSERT, (
        session_id, key, position, f.role(enc.role), enc.content_kind, enc.content,
        enc.tool_calls, enc.tool_call_id, enc.tool_name, enc.finish_reason, enc.timestamp,
        enc.token_count, f.meta(enc.meta, enc.finish_reason), f.fingerprint(enc.fingerprint),
        f.kind(kind)))
    # changes() counts only this statement's rows (not FTS trigger rows), and
    # last_insert_rowid() is back to the top-level row once triggers finish;
    # both are cheaper than RETURNING, which buffers a result set.
    if conn.changes():
        return conn.last_insert_rowid(), True
    (existing,) = one(conn.execute("SELECT id FROM messages WHERE session_id = ? AND uid = ?",
                               (session_id, key)))
    return existing, False


# Past this rowid SQLite may pick random rowids; `insert_fresh` reads them back.
_CONSECUTIVE_BELOW = 2 ** 62


def insert_fresh(conn: apsw.Connection, session_id: str, encoded: list[EncodedMessage],
                 position: int, kind: str = "message") -> list[int]:
    """Insert messages whose uids were just generated (so none can exist)
    in one prepared statement run over the batch (executemany); returns
    their row ids. New rowids are consecutive (max + 1 each) within the
    transaction, so the ids come from ``last_insert_rowid`` without a
    statement per row; when a change-log trigger also wrote (a reused
    rowid), they are read back by position instead."""
    n = len(encoded)
    # A server's id sequence interleaves other hosts' inserts: read back there.
    consecutive = getattr(conn, "CONSECUTIVE_ROWIDS", True)
    before = conn.total_changes() if consecutive else 0
    f = _forms(conn)
    to_uid, to_fp, to_meta, to_role = f.uid, f.fingerprint, f.meta, f.role
    stored_kind = f.kind(kind)
    conn.executemany(_INSERT, [
        (session_id, to_uid(e.uid), position + i, to_role(e.role), e.content_kind, e.content,
         e.tool_calls, e.tool_call_id, e.tool_name, e.finish_reason, e.timestamp,
         e.token_count, to_meta(e.meta, e.finish_reason), to_fp(e.fingerprint),
         stored_kind) for i, e in enumerate(encoded)])
    if consecutive:
        last = conn.last_insert_rowid()
        if conn.total_changes() - before == n and last < _CONSECUTIVE_BELOW:
            return list(range(last - n + 1, last + 1))
    ids = [r[0] for r in conn.execute(
        "SELECT id FROM messages WHERE session_id = ? AND position BETWEEN ? AND ?"
        " ORDER BY position", (session_id, position, position + n - 1))]
    if len(ids) != n:  # a generated uid already stored: 128 random bits collided
        raise InvalidMessage("a generated message uid is already stored; append again")
    return ids


_INSERT_FULL = (
    "INSERT INTO messages(session_id, uid, position, role, content_kind, content, tool_calls,"
    " tool_call_id, tool_name, finish_reason, timestamp, token_count, meta, fingerprint, kind,"
    " state, compaction_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT(session_id, uid) DO NOTHING")


def insert_many(conn: apsw.Connection, session_id: str,
                rows: list[tuple[EncodedMessage, int, str, str, str | None]]) -> None:
    """Bulk insert of (message, position, kind, state, compaction_id) in one
    statement loop (executemany); a known uid is a no-op. For writers that
    already know the positions and that the uids are new (the bulk import)."""
    f = _forms(conn)
    conn.executemany(_INSERT_FULL, [
        (session_id, f.uid(e.uid), pos, f.role(e.role), e.content_kind, e.content,
         e.tool_calls, e.tool_call_id, e.tool_name, e.finish_reason, e.timestamp,
         e.token_count, f.meta(e.meta, e.finish_reason), f.fingerprint(e.fingerprint),
         f.kind(kind), state, comp)
        for e, pos, kind, state, comp in rows])


# A live load reads no state or compaction id (every value fetched is a
# Python object made per row); a load with the archived rows reads both, last.
_COLUMNS = "id, uid, role, content_kind, content, tool_calls, meta, fingerprint, finish_reason"
_LOAD = f"SELECT {_COLUMNS} FROM messages WHERE session_id = ?"
_LOAD_WITH_STATE = f"SELECT {_COLUMNS}, state, compaction_id FROM messages WHERE session_id = ?"
_tuple_new = tuple.__new__


def _marked(row: tuple, with_state: bool) -> dict[str, Any]:
    return _marked_rows((row,), with_state)[0]


def _marked_rows(rows: Iterable[tuple], with_state: bool) -> list[dict[str, Any]]:
    """Each row as its message dict, marked as persisted. One loop with no
    call per row for the common row (plain text, no meta, no tool calls):
    in a whole load of 10k rows the calls were ~30% of the Python time."""
    out = []
    names = ROLE_NAMES
    for row in rows:
        rid, uid, role, kind, content, tool_calls, meta, fp, finish = row[:9]
        if kind == "text" and not meta and tool_calls is None:  # what `decode` makes of it
            message = {"role": names.get(role, role), "content": content}
            if finish is not None:
                message["finish_reason"] = finish
        else:
            message = decode(role, kind, content, tool_calls, meta, finish)
        # uid_text and fingerprint_text: bytes since m010, text before
        message[UID_KEY] = uid.hex() if type(uid) is bytes else uid
        message[MARKER_KEY] = _tuple_new(Persisted, (rid, fp.hex() if type(fp) is bytes else fp))
        if with_state:
            message[STATE_KEY], message[COMPACTION_KEY] = row[9], row[10]
        out.append(message)
    return out


def _load_sql(include_archived: bool) -> str:
    return _LOAD_WITH_STATE if include_archived else _LOAD + " AND state = 'active'"


class OverLimit(Exception):
    """`load` found more rows than its ``at_most``: nothing was decoded."""


def load(conn: apsw.Connection, session_id: str, *, include_archived: bool = False,
         tail: int | None = None, at_most: int | None = None) -> list[dict[str, Any]]:
    """Messages of a session in order, each marked as persisted.

    With ``include_archived`` every row is returned with its ``_db_state``.
    ``tail`` limits the result to the last N rows (cheap resume). A whole
    load with ``at_most`` raises OverLimit when the session has more rows:
    the read stops one row past it, so no count is run first.
    """
    sql = _load_sql(include_archived)
    rows: Iterable[tuple]
    if tail is not None:
        rows = reversed(list(conn.execute(sql + " ORDER BY position DESC, id DESC LIMIT ?",
                                          (session_id, tail))))
    elif at_most is None:
        rows = conn.execute(sql + " ORDER BY position, id", (session_id,))
    else:
        rows = list(conn.execute(sql + " ORDER BY position, id LIMIT ?", (session_id, at_most + 1)))
        if len(rows) > at_most:
            raise OverLimit(at_most)
    return _marked_rows(rows, include_archived)


POSITION_KEY = "_db_position"
#: ``get_messages`` without a page refuses sessions with more rows than this
#: (``SessionDB.load_limit`` overrides it per store handle).
LOAD_LIMIT = 10_000


def count(conn: apsw.Connection, session_id: str, *, include_archived: bool = False) -> int:
    """Rows of a session (live ones unless ``include_archived``): an index range count."""
    sql = "SELECT count(*) FROM messages WHERE session_id = ?"
    if not include_archived:
        sql += " AND state = 'active'"
    return int(one(conn.execute(sql, (session_id,)))[0])


def load_range(conn: apsw.Connection, session_id: str, *, include_archived: bool = False,
               limit: int, before: int | None = None,
               after: int | None = None) -> list[dict[str, Any]]:
    """One page of a session's rows in order, each marked and carrying its
    ``_db_position``: the first ``limit`` after position ``after``, or, when
    only ``before`` is given, the last ``limit`` before it (``before`` and
    ``after`` both: the first ``limit`` strictly between them)."""
    sql = _load_sql(include_archived)
    args: list[Any] = [session_id]
    sql = sql.replace("SELECT id,", "SELECT position, id,", 1)
    if after is not None:
        sql += " AND position > ?"
        args.append(after)
    if before is not None:
        sql += " AND position < ?"
        args.append(before)
    newest = before is not None and after is None
    sql += (" ORDER BY position DESC, id DESC" if newest else " ORDER BY position, id") + " LIMIT ?"
    found = list(conn.execute(sql, (*args, limit)))
    out = []
    for row in (reversed(found) if newest else found):
        message = _marked(row[1:], include_archived)
        message[POSITION_KEY] = row[0]
        out.append(message)
    return out


def summaries_before(conn: apsw.Connection, session_id: str,
                     position: int) -> list[dict[str, Any]]:
    """The session's live rolling-summary rows placed before ``position`` (a
    partial-index seek): what a resume from the tail keeps of the history."""
    return _marked_rows(conn.execute(
        _LOAD + " AND kind = 'rolling_summary' AND state = 'active' AND position < ?"
        " ORDER BY position, id", (session_id, position)), False)


# -- row edits (transcript operations and compaction) -----------------------

_REWRITE = (
    "UPDATE messages SET role = ?, content_kind = ?, content = ?, tool_calls = ?,"
    " tool_call_id = ?, tool_name = ?, finish_reason = ?, token_count = ?, meta = ?,"
    " fingerprint = ?, timestamp = COALESCE(?, timestamp)"
    " WHERE id = ? AND session_id = ? AND state = 'active'")


def rewrite(conn: apsw.Connection, session_id: str, row_id: int, enc: EncodedMessage,
            timestamp: float | None) -> bool:
    """Replace a live row's content in place (one UPDATE); False if it is not live.

    ``timestamp`` None keeps the row's original time.
    """
    f = _forms(conn)
    conn.execute(_REWRITE, (
        f.role(enc.role), enc.content_kind, enc.content, enc.tool_calls, enc.tool_call_id,
        enc.tool_name, enc.finish_reason, enc.token_count, f.meta(enc.meta, enc.finish_reason),
        f.fingerprint(enc.fingerprint), timestamp, row_id, session_id))
    return conn.changes() == 1


class StoredRow(NamedTuple):
    """A session's row found by uid: what a re-flush compares a message with."""

    id: int
    fingerprint: str
    state: str


class RowStatus(NamedTuple):
    """A row's content fingerprint and state."""

    fingerprint: str
    state: str


class RowPlace(NamedTuple):
    """Where a row is and what it is, for compaction's checks."""

    session_id: str
    uid: str
    position: int
    state: str
    kind: str


class SummaryRow(NamedTuple):
    """A live rolling-summary row."""

    id: int
    uid: str


def find_uid(conn: apsw.Connection, session_id: str, uid: str) -> StoredRow | None:
    """The session's row with this uid, or None."""
    row = conn.execute("SELECT id, fingerprint, state FROM messages"
                       " WHERE session_id = ? AND uid = ?", (session_id, key_for(conn, uid))).fetchone()
    return StoredRow(row[0], fingerprint_text(row[1]), row[2]) if row else None


def status(conn: apsw.Connection, row_id: int) -> RowStatus | None:
    """A row's fingerprint and state, or None."""
    row = conn.execute("SELECT fingerprint, state FROM messages WHERE id = ?",
                       (row_id,)).fetchone()
    return RowStatus(fingerprint_text(row[0]), row[1]) if row else None


def rewind_uids(conn: apsw.Connection, session_id: str, uids: Iterable[str]) -> int:
    """Mark the live rows with these uids rewound (one UPDATE each); returns how many."""
    count = 0
    for uid in uids:
        conn.execute("UPDATE messages SET state = 'rewound'"
                     " WHERE session_id = ? AND uid = ? AND state = 'active'",
                     (session_id, key_for(conn, uid)))
        count += conn.changes()
    return count


def rows_by_id(conn: apsw.Connection, ids: list[int]) -> dict[int, RowPlace]:
    """id -> place of each of the rows that exist."""
    found: dict[int, RowPlace] = {}
    for start in range(0, len(ids), 500):  # stay under SQLite's variable limit
        chunk = ids[start:start + 500]
        marks = ",".join("?" * len(chunk))
        for row in conn.execute("SELECT id, session_id, uid, position, state, kind"
                                f" FROM messages WHERE id IN ({marks})", chunk):
            found[row[0]] = RowPlace(row[1], uid_text(row[2]), row[3], row[4],
                                     kind_text(row[5]))
    return found


def live_summaries(conn: apsw.Connection, session_id: str) -> list[SummaryRow]:
    """The session's live rolling-summary rows (a partial-index seek)."""
    return [SummaryRow(r[0], uid_text(r[1])) for r in conn.execute(
        "SELECT id, uid FROM messages WHERE session_id = ?"
        " AND kind = 'rolling_summary' AND state = 'active'", (session_id,))]


def set_state(conn: apsw.Connection, ids: Iterable[int], state: str,
              compaction_id: str | None) -> None:
    """Set the state (and the compaction that caused it) of rows, one UPDATE each."""
    for rid in ids:
        conn.execute("UPDATE messages SET state = ?, compaction_id = ? WHERE id = ?",
                     (state, compaction_id, rid))


def present_uids(conn: apsw.Connection, session_id: str, uids: list[str]) -> set[str]:
    """Which of ``uids`` the session holds (a seek each on the unique index)."""
    return {uid for uid in uids if conn.execute(
        "SELECT 1 FROM messages WHERE session_id = ? AND uid = ?",
        (session_id, key_for(conn, uid))).fetchone()}


def archived_by(conn: apsw.Connection, compaction_id: str) -> list[int]:
    """Ids of the rows a compaction archived and that are still archived by it."""
    return [r[0] for r in conn.execute(
        "SELECT id FROM messages WHERE compaction_id = ? AND state = 'archived'",
        (compaction_id,))]


# -- the compact row format (m010) ---------------------------------------------

_HEX = "NOT GLOB '*[^0-9a-f]*'"
_TAIL = "',\"finish_reason\":\"' || finish_reason || '\"}'"
# Rows written before m010 hold uid and fingerprint as hex text and a copy of
# finish_reason as meta's last key; this rewrites them the way `insert` now
# writes (the same rules as codec.uid_key, fingerprint_key and stored_meta;
# meta only for the plain ASCII finish reasons every model sends).
_COMPACT = f"""UPDATE messages SET
  uid = CASE WHEN typeof(uid) = 'text' AND length(uid) = 32 AND uid {_HEX}
        THEN unhex(uid) ELSE uid END,
  fingerprint = CASE WHEN typeof(fingerprint) = 'text' AND length(fingerprint) % 2 = 0
        AND fingerprint {_HEX} THEN unhex(fingerprint) ELSE fingerprint END,
  meta = CASE WHEN finish_reason IS NULL OR finish_reason GLOB '*[^a-z_]*' THEN meta
        WHEN meta = '{{"finish_reason":"' || finish_reason || '"}}' THEN '{{}}'
        WHEN length(meta) > length({_TAIL}) AND substr(meta, -length({_TAIL})) = {_TAIL}
        THEN substr(meta, 1, length(meta) - length({_TAIL})) || '}}' ELSE meta END
  WHERE typeof(uid) = 'text' OR typeof(fingerprint) = 'text'"""


def compact_m010_rows(conn: apsw.Connection, *, keep_twins: bool = False) -> int:
    """Rewrite rows in the pre-m010 form (one UPDATE, the caller's
    transaction); returns how many changed. Idempotent: compact rows are
    not touched. A hex uid must never exist in both forms (the unique index
    could not see the pair), so this runs before anything inserts compact
    rows beside legacy ones: in m010, and in a recovered store.
    ``keep_twins``: a row whose compact uid another row already has stays as
    it is (recovery, which may carve both versions) instead of failing."""
    conn.execute(_COMPACT.replace("UPDATE", "UPDATE OR IGNORE", 1) if keep_twins else _COMPACT)
    return conn.changes()


_ROLE_CASE = "CASE role " + " ".join(
    f"WHEN '{name}' THEN '{code}'" for name, code in ROLE_CODES.items()) + " ELSE role END"
# m012: role as its code, kind 'message' as '', meta '{}' as '' (the rules of
# codec.role_key, kind_key and stored_meta). Touches only rows in the old forms.
_CODE = (f"UPDATE messages SET role = {_ROLE_CASE},"
         f" kind = CASE kind WHEN '{MESSAGE_KIND}' THEN '' ELSE kind END,"
         " meta = CASE meta WHEN '{}' THEN '' ELSE meta END"
         f" WHERE role IN ({', '.join(repr(r) for r in ROLE_CODES)})"
         f" OR kind = '{MESSAGE_KIND}' OR meta = '{{}}'")


def code_rows(conn: apsw.Connection) -> int:
    """Rewrite rows whose role, kind or meta are in the pre-m012 forms (one
    UPDATE, the caller's transaction); returns how many changed. Idempotent.
    The caller keeps the search change log out of it (`compact_legacy_rows`):
    the indexed text does not change with the role's form."""
    conn.execute(_CODE)
    return conn.changes()


def compact_legacy_rows(conn: apsw.Connection, *, keep_twins: bool = False) -> int:
    """Every row in today's stored forms (m010's, then m012's rewrite), in
    the caller's transaction; returns how many rows the m012 step changed
    plus how many the m010 step did. For a recovered store (rows carved
    from an older file) and m012. The change-log triggers are detached for
    the role rewrite when attached (a role's code indexes the same text as
    its name: logging every row would make the indexer redo them all)."""
    changed = compact_m010_rows(conn, keep_twins=keep_twins)
    attached = search_index.triggers_attached(conn)
    if attached:
        search_index.drop_triggers(conn)
    changed += code_rows(conn)
    if attached:
        search_index.attach_triggers(conn)
    return changed


def rewind_all(conn: apsw.Connection, session_id: str) -> int:
    """Mark every live row of the session rewound (one UPDATE); returns how many."""
    conn.execute("UPDATE messages SET state = 'rewound' WHERE session_id = ? AND state = 'active'",
                 (session_id,))
    return conn.changes()


def live_rows(conn: apsw.Connection, session_id: str, *,
              tail: int | None = None) -> list[tuple[Any, ...]]:
    """A session's live rows in order as stored: (role, content_kind,
    content, tool_calls, meta, finish_reason), for `decode`: one statement,
    no session check (an unknown session has none); ``tail``: the last N only."""
    if tail is None:
        return conn.execute(_LIVE_ROWS + " ORDER BY position, id", (session_id,)).fetchall()
    found = conn.execute(_LIVE_TAIL, (session_id, tail)).fetchall()
    found.reverse()
    return found


_LIVE_ROWS = ("SELECT role, content_kind, content, tool_calls, meta, finish_reason FROM messages"
              " WHERE session_id = ? AND state = 'active'")
_LIVE_TAIL = _LIVE_ROWS + " ORDER BY position DESC, id DESC LIMIT ?"

