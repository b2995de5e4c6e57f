"""Write a foreign file's recovered rows into a new file in its own schema.

A file we did not write is recovered as what it is: the same tables with
their columns in the same physical order, the same indexes, views and
triggers, the header's application_id, user_version and page size kept,
rows copied by column name with their rowids, batch by batch as the lanes
read them (`ForeignSink`). Nothing of ours goes into it
(no placeholder sessions, no tables of ours, no application_id of ours):
rows its schema rejects and finds no table claims go to a side file,
``NEW.lost-and-found``, made only when there is something to keep.

Order: tables, rows (triggers are not there yet, so none fires on a copied
row), AUTOINCREMENT counters, indexes, views, virtual tables filled from
their content (FTS5 with external content: ``rebuild``; FTS5 keeping its
own content: the rows read from the source's virtual table; contentless
or other modules: created and reported), triggers last.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import apsw

from ..lanes import TableState
from ..schema import (BAD_TEXT_KEY, Catalog, ORIGIN_KEY, PARTIAL_KEY, READ_ERRORS, ROWID_KEY,
                      is_shadow, quote)
from .sink import DUPLICATE, NEW, QUARANTINED, RowSink, output_errors

LOST_SUFFIX = ".lost-and-found"
_CONTENT = re.compile(r"\bcontent\s*=\s*(['\"]?)([^,'\")]*)\1", re.I)


@dataclass
class ForeignWrite:
    """What went into the output, table by table, and what did not."""

    inserted: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)
    partial: dict[str, int] = field(default_factory=dict)  # kept in the side file only
    notes: list[str] = field(default_factory=list)
    virtual: dict[str, str] = field(default_factory=dict)  # vtable -> how it was filled
    lost_file: str | None = None
    lost_items: int = 0


@dataclass
class HeaderValues:
    """The source header's values the output keeps."""

    page_size: int | None = None
    application_id: int = 0
    user_version: int = 0
    wal: bool = False


def _create_exclusive(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)


def _virtual(sql: str | None) -> bool:
    return bool(sql and re.match(r"\s*create\s+virtual\s+table", sql, re.I))


def _entries(cat: Catalog, kind: str) -> list[tuple[str, str, str, str]]:
    virtual = {n for k, n, _t, s in cat.entries if k == "table" and _virtual(s)}
    out = []
    for k, name, tbl, sql in cat.entries:
        if k != kind or not sql or name.startswith("sqlite_"):
            continue
        if k == "table" and is_shadow(name, sql, virtual):
            continue  # a virtual table's shadow: made by the virtual table itself
        out.append((k, name, tbl, sql))
    return out


def _alias(conn: apsw.Connection, table: str) -> str | None:
    info = list(conn.execute(f"PRAGMA table_info({quote(table)})"))
    pks = [r for r in info if r[5]]
    return pks[0][1] if len(pks) == 1 and str(pks[0][2]).upper() == "INTEGER" else None


def _fts_fill(conn: apsw.Connection, name: str, sql: str, source: apsw.Connection | None,
              own: bool) -> str:
    m = _CONTENT.search(sql)
    q = quote(name)
    if m and m.group(2):
        conn.execute(f"INSERT INTO {q}({q}) VALUES('rebuild')")
        return f"rebuilt from {m.group(2)}"
    if m:
        return "contentless: created empty (its content is not stored anywhere)"
    if source is None or not own:
        return "its own content could not be read from the source: created empty"
    cols = [r[1] for r in conn.execute(f"PRAGMA table_info({q})")]
    sql_in = (f"INSERT INTO {q}(rowid, {', '.join(quote(c) for c in cols)}) VALUES "
              f"(?, {', '.join('?' * len(cols))})")
    n = 0
    try:
        with conn:  # a savepoint: a read failing half way leaves the table empty
            cur = source.execute(f"SELECT rowid, * FROM {q}")
            have = [d[0] for d in cur.getdescription()][1:]
            for r in cur:
                values = dict(zip(have, r[1:]))
                conn.execute(sql_in, (r[0], *[values.get(c) for c in cols]))
                n += 1
    except READ_ERRORS:
        return "its own content could not be read from the source: created empty"
    return f"filled with its {n} rows read from the source"


