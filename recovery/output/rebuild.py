"""Write recovered rows into a fresh store of ours (current schema), in bulk.

The file is created by `SessionDB` (every migration, the generation stamp),
then written on one plain connection as the lanes stream rows in: one
transaction per batch, no fsync until the end (the file is a temporary
name nobody else opens, removed on any failure), foreign keys and
secondary indexes off while loading. The unique
keys stay: they are what resolves a row found by two lanes. `finish` then
ties the rows together (parent links, placeholder sessions for orphaned
messages, rows whose parent is lost to quarantine, recounted sessions),
builds the secondary indexes and the search index once (`hstate_recovery.output.bulk`),
and leaves the file in WAL mode like any store. The search index is
rebuilt, or taken over from the source where that is provably the same
(`hstate_recovery.output.search_reuse`). Malformed JSON values and rows the schema rejects go to a
quarantine table with their original values, never silently dropped.
"""
from __future__ import annotations

import json
import operator
import os
from pathlib import Path
from typing import Any, Callable

import apsw

from sessiondb.recovery_api import ParallelBuild, SessionDB

from ..lanes import ImageRows, TableState
from ..schema import BAD_TEXT_KEY, ROWID_KEY, TableSpec, quote
from . import bulk, image_copy
from .sink import DUPLICATE, NEW, QUARANTINED, RowSink, output_errors
from .write_stats import (LOST_AND_FOUND, MARKED, NOT_COPIED, PLACEHOLDER_SOURCE,
                          PLACEHOLDER_TITLE, QUARANTINE, TableWrite, WriteStats)

__all__ = ["LOST_AND_FOUND", "MARKED", "NOT_COPIED", "PLACEHOLDER_SOURCE", "PLACEHOLDER_TITLE",
           "QUARANTINE", "StoreSink", "TableWrite", "WriteStats"]

# describe the old file (and its index), not the new one
META_SKIP = ("sqlite_version", "fts_stale", "fts_watermark")
JSON_COLUMNS = {"messages": ("tool_calls", "meta")}
NEUTRAL = {"meta": "{}", "tool_calls": None, "content": None}
UNIQUE_KEYS = {"messages": ("session_id", "uid"), "sessions": ("id",)}  # ours, by name


def _json_ok(value: Any) -> bool:
    if value is None or value == "{}" or value == "[]":  # most rows: nothing to parse
        return True
    try:
        json.loads(value)
    except (TypeError, ValueError):
        return False
    return True


def _jsonable(value: Any) -> Any:
    return value.hex() if isinstance(value, (bytes, bytearray, memoryview)) else repr(value)


def _open(path: Path, vfs: str | None) -> apsw.Connection:
    """The new store made by `SessionDB` (migrations, stamp), and a plain
    connection to it opened before the store closes, so the schema's pages
    stay in the WAL like every later write until `finish` checkpoints: a
    disk that loses what is written shows in the verification, not half way."""
    # SQLITE_OPEN_URI: the search index may be taken over from the source's
    # copy, attached read-only by URI (the path itself is absolute, never a URI)
    flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI
    with SessionDB(path, vfs=vfs, background_index=False), output_errors(path):
        return apsw.Connection(os.path.abspath(path), flags=flags, vfs=vfs) if vfs else \
            apsw.Connection(os.path.abspath(path), flags=flags)


