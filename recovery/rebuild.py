"""Write recovered rows into a fresh store created by `SessionDB` (current schema).

All inserts run through the store's writer in one `atomic()` block; the
store's indexer then fills the search index from them before the output is
verified: derived data is rebuilt, never copied. Messages
whose session row is lost get a labelled placeholder session; malformed
JSON values and rows the schema rejects go to a quarantine table with
their original values, never silently dropped.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import apsw

from sessiondb.recovery_api import SessionDB, StorageError

from .catalog import BAD_TEXT_KEY, ROWID_KEY, TableSpec, quote

PLACEHOLDER_SOURCE = "recovered"
PLACEHOLDER_TITLE = "Recovered messages (the original session row was lost)"
QUARANTINE = "recovery_quarantine"
LOST_AND_FOUND = "lost_and_found"
MARKED = "recovery_marked_rows"
PROGRESS_EVERY = 1000
NOT_COPIED = {"leases": "turn leases belong to processes of the damaged store; not carried over"}
# describe the old file (and its index), not the new one
META_SKIP = ("sqlite_version", "fts_stale", "fts_watermark")
JSON_COLUMNS = {"messages": ("tool_calls", "meta")}


@dataclass
class TableWrite:
    """What went into the output for one table."""

    inserted: int = 0
    quarantined: int = 0
    note: str | None = None


@dataclass
class WriteStats:
    tables: dict[str, TableWrite] = field(default_factory=dict)
    placeholders: list[str] = field(default_factory=list)
    parent_links_dropped: int = 0
    quarantined_values: int = 0
    per_session: dict[str, int] = field(default_factory=dict)

    def table(self, name: str) -> TableWrite:
        return self.tables.setdefault(name, TableWrite())


def _columns(conn: apsw.Connection, table: str) -> list[tuple[str, bool]]:
    """(name, is integer-primary-key alias of rowid) for each column."""
    info = list(conn.execute(f"PRAGMA table_info({quote(table)})"))
    pks = [r for r in info if r[5]]
    alias = pks[0][1] if len(pks) == 1 and str(pks[0][2]).upper() == "INTEGER" else None
    return [(r[1], r[1] == alias) for r in info]


def _ensure_quarantine(conn: apsw.Connection) -> None:
    conn.execute(f"CREATE TABLE IF NOT EXISTS {QUARANTINE} (id INTEGER PRIMARY KEY, "
                 "table_name TEXT NOT NULL, row_key TEXT, column_name TEXT, reason TEXT NOT NULL,"
                 " value)")


def _quarantine(conn: apsw.Connection, table: str, key: Any, column: str | None,
                reason: str, value: Any) -> None:
    _ensure_quarantine(conn)
    conn.execute(f"INSERT INTO {QUARANTINE}(table_name, row_key, column_name, reason, value)"
                 " VALUES (?, ?, ?, ?, ?)", (table, str(key), column, reason, value))


class Writer:
    """Inserts rows table by table inside the caller's transaction."""

    def __init__(self, conn: apsw.Connection, stats: WriteStats,
                 progress: Callable[[str, int, int], None] | None = None) -> None:
        self.conn = conn
        self.stats = stats
        self.progress = progress

    def insert_rows(self, table: str, rows: list[dict], *, keep_rowid: bool = True) -> None:
        cols = _columns(self.conn, table)
        names = [n for n, _alias in cols]
        has_alias = any(alias for _n, alias in cols)
        out = self.stats.table(table)
        for done, row in enumerate(rows, 1):
            if self.progress is not None and (done % PROGRESS_EVERY == 0 or done == len(rows)):
                self.progress(f"writing {table}", done, len(rows))
            self.keep_bad_text(table, row)
            values = {k: v for k, v in row.items() if k in names}
            if keep_rowid and not has_alias and ROWID_KEY in row:
                values = {"rowid": row[ROWID_KEY], **values}
            fields = list(values)
            if not fields:  # nothing of the row fits this table: never an empty column list
                _quarantine(self.conn, table, row.get(ROWID_KEY), None,
                            "no column of the row is in the table",
                            json.dumps(row, default=repr))
                out.quarantined += 1
                continue
            sql = (f"INSERT INTO {quote(table)}({', '.join(quote(f) for f in fields)}) "
                   f"VALUES ({', '.join('?' * len(fields))})")
            try:
                self.conn.execute(sql, tuple(values.values()))
                out.inserted += 1
            except apsw.ConstraintError as e:
                _quarantine(self.conn, table, row.get(ROWID_KEY), None,
                            f"rejected by the schema: {type(e).__name__}",
                            json.dumps(row, default=repr))
                out.quarantined += 1

    def keep_bad_text(self, table: str, row: dict) -> None:
        """Raw bytes of text that was not UTF-8 go to quarantine; the row keeps
        the leniently decoded text."""
        for col, raw in row.get(BAD_TEXT_KEY, {}).items():
            _quarantine(self.conn, table, row.get(ROWID_KEY), col, "invalid UTF-8", raw)
            self.stats.quarantined_values += 1

    def clean_json(self, table: str, rows: list[dict]) -> list[dict]:
        """Move malformed JSON values to quarantine, leaving a neutral value."""
        columns = JSON_COLUMNS.get(table, ())
        cleaned = []
        for row in rows:
            row = dict(row)
            checks = list(columns) + (["content"] if row.get("content_kind") == "json" else [])
            for col in checks:
                if not _json_ok(row.get(col)):
                    _quarantine(self.conn, table, row.get(ROWID_KEY), col, "malformed JSON",
                                row.get(col))
                    self.stats.quarantined_values += 1
                    row[col] = {"meta": "{}", "tool_calls": None, "content": None}[col]
                    if col == "content":
                        row["content_kind"] = "null"
            cleaned.append(row)
        return cleaned


