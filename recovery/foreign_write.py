"""Write a foreign file's recovered rows into a new file in its own schema.

A file we did not write is recovered as what it is: the same tables with
their columns in the same physical order, the same indexes, views and
triggers, the header's application_id, user_version and page size kept,
rows copied by column name with their rowids. Nothing of ours goes into it
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
from typing import Any, Sequence

import apsw

from .catalog import BAD_TEXT_KEY, PARTIAL_KEY, ROWID_KEY, Catalog, is_shadow, quote

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


def _insert_rows(conn: apsw.Connection, table: str, rows: list[dict], out: ForeignWrite,
                 lost: list[dict]) -> None:
    names = [r[1] for r in conn.execute(f"PRAGMA table_info({quote(table)})")]
    without_rowid = conn.execute("SELECT 1 FROM pragma_table_list WHERE name = ? AND wr = 1",
                                 (table,)).fetchone() is not None
    alias = _alias(conn, table)
    done = 0
    for row in rows:
        if PARTIAL_KEY in row:  # only some columns survived (from an index): not a row
            out.partial[table] = out.partial.get(table, 0) + 1  # the program could use
            lost.append({"table": table, "reason": "rebuilt from an index, some columns "
                         "lost", "row": row})
            continue
        values = {k: v for k, v in row.items() if k in names}
        if not without_rowid and row.get(ROWID_KEY) is not None:
            values[alias or "rowid"] = row[ROWID_KEY]
        if not values:  # nothing of this row survived: never an empty column list
            lost.append({"table": table, "reason": "no column survived", "row": row})
            continue
        cols = ", ".join(quote(c) if c != "rowid" else "rowid" for c in values)
        try:
            conn.execute(f"INSERT INTO {quote(table)}({cols}) VALUES "
                         f"({', '.join('?' * len(values))})", tuple(values.values()))
            done += 1
        except apsw.ConstraintError as e:
            out.rejected[table] = out.rejected.get(table, 0) + 1
            lost.append({"table": table, "reason": f"rejected by the schema: "
                         f"{type(e).__name__}", "row": row})
    out.inserted[table] = done


def _fts_fill(conn: apsw.Connection, name: str, sql: str, fts_rows: list[dict] | None) -> str:
    m = _CONTENT.search(sql)
    q = quote(name)
    if m and m.group(2):
        conn.execute(f"INSERT INTO {q}({q}) VALUES('rebuild')")
        return f"rebuilt from {m.group(2)}"
    if m:
        return "contentless: created empty (its content is not stored anywhere)"
    if fts_rows is None:
        return "its own content could not be read from the source: created empty"
    cols = [r[1] for r in conn.execute(f"PRAGMA table_info({q})")]
    for row in fts_rows:
        values = [row.get(c) for c in cols]
        conn.execute(f"INSERT INTO {q}(rowid, {', '.join(quote(c) for c in cols)}) VALUES "
                     f"(?, {', '.join('?' * len(cols))})", (row.get(ROWID_KEY), *values))
    return f"filled with its {len(fts_rows)} rows read from the source"


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


def write_foreign(path: Path, cat: Catalog, rows: dict[str, list[dict]], head: HeaderValues,
                  *, lost_and_found: Sequence[tuple[str, dict]] = (),
                  fts_rows: dict[str, list[dict]] | None = None,
                  sequence: dict[str, int] | None = None) -> ForeignWrite:
    """Create ``path`` (exclusively, 0600) in ``cat``'s schema holding ``rows``."""
    out = ForeignWrite()
    _create_exclusive(path)
    conn = apsw.Connection(str(path))
    lost: list[dict] = []
    try:
        if head.page_size:
            conn.execute(f"PRAGMA page_size={int(head.page_size)}")
        conn.execute(f"PRAGMA application_id={int(head.application_id)}")
        conn.execute(f"PRAGMA user_version={int(head.user_version)}")
        with conn:
            for _k, name, _t, sql in _entries(cat, "table"):
                if _virtual(sql):
                    continue
                try:
                    conn.execute(sql)
                except apsw.Error as e:
                    out.notes.append(f"table {name}: could not be created ({e})")
                    lost += [{"table": name, "reason": "table could not be created", "row": r}
                             for r in rows.get(name, [])]
                    continue
                _insert_rows(conn, name, rows.get(name, []), out, lost)
            _sequence(conn, sequence or {})
            for kind in ("index", "view"):
                _schema_step(conn, cat, kind, out)
            _virtuals(conn, cat, out, fts_rows or {})
            _schema_step(conn, cat, "trigger", out)
        if head.wal:
            conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()
    items = lost + [{"lane": lane, **item} for lane, item in lost_and_found]
    if items:
        out.lost_file, out.lost_items = _write_lost(Path(f"{path}{LOST_SUFFIX}"), items), len(items)
    return out


def _virtuals(conn: apsw.Connection, cat: Catalog, out: ForeignWrite,
              fts_rows: dict[str, list[dict]]) -> None:
    for _k, name, _t, sql in _entries(cat, "table"):
        if not _virtual(sql):
            continue
        try:
            conn.execute(sql)
        except apsw.Error as e:
            out.notes.append(f"virtual table {name}: could not be created ({e})")
            continue
        try:
            out.virtual[name] = (_fts_fill(conn, name, sql, fts_rows.get(name))
                                 if re.search(r"\busing\s+fts5\b", sql, re.I)
                                 else "created empty: only FTS5 tables are filled")
        except apsw.Error as e:
            out.virtual[name] = f"could not be filled ({type(e).__name__}: {e})"
            out.notes.append(f"virtual table {name}: {out.virtual[name]}")


def _jsonable(value: Any) -> Any:
    return value.hex() if isinstance(value, (bytes, bytearray, memoryview)) else repr(value)


def _write_lost(path: Path, items: list[dict]) -> str:
    """Rows and finds that have no place in the source's schema, one JSON
    document each (bytes as hex), in a side file of their own."""
    _create_exclusive(path)
    conn = apsw.Connection(str(path))
    try:
        with conn:
            conn.execute("CREATE TABLE lost_and_found (id INTEGER PRIMARY KEY, tbl TEXT, "
                         "reason TEXT, item TEXT NOT NULL)")
            for item in items:
                clean = {k: v for k, v in item.items() if k not in (BAD_TEXT_KEY,)}
                row = clean.get("row")
                if isinstance(row, dict):
                    clean["row"] = {k: v for k, v in row.items()
                                    if k not in ("__origin__", PARTIAL_KEY)}
                conn.execute("INSERT INTO lost_and_found(tbl, reason, item) VALUES (?, ?, ?)",
                             (item.get("table"), item.get("reason"),
                              json.dumps(clean, default=_jsonable, sort_keys=True)))
    finally:
        conn.close()
    return str(path)
