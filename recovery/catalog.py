"""What tables a (copied) database holds and which of them carry data.

Derived data is never copied: virtual tables, their shadow tables (and
anything named like the store's FTS indexes) are rebuilt in the output.
SQLite's own tables and the migration ledger are bookkeeping, not data.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import apsw

DERIVED_PREFIXES = ("messages_fts", "messages_trigram", "search_changes")
LEDGER_TABLES = ("migrations",)
ROWID_KEY = "rowid"  # key of the row id in every row dict a lane returns
PARTIAL_KEY = "__partial__"  # present in a row dict rebuilt without some columns
BAD_TEXT_KEY = "__bad_text__"  # column -> raw bytes of text that is not valid UTF-8
ORIGIN_KEY = "__origin__"  # a carved row's RowOrigin (page, cell, carver lane, from WAL)
# apsw decodes text strictly: bytes that are not UTF-8 fail a read like damage does.
READ_ERRORS = (apsw.Error, UnicodeDecodeError)


@dataclass
class TableSpec:
    """One table of the source: its columns and how to address its rows."""

    name: str
    columns: list[str]
    rowid: bool = True
    root_page: int = 0
    sql: str = ""
    kind: str = "data"  # data | ledger | derived | internal
    required: list[str] = field(default_factory=list)  # NOT NULL or key, no default

    def quoted(self) -> str:
        return quote(self.name)

    def select_list(self) -> str:
        cols = ", ".join(quote(c) for c in self.columns)
        return f"rowid, {cols}" if self.rowid else cols

    def raw_select_list(self) -> str:
        """Like select_list, but each column as (type, text-as-bytes-or-value)."""
        parts = [f"typeof({quote(c)}), CASE WHEN typeof({quote(c)}) = 'text' "
                 f"THEN CAST({quote(c)} AS BLOB) ELSE {quote(c)} END" for c in self.columns]
        return ", ".join((["rowid"] if self.rowid else []) + parts)

    def raw_row_dict(self, row: tuple) -> dict:
        """Decode a raw_select_list row; invalid UTF-8 is replaced, the raw
        bytes kept under BAD_TEXT_KEY for the quarantine."""
        out: dict = {ROWID_KEY: row[0]} if self.rowid else {}
        values = row[1:] if self.rowid else row
        bad: dict[str, bytes] = {}
        for i, col in enumerate(self.columns):
            kind, value = values[2 * i], values[2 * i + 1]
            if kind == "text":
                try:
                    value = bytes(value).decode("utf-8")
                except UnicodeDecodeError:
                    bad[col] = bytes(value)
                    value = bytes(value).decode("utf-8", "replace")
            out[col] = value
        if bad:
            out[BAD_TEXT_KEY] = bad
        return out

    def row_dict(self, row: tuple) -> dict:
        if self.rowid:
            return {ROWID_KEY: row[0], **dict(zip(self.columns, row[1:]))}
        return dict(zip(self.columns, row))


@dataclass
class Catalog:
    """Every table of the file by name, plus fts5 tables and indexes."""

    tables: dict[str, TableSpec] = field(default_factory=dict)
    fts5: list[str] = field(default_factory=list)
    index_of: dict[str, str] = field(default_factory=dict)  # index name -> table name
    tolerant: bool = False  # read with writable_schema on: the schema has bad entries
    reference: bool = False  # not the file's: our current schema, used when its own is lost

    def indexes(self, table: str) -> list[str]:
        return [i for i, t in self.index_of.items() if t == table]

    def data_tables(self) -> list[TableSpec]:
        return [t for t in self.tables.values() if t.kind == "data"]


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _is_virtual(sql: str | None) -> bool:
    return bool(sql) and re.match(r"\s*create\s+virtual\s+table", sql, re.I) is not None


def _kind(name: str, sql: str | None, virtual: set[str]) -> str:
    if name.startswith("sqlite_"):
        return "internal"
    if name in LEDGER_TABLES:
        return "ledger"
    if (_is_virtual(sql) or name.startswith(DERIVED_PREFIXES)
            or any(name.startswith(v + "_") for v in virtual)):
        return "derived"
    return "data"


def _columns(conn: apsw.Connection, spec: TableSpec) -> None:
    info = conn.execute(f"PRAGMA table_info({quote(spec.name)})").fetchall()
    spec.columns = [r[1] for r in info]
    spec.rowid = not re.search(r"without\s+rowid", spec.sql, re.I)
    alias = [r for r in info if r[5]]
    alias_name = (alias[0][1] if spec.rowid and len(alias) == 1
                  and str(alias[0][2]).upper() == "INTEGER" else None)
    spec.required = [r[1] for r in info if (r[3] or r[5]) and r[4] is None
                     and r[1] != alias_name]


def read_catalog(conn: apsw.Connection) -> Catalog:
    """Read ``sqlite_master`` and each table's columns; raises apsw errors."""
    rows = conn.execute("SELECT type, name, tbl_name, rootpage, sql FROM sqlite_master").fetchall()
    virtual = {name for kind, name, _t, _r, sql in rows if kind == "table" and _is_virtual(sql)}
    cat = Catalog()
    for kind, name, tbl, root, sql in rows:
        if kind == "index":
            cat.index_of[name] = tbl
        if kind != "table":
            continue
        spec = TableSpec(name, [], root_page=int(root or 0), sql=sql or "",
                         kind=_kind(name, sql, virtual))
        if _is_virtual(sql) and re.search(r"\busing\s+fts5\b", sql or "", re.I):
            cat.fts5.append(name)
        if spec.kind != "derived":
            _columns(conn, spec)
        cat.tables[name] = spec
    return cat


def reference_catalog() -> Catalog:
    """Our current schema (every migration applied to an in-memory database):
    the tables to look for when a file's own schema cannot be read."""
    from sessiondb import migrations  # a store module: keep catalog importable alone

    conn = apsw.Connection(":memory:")
    try:
        migrations.apply_pending(conn, lambda: conn.execute("BEGIN IMMEDIATE"))
        cat = read_catalog(conn)
    finally:
        conn.close()
    cat.reference = True
    return cat