def _json_ok(value: Any) -> bool:
    if value is None:
        return True
    try:
        json.loads(value)
    except (TypeError, ValueError):
        return False
    return True


def _sessions(w: Writer, rows: list[dict]) -> None:
    """Insert sessions without parents first, then link parents that exist."""
    parents = {r.get("id"): r.get("parent_session_id") for r in rows}
    w.insert_rows("sessions", [{**r, "parent_session_id": None} for r in rows])
    present = {r[0] for r in w.conn.execute("SELECT id FROM sessions")}
    for sid, parent in parents.items():
        if parent is None or sid not in present:
            continue
        if parent in present:
            w.conn.execute("UPDATE sessions SET parent_session_id = ? WHERE id = ?",
                           (parent, sid))
        else:
            w.stats.parent_links_dropped += 1


def _placeholders(w: Writer, messages: list[dict]) -> None:
    """A labelled session for every session id whose row did not survive."""
    present = {r[0] for r in w.conn.execute("SELECT id FROM sessions")}
    orphans: dict[str, list[float]] = {}
    for m in messages:
        sid = m.get("session_id")
        if isinstance(sid, str) and sid not in present:
            ts = m.get("timestamp")
            orphans.setdefault(sid, []).append(ts if isinstance(ts, (int, float)) else time.time())
    for sid, stamps in sorted(orphans.items()):
        w.conn.execute(
            "INSERT INTO sessions(id, source, title, started_at, updated_at, message_count)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (sid, PLACEHOLDER_SOURCE, PLACEHOLDER_TITLE, min(stamps), max(stamps), len(stamps)))
        w.stats.placeholders.append(sid)
        w.stats.table("sessions").inserted += 1


def _recount_sessions(w: Writer) -> None:
    """Every session's counters are what was recovered, never the source row's:
    a session that lost 4 of 250 rows says 246 (it said 250 once), and one
    rebuilt from indexes gets counters it had lost. Tool calls are counted
    the way appends count them (the length of each row's tool_calls list)."""
    w.conn.execute(
        "UPDATE sessions SET message_count = (SELECT count(*) FROM messages AS m"
        " WHERE m.session_id = sessions.id), tool_call_count = (SELECT coalesce(sum("
        "CASE WHEN json_valid(m.tool_calls) AND json_type(m.tool_calls) = 'array'"
        " THEN json_array_length(m.tool_calls) ELSE 0 END), 0) FROM messages AS m"
        " WHERE m.session_id = sessions.id)")


def _extra_table(w: Writer, spec: TableSpec, rows: list[dict]) -> None:
    exists = w.conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                            (spec.name,)).fetchone()
    if not exists:
        try:
            w.conn.execute(spec.sql)
        except apsw.Error as e:
            w.stats.table(spec.name).note = f"could not create the table: {type(e).__name__}"
            for row in rows:
                _quarantine(w.conn, spec.name, row.get(ROWID_KEY), None,
                            "table could not be created", json.dumps(row, default=repr))
                w.stats.table(spec.name).quarantined += 1
            return
    w.insert_rows(spec.name, rows)