def _schema_step(conn: apsw.Connection, cat: Catalog, kind: str, out: ForeignWrite) -> None:
    """Create every index, view or trigger of the source; one SQLite refuses
    is named, the rest still made."""
    for _k, name, _tbl, sql in _entries(cat, kind):
        try:
            conn.execute(sql)
        except apsw.Error as e:
            out.notes.append(f"{kind} {name}: could not be created ({type(e).__name__}: {e})")


def _sequence(conn: apsw.Connection, sequence: dict[str, int]) -> None:
    if not sequence or not conn.execute("SELECT 1 FROM sqlite_master WHERE name = "
                                        "'sqlite_sequence'").fetchone():
        return
    for name, seq in sequence.items():
        if not conn.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?",
                            (seq, name)) or not conn.changes():
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone():
                conn.execute("INSERT INTO sqlite_sequence(name, seq) VALUES (?, ?)", (name, seq))


class ForeignSink(RowSink):
    """The new file in the source's own schema, written as batches arrive:
    tables first (no index, view or trigger yet, so none fires on a copied
    row), rows as they stream, the rest of the schema at `finish`."""

    def __init__(self, path: Path, cat: Catalog, head: HeaderValues,
                 states: dict[str, TableState],
                 progress: Callable[[str, int, int], None] | None = None) -> None:
        _create_exclusive(path)
        super().__init__(path, apsw.Connection(str(path)), states, progress)
        self.cat, self.head, self.out = cat, head, ForeignWrite()
        self.lost_path = Path(f"{path}{LOST_SUFFIX}")
        self.lost_conn: apsw.Connection | None = None
        self.columns: dict[str, tuple[set[str], bool, str | None]] = {}
        self.uncreated: set[str] = set()
        with output_errors(path):
            self._create_tables()

    def _create_tables(self) -> None:
        conn = self.conn
        if self.head.page_size:
            conn.execute(f"PRAGMA page_size={int(self.head.page_size)}")
        conn.execute(f"PRAGMA application_id={int(self.head.application_id)}")
        conn.execute(f"PRAGMA user_version={int(self.head.user_version)}")
        conn.execute("PRAGMA journal_mode=MEMORY").fetchall()  # a private temp file
        conn.execute("PRAGMA synchronous=OFF")  # synced once, at the end
        with conn:
            for _k, name, _t, sql in _entries(self.cat, "table"):
                if _virtual(sql):
                    continue
                try:
                    conn.execute(sql)
                except apsw.Error as e:
                    self.out.notes.append(f"table {name}: could not be created ({e})")
                    self.uncreated.add(name)
                    continue
                self.out.inserted[name] = 0

    def _cols(self, table: str) -> tuple[set[str], bool, str | None]:
        if table not in self.columns:
            names = {r[1] for r in self.conn.execute(f"PRAGMA table_info({quote(table)})")}
            without_rowid = self.conn.execute(
                "SELECT 1 FROM pragma_table_list WHERE name = ? AND wr = 1",
                (table,)).fetchone() is not None
            self.columns[table] = (names, without_rowid, _alias(self.conn, table))
        return self.columns[table]

    def insert(self, table: str, row: dict) -> str:
        if table in self.uncreated or table not in self.out.inserted:
            return self._lose(table, "table could not be created", row)
        names, without_rowid, alias = self._cols(table)
        values = {k: v for k, v in row.items() if k in names}
        rowid = row.get(ROWID_KEY)
        if not without_rowid and rowid is not None:
            values[alias or "rowid"] = rowid
        if not values:  # nothing of this row survived: never an empty column list
            return self._lose(table, "no column survived", row)
        cols = ", ".join(quote(c) if c != "rowid" else "rowid" for c in values)
        try:
            self.conn.execute(f"INSERT INTO {quote(table)}({cols}) VALUES "
                              f"({', '.join('?' * len(values))})", tuple(values.values()))
        except apsw.ConstraintError as e:
            if not without_rowid and rowid is not None and self.conn.execute(
                    f"SELECT 1 FROM {quote(table)} WHERE rowid = ?", (rowid,)).fetchone():
                return DUPLICATE  # an earlier lane's copy of the row
            self.out.rejected[table] = self.out.rejected.get(table, 0) + 1
            return self._lose(table, f"rejected by the schema: {type(e).__name__}", row)
        self.out.inserted[table] += 1
        return NEW

    def _lose(self, table: str, reason: str, row: dict) -> str:
        self._lost_rows([{"table": table, "reason": reason, "row": row}])
        return QUARANTINED

    def keep_lost(self, lane: str, items: list[dict]) -> None:
        self._lost_rows([{"lane": lane, **item} for item in items])

    def _lost_rows(self, items: list[dict]) -> None:
        """Rows and finds that have no place in the source's schema, one JSON
        document each (bytes as hex), in a side file of their own."""
        if self.lost_conn is None:
            _create_exclusive(self.lost_path)
            self.lost_conn = apsw.Connection(str(self.lost_path))
            self.lost_conn.execute("CREATE TABLE lost_and_found (id INTEGER PRIMARY KEY, "
                                   "tbl TEXT, reason TEXT, item TEXT NOT NULL)")
            self.out.lost_file = str(self.lost_path)
        with self.lost_conn:
            for item in items:
                clean = {k: v for k, v in item.items() if k not in (BAD_TEXT_KEY,)}
                row = clean.get("row")
                if isinstance(row, dict):
                    clean["row"] = {k: v for k, v in row.items()
                                    if k not in (ORIGIN_KEY, PARTIAL_KEY)}
                self.lost_conn.execute(
                    "INSERT INTO lost_and_found(tbl, reason, item) VALUES (?, ?, ?)",
                    (item.get("table"), item.get("reason"),
                     json.dumps(clean, default=_jsonable, sort_keys=True)))
        self.out.lost_items += len(items)

    def finish(self, source: apsw.Connection | None, own_fts: set[str],
               sequence: dict[str, int]) -> ForeignWrite:
        """Rows only rebuilt in part go to the side file (not rows the program
        could use); then counters, indexes, views, virtual tables (FTS5 own
        content streamed from ``source``), triggers, and the journal mode."""
        for table, _lane, row in self.held_partial():
            self.out.partial[table] = self.out.partial.get(table, 0) + 1
            self._lost_rows([{"table": table, "reason": "rebuilt from an index, some columns "
                              "lost", "row": row}])
        with output_errors(self.path):
            self._complete(source, own_fts, sequence)
        return self.out

    def _complete(self, source: apsw.Connection | None, own_fts: set[str],
                  sequence: dict[str, int]) -> None:
        conn = self.conn
        with conn:
            _sequence(conn, sequence)
            for kind in ("index", "view"):
                _schema_step(conn, self.cat, kind, self.out)
            _virtuals(conn, self.cat, self.out, source, own_fts)
            _schema_step(conn, self.cat, "trigger", self.out)
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(f"PRAGMA journal_mode={'WAL' if self.head.wal else 'DELETE'}").fetchall()

    def close(self) -> None:
        self.conn.close()
        if self.lost_conn is not None:
            self.lost_conn.close()
            self.lost_conn = None


def _virtuals(conn: apsw.Connection, cat: Catalog, out: ForeignWrite,
              source: apsw.Connection | None, own_fts: set[str]) -> None:
    for _k, name, _t, sql in _entries(cat, "table"):
        if not _virtual(sql):
            continue
        try:
            conn.execute(sql)
        except apsw.Error as e:
            out.notes.append(f"virtual table {name}: could not be created ({e})")
            continue
        try:
            out.virtual[name] = (_fts_fill(conn, name, sql, source, name in own_fts)
                                 if re.search(r"\busing\s+fts5\b", sql, re.I)
                                 else "created empty: only FTS5 tables are filled")
        except apsw.Error as e:
            out.virtual[name] = f"could not be filled ({type(e).__name__}: {e})"
            out.notes.append(f"virtual table {name}: {out.virtual[name]}")


def _jsonable(value: Any) -> Any:
    return value.hex() if isinstance(value, (bytes, bytearray, memoryview)) else repr(value)