class StoreSink(RowSink):
    """The new store of ours, written as batches arrive; `finish` completes it."""

    def __init__(self, path: Path, specs: dict[str, TableSpec], states: dict[str, TableState],
                 *, vfs: str | None = None,
                 progress: Callable[[str, int, int], None] | None = None) -> None:
        conn = _open(path, vfs)
        super().__init__(path, conn, states, progress)
        self.specs = specs
        self.stats = WriteStats()
        self.columns: dict[str, tuple[set[str], bool]] = {}
        self.sql: dict[tuple[str, tuple[str, ...]], str] = {}
        self.plans: dict[tuple[str, tuple[str, ...]], Any] = {}  # (table, row keys) -> plan
        self.meta_seen: set[Any] = set()
        self.made: set[str] = set()  # side tables created so far
        self.follower: ParallelBuild | None = None  # `follow_search`
        self.image = image_copy.ImageAttach(conn)  # the backup image, for `copy_image`
        try:
            with output_errors(path):
                self.deferred = bulk.start(conn)
        except BaseException:
            conn.close()
            raise

    # -- one row --------------------------------------------------------------

    def writable(self, table: str) -> bool:
        if table in NOT_COPIED:
            self.stats.table(table).note = NOT_COPIED[table]
            return False
        return True

    def _prepare(self, table: str) -> bool:
        """Column names of ``table`` (created from the source's schema when the
        store has no such table); False when it cannot be created."""
        if not self.has_table(table):
            spec = self.specs.get(table)
            try:
                self.conn.execute(spec.sql if spec is not None else "")
            except apsw.Error as e:
                self.stats.table(table).note = f"could not create the table: {type(e).__name__}"
                self.columns.pop(table, None)
                return False
        info = list(self.conn.execute(f"PRAGMA table_info({quote(table)})"))
        pks = [r for r in info if r[5]]
        alias = len(pks) == 1 and str(pks[0][2]).upper() == "INTEGER"
        self.columns[table] = ({r[1] for r in info}, alias)
        return True

    def insert(self, table: str, row: dict) -> str:
        if table == "state_meta":
            return self._meta(row)
        if table not in self.columns and not self._prepare(table):
            return self._reject(table, row, "table could not be created")
        row, notes = self._clean(table, row)
        plan = self._plan(table, tuple(row))
        if plan is None:  # nothing of the row fits this table: never an empty column list
            return self._reject(table, row, "no column of the row is in the table")
        sql, values = plan
        try:
            self.conn.execute(sql, values(row))
        except apsw.ConstraintError as e:
            outcome = self._reject(table, row, f"rejected by the schema: {type(e).__name__}")
        else:
            outcome = NEW if self.conn.changes() else self._taken(table, row)
        if outcome != DUPLICATE:
            self._note(table, row, notes)
        if outcome == NEW:
            self.stats.table(table).inserted += 1
        return outcome

    def _fields(self, table: str, keys: tuple[str, ...]) -> tuple[str, ...]:
        """The columns a row with these keys is written to: its keys that are
        columns, the rowid first when it is no alias."""
        names, alias = self.columns[table]
        fields = tuple(k for k in keys if k in names)
        if not alias and ROWID_KEY in keys:
            fields = ("rowid",) + tuple(f for f in fields if f != "rowid")
        return fields

    def _plan(self, table: str, keys: tuple[str, ...]
              ) -> tuple[str, Callable[[dict], tuple]] | None:
        """The INSERT for rows with these keys and how to take its values from
        a row, made once per shape of row (a lane's rows all have one)."""
        plan = self.plans.get((table, keys))
        if plan is None and (table, keys) not in self.plans:
            fields = self._fields(table, keys)
            if fields:
                get = operator.itemgetter(*(ROWID_KEY if f == "rowid" else f for f in fields))
                plan = (self._sql(table, fields),
                        get if len(fields) > 1 else (lambda row, g=get: (g(row),)))
            self.plans[(table, keys)] = plan
        return plan

    def _sql(self, table: str, fields: tuple[str, ...]) -> str:
        key = (table, fields)
        if key not in self.sql:
            self.sql[key] = (f"INSERT INTO {quote(table)}({', '.join(quote(f) for f in fields)})"
                             f" VALUES ({', '.join('?' * len(fields))}) ON CONFLICT DO NOTHING")
        return self.sql[key]

    def _taken(self, table: str, row: dict) -> str:
        """A unique key was taken: the same row from an earlier lane (same
        rowid, or our tables' unique key), or else a clash the schema rejects."""
        if table in UNIQUE_KEYS or self.conn.execute(
                f"SELECT 1 FROM {quote(table)} WHERE rowid = ?", (row.get(ROWID_KEY),)).fetchone():
            return DUPLICATE
        return self._reject(table, row, "rejected by the schema: ConstraintError")

    def _clean(self, table: str, row: dict) -> tuple[dict, list[tuple]]:
        """Malformed JSON values replaced by a neutral value, and the
        (column, reason, value) notes the quarantine gets if the row is kept."""
        notes = [(col, "invalid UTF-8", raw) for col, raw in row.get(BAD_TEXT_KEY, {}).items()]
        checks = list(JSON_COLUMNS.get(table, ()))
        if table == "messages" and row.get("content_kind") == "json":
            checks.append("content")
        bad = [c for c in checks if not _json_ok(row.get(c))
               and not image_copy.kept_as_is(c, row.get(c))]  # m012's empty meta
        if not bad:
            return row, notes
        row = dict(row)
        for col in bad:
            notes.append((col, "malformed JSON", row.get(col)))
            row[col] = NEUTRAL[col]
            if col == "content":
                row["content_kind"] = "null"
        return row, notes

    def _note(self, table: str, row: dict, notes: list[tuple]) -> None:
        for col, reason, value in notes:
            self.quarantine(table, row.get(ROWID_KEY), col, reason, value)
            self.stats.quarantined_values += 1

    def _reject(self, table: str, row: dict, reason: str) -> str:
        self.quarantine(table, row.get(ROWID_KEY), None, reason, json.dumps(
            {k: v for k, v in row.items() if not k.startswith("__")}, default=repr))
        self.stats.table(table).quarantined += 1
        return QUARANTINED

    def quarantine(self, table: str, key: Any, column: str | None, reason: str,
                   value: Any) -> None:
        self._side(QUARANTINE, f"CREATE TABLE {QUARANTINE} (id INTEGER PRIMARY KEY, "
                   "table_name TEXT NOT NULL, row_key TEXT, column_name TEXT, "
                   "reason TEXT NOT NULL, value)")
        self.conn.execute(f"INSERT INTO {QUARANTINE}(table_name, row_key, column_name, reason,"
                          " value) VALUES (?, ?, ?, ?, ?)", (table, str(key), column, reason,
                                                             value))

    def _side(self, name: str, create: str) -> None:
        if name not in self.made:
            if not self.has_table(name):
                self.conn.execute(create)
            self.made.add(name)

    def _meta(self, row: dict) -> str:
        key = row.get("key")
        if key in self.meta_seen:
            return DUPLICATE
        self.meta_seen.add(key)
        if key in META_SKIP:
            return NEW
        try:
            self.conn.execute("INSERT INTO state_meta(key, value) VALUES (?, ?) "
                              "ON CONFLICT(key) DO NOTHING", (key, row.get("value")))
        except apsw.ConstraintError:
            return self._reject("state_meta", row, "rejected by the schema")
        self.stats.table("state_meta").inserted += self.conn.changes()
        return NEW

    # -- a batch straight from the backup image (`hstate_recovery.output.image_copy`) -----

    def copy_image(self, table: str, lane: str, batch: ImageRows) -> bool:
        with output_errors(self.path):
            return self._copy_image(table, lane, batch)

    def _copy_image(self, table: str, lane: str, batch: ImageRows) -> bool:
        state = self.states.get(table)
        rowids = batch.rowids
        if (state is None or not rowids or table == "state_meta" or not self.writable(table)
                or (table not in self.columns and not self._prepare(table))
                or not self.untouched(table, rowids[0], rowids[-1])):
            return False
        fields = self._fields(table, (ROWID_KEY, *batch.spec.columns))
        if not fields or not self.image.ready(batch.image):
            return False
        clean = image_copy.clean_sql(JSON_COLUMNS.get(table, ()), batch.spec.columns, table)
        if not image_copy.copy_rows(self.conn, table, fields, clean, rowids):
            return False
        self.stats.table(table).inserted += len(rowids)
        state.count(lane, len(rowids))
        state.span(rowids[0])
        state.span(rowids[-1])
        self.written[table] = self.written.get(table, 0) + len(rowids)
        if self.progress is not None:
            self.progress(f"writing {table}", self.written[table], 0)
        batch.taken = True
        return True

    # -- what is not a table's row ------------------------------------------

    def mark(self, table: str, rowid: Any, mark: str) -> None:
        """Which recovered rows were not live data, so a reader can tell them apart."""
        self._side(MARKED, f"CREATE TABLE {MARKED} (id INTEGER PRIMARY KEY, table_name TEXT "
                   "NOT NULL, source_rowid INTEGER, mark TEXT NOT NULL)")
        self.conn.execute(f"INSERT INTO {MARKED}(table_name, source_rowid, mark) VALUES "
                          "(?, ?, ?)", (table, rowid, mark))
        self.stats.table(MARKED).inserted += 1

    def keep_lost(self, lane: str, items: list[dict]) -> None:
        """Unattributed finds, one JSON document each (bytes as hex): where the
        find was (the carver knows its page, cell and rowid), then all of it."""
        name = LOST_AND_FOUND if LOST_AND_FOUND not in self.specs else \
            f"recovery_{LOST_AND_FOUND}"
        self._side(name, f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, lane TEXT NOT NULL, "
                   "page INTEGER, cell INTEGER, source_rowid INTEGER, item TEXT NOT NULL)")
        for item in items:
            where = tuple(item.get(k) if isinstance(item.get(k), int) else None
                          for k in ("page", "cell", "rowid"))
            self.conn.execute(f"INSERT INTO {name}(lane, page, cell, source_rowid, item) "
                              "VALUES (?, ?, ?, ?, ?)",
                              (lane, *where, json.dumps(item, default=_jsonable,
                                                        sort_keys=True)))
        self.stats.table(name).inserted += len(items)

    # -- the end --------------------------------------------------------------

    def follow_search(self) -> None:
        """Start building the word index from the rows as they are
        written (`bulk.follow_rows`): for a source whose index will be
        rebuilt, not taken over."""
        if self.follower is None:
            self.follower = bulk.follow_rows(self.path)

    def close(self) -> None:
        self.image.close()
        if self.follower is not None:
            self.follower.close()
            self.follower = None
        super().close()

    def finish(self, search_from: Path | None = None,
               not_copied: str | None = None) -> WriteStats:
        """Rows held in part go in, then the store is tied together and its
        indexes built (`hstate_recovery.output.bulk.finish`; the search index taken over
        from ``search_from`` when given)."""
        held = self.held_partial()
        self.image.close()
        with output_errors(self.path):
            with self.conn:
                for table, _lane, row in held:
                    if self.writable(table):
                        self.insert(table, row)
            bulk.finish(self.conn, self.stats, self.deferred, self.quarantine, self.progress,
                        search_from=search_from, not_copied=not_copied,
                        follower=self.follower)
        return self.stats