def write_store(path: Path, specs: dict[str, TableSpec], rows: dict[str, list[dict]], *,
                lost_and_found: Sequence[tuple[str, dict]] = (), vfs: str | None = None,
                progress: Callable[[str, int, int], None] | None = None,
                marked: Sequence[tuple[str, Any, str]] = ()) -> WriteStats:
    """Create ``path`` with the current schema and insert the recovered rows,
    plus the (lane, item) pairs no lane could attribute to a table and the
    (table, rowid, mark) of rows that were not live data (deleted rows from
    free pages, rows from uncommitted WAL frames)."""
    stats = WriteStats()
    with SessionDB(path, vfs=vfs) as db:
        with db.atomic() as conn:
            w = Writer(conn, stats, progress)
            _sessions(w, rows.get("sessions", []))
            messages = w.clean_json("messages", rows.get("messages", []))
            _placeholders(w, messages)
            w.insert_rows("messages", messages)
            _recount_sessions(w)
            _state_meta(w, rows.get("state_meta", []))
            for name, spec in specs.items():
                if name in ("sessions", "messages", "state_meta") or spec.kind != "data":
                    continue
                if name in NOT_COPIED:
                    stats.table(name).note = NOT_COPIED[name]
                    continue
                _extra_table(w, spec, rows.get(name, []))
            _lost_and_found(w, specs, lost_and_found)
            _marked(w, marked)
            stats.per_session = dict(conn.execute(  # type: ignore[arg-type]  # (id, n)
                "SELECT session_id, count(*) FROM messages GROUP BY session_id").fetchall())
        try:  # the index is written after the commit: fill it before verify
            db.catch_up_index()
        except StorageError:  # an output that cannot be read back: verify says so
            pass
    return stats


def _lost_and_found(w: Writer, specs: dict[str, TableSpec],
                    items: Sequence[tuple[str, dict]]) -> None:
    """Unattributed finds, one JSON document each (bytes as hex), never dropped."""
    if not items:
        return
    name = LOST_AND_FOUND if LOST_AND_FOUND not in specs else f"recovery_{LOST_AND_FOUND}"
    # where the find was (the carver knows its page, cell and rowid), then the
    # whole find, raw values included, as one JSON document
    w.conn.execute(f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, lane TEXT NOT NULL, "
                   "page INTEGER, cell INTEGER, source_rowid INTEGER, item TEXT NOT NULL)")
    for lane, item in items:
        where = tuple(item.get(k) if isinstance(item.get(k), int) else None
                      for k in ("page", "cell", "rowid"))
        w.conn.execute(f"INSERT INTO {name}(lane, page, cell, source_rowid, item) "
                       "VALUES (?, ?, ?, ?, ?)",
                       (lane, *where, json.dumps(item, default=_jsonable, sort_keys=True)))
    w.stats.table(name).inserted = len(items)


def _marked(w: Writer, marked: Sequence[tuple[str, Any, str]]) -> None:
    """Which recovered rows were not live data, so a reader can tell them apart."""
    if not marked:
        return
    w.conn.execute(f"CREATE TABLE {MARKED} (id INTEGER PRIMARY KEY, table_name TEXT NOT NULL,"
                   " source_rowid INTEGER, mark TEXT NOT NULL)")
    w.conn.executemany(f"INSERT INTO {MARKED}(table_name, source_rowid, mark) VALUES (?, ?, ?)",
                       marked)
    w.stats.table(MARKED).inserted = len(marked)


def _jsonable(value: Any) -> Any:
    return value.hex() if isinstance(value, (bytes, bytearray, memoryview)) else repr(value)


def _state_meta(w: Writer, rows: list[dict]) -> None:
    out = w.stats.table("state_meta")
    for row in rows:
        if row.get("key") in META_SKIP:
            continue
        try:
            w.conn.execute("INSERT INTO state_meta(key, value) VALUES (?, ?) "
                           "ON CONFLICT(key) DO NOTHING", (row.get("key"), row.get("value")))
        except apsw.ConstraintError:
            _quarantine(w.conn, "state_meta", row.get(ROWID_KEY), None,
                        "rejected by the schema", json.dumps(row, default=repr))
            out.quarantined += 1
            continue
        out.inserted += w.conn.changes()
