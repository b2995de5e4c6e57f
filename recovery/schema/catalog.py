"""What tables a (copied) database holds and which of them carry data.

Derived data is never copied: virtual tables, their shadow tables (and
anything named like the store's FTS indexes) are rebuilt in the output.
SQLite's own tables and the migration ledger are bookkeeping, not data.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import apsw

from .formats import (EMPTY, FORMATS, Format, Identification, OURS, OUR_STORE, check_version,
                      identify, matching_format, parse_columns, registry_statements,
                      schema_version)
from .layouts import is_shadow_name

# (messages_trigram: the trigram index of files before m015)
DERIVED_PREFIXES = ("messages_fts", "messages_terms", "messages_trigram", "search_changes")
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
    # every sqlite_master row (type, name, tbl_name, sql) in the file's order
    entries: list[tuple[str, str, str, str | None]] = field(default_factory=list)
    identification: Identification | None = None
    unreadable: list[str] = field(default_factory=list)  # schema rows whose text is not UTF-8
    source: str = "file"  # file | template | registry | harvested+registry | reference

    @property
    def foreign(self) -> bool:
        """Not our store: recovered in its own schema, never ours. An empty
        file has no schema of its own: it is recovered as an empty store."""
        return self.identification is not None and self.identification.kind not in (
            OURS, EMPTY)

    def indexes(self, table: str) -> list[str]:
        return [i for i, t in self.index_of.items() if t == table]

    def data_tables(self) -> list[TableSpec]:
        return [t for t in self.tables.values() if t.kind == "data"]


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _is_virtual(sql: str | None) -> bool:
    return bool(sql and re.match(r"\s*create\s+virtual\s+table", sql, re.I))


def is_shadow(name: str, sql: str | None, virtual: set[str]) -> bool:
    """A virtual table's shadow: a real table named ``<vtable>_<suffix>``."""
    if _is_virtual(sql):
        return False
    return is_shadow_name(name, virtual)


def _kind(name: str, sql: str | None, virtual: set[str], ours: bool) -> str:
    if name.startswith("sqlite_"):
        return "internal"
    if ours and name in LEDGER_TABLES:
        return "ledger"
    if (_is_virtual(sql) or (ours and name.startswith(DERIVED_PREFIXES))
            or is_shadow(name, sql, virtual)):
        return "derived"
    return "data"


def _columns(conn: apsw.Connection, spec: TableSpec) -> None:
    info: list[tuple[Any, ...]] = conn.execute(f"PRAGMA table_info({quote(spec.name)})").fetchall()
    spec.columns = [r[1] for r in info]
    spec.rowid = not re.search(r"without\s+rowid", spec.sql, re.I)
    alias = [r for r in info if r[5]]
    alias_name = (alias[0][1] if spec.rowid and len(alias) == 1
                  and str(alias[0][2]).upper() == "INTEGER" else None)
    spec.required = [r[1] for r in info if (r[3] or r[5]) and r[4] is None
                     and r[1] != alias_name]


def _text(value: Any) -> tuple[str | None, bool]:
    """Schema text read as bytes: (decoded leniently, whether it was valid UTF-8)."""
    if value is None or isinstance(value, (int, float)):
        return (None if value is None else str(value)), True
    raw = bytes(value)
    try:
        return raw.decode("utf-8"), True
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace"), False


def schema_rows(conn: apsw.Connection) -> tuple[list[tuple], list[str]]:
    """sqlite_master rows with text read as bytes, so text that is not UTF-8
    (damage) cannot stop the read: such rows are named; an index, view or
    trigger is left out, a table kept with its text decoded leniently (its
    rows then come from the lanes that can still read them, the carver)."""
    rows, bad = [], []
    for r in conn.execute("SELECT CAST(type AS BLOB), CAST(name AS BLOB), CAST(tbl_name AS "
                          "BLOB), rootpage, CAST(sql AS BLOB) FROM sqlite_master"):
        decoded = [_text(v) for v in (r[0], r[1], r[2], r[4])]
        row = (decoded[0][0], decoded[1][0], decoded[2][0], r[3], decoded[3][0])
        if all(ok for _v, ok in decoded):
            rows.append(row)
            continue
        bad.append(f"{row[0]} {row[1]!r}")
        if row[0] == "table":
            rows.append(row)
    return rows, bad


def _identify(conn: apsw.Connection, rows: list[tuple], virtual: set[str]) -> Identification:
    columns: dict[str, list[str]] = {}
    for kind, name, _t, _r, sql in rows:
        if (kind != "table" or name.startswith("sqlite_") or name in virtual
                or is_shadow(name, sql, virtual)):
            continue
        try:
            columns[name] = [r[1] for r in conn.execute(f"PRAGMA table_info({quote(name)})")]
        except READ_ERRORS:
            columns[name] = [c[0] for c in parse_columns(name, sql or "")]
    ident = identify(columns, schema_version(conn, columns))
    fmt = matching_format(columns)
    if fmt is None or fmt.kind == OURS:
        return ident
    return replace(ident, version_check=check_version(conn, fmt, columns).to_dict())


def read_catalog(conn: apsw.Connection) -> Catalog:
    """Read ``sqlite_master`` and each table's columns; raises apsw errors."""
    rows, bad = schema_rows(conn)
    virtual = {name for kind, name, _t, _r, sql in rows if kind == "table" and _is_virtual(sql)}
    cat = Catalog(unreadable=bad)
    cat.entries = [(k, n, t, sql) for k, n, t, _r, sql in rows]
    cat.identification = _identify(conn, rows, virtual)
    ours = not cat.foreign
    for kind, name, tbl, root, sql in rows:
        if kind == "index":
            cat.index_of[name] = tbl
        if kind != "table":
            continue
        spec = TableSpec(name, [], root_page=int(root or 0), sql=sql or "",
                         kind=_kind(name, sql, virtual, ours))
        if _is_virtual(sql) and re.search(r"\busing\s+fts5\b", sql or "", re.I):
            cat.fts5.append(name)
        if spec.kind != "derived":
            try:
                _columns(conn, spec)
            except READ_ERRORS:  # a name that is not UTF-8: the statement, read leniently
                spec.columns = [c[0] for c in parse_columns(name, spec.sql)]
                if not spec.columns:
                    cat.unreadable.append(f"table {name!r} (columns)")
                    continue
        if spec.kind == "data" and not spec.columns:  # SQLite could not parse its statement
            continue
        cat.tables[name] = spec
    hidden = _hidden(cat, rows, virtual)
    garbled = {n for n in cat.tables  # read leniently (SQLite's own tables come back by itself)
               if f"table {n!r}" in bad and not n.startswith("sqlite_")}
    if hidden or garbled:
        _fill_hidden(conn, cat, hidden, garbled, virtual)
    return cat


def _hidden(cat: Catalog, rows: list[tuple], virtual: set[str]) -> set[str]:
    """Tables the schema names (as an index's or a trigger's table, or by a
    table entry whose statement does not parse) that are missing from the
    catalog: their own entry is garbled, so SQLite does not know them."""
    views = {name for kind, name, _t, _r, _s in rows if kind == "view"}
    named = {tbl for kind, _n, tbl, _r, _s in rows if kind in ("index", "trigger")}
    named |= {name for kind, name, _t, _r, _s in rows if kind == "table"}
    return {n for n in named if isinstance(n, str) and n and n not in cat.tables
            and n not in views and n not in virtual and not n.startswith("sqlite_")
            and not is_shadow_name(n, virtual)}


def _fill_hidden(conn: apsw.Connection, cat: Catalog, hidden: set[str], garbled: set[str],
                 virtual: set[str]) -> None:
    """Columns for tables whose schema entry is garbled, from the first
    reference schema (ours, then each registered format's) that knows them
    and that, with them, the file's tables fit: the rows of such a table
    come back through the carver instead of the table being dropped. A
    table whose statement was read leniently (not UTF-8) keeps its own
    columns while they still hold every column of the reference's."""
    have = {n: t.columns for n, t in cat.tables.items() if t.kind != "derived"
            and not n.startswith("sqlite_")}
    for fmt, ref in _references():
        mine = {n: t for n, t in ref.tables.items() if t.kind != "derived"}
        known = sorted((hidden & set(mine)) | {
            n for n in garbled & set(mine) if not set(mine[n].columns) <= set(have[n])})
        merged = {**have, **{n: ref.tables[n].columns for n in known}}
        if not known or matching_format(merged) is not fmt:
            continue
        cat.identification = identify(merged, schema_version(conn, merged))
        for n in known:
            spec = ref.tables[n]
            cat.tables[n] = TableSpec(n, list(spec.columns), spec.rowid, 0, spec.sql,
                                      required=list(spec.required))
            cat.entries = [e for e in cat.entries if not (e[0] == "table" and e[1] == n)]
            cat.entries.append(("table", n, n, spec.sql))
            cat.unreadable.append(f"table {n!r} (its schema entry is garbled: columns from "
                                  f"the reference schema of {cat.identification.label})")
        ours = not cat.foreign
        for spec in cat.tables.values():
            spec.kind = _kind(spec.name, spec.sql, virtual, ours)
        return


def _references() -> list[tuple[Format, Catalog]]:
    """Our current schema, then the tables of every registered format."""
    out = [(OUR_STORE, reference_catalog())]
    for fmt in FORMATS:
        if not fmt.tables or fmt is OUR_STORE:
            continue
        conn = apsw.Connection(":memory:")
        try:
            for _k, _n, _t, sql in registry_statements(fmt):
                conn.execute(sql)
            out.append((fmt, read_catalog(conn)))
        finally:
            conn.close()
    return out


def _begin_immediate(conn: apsw.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")


def reference_catalog() -> Catalog:
    """Our current schema (every migration applied to an in-memory database):
    the tables to look for when a file's own schema cannot be read."""
    # a store module, imported here: keep catalog importable alone
    from sessiondb.recovery_api import apply_pending_migrations

    conn = apsw.Connection(":memory:")
    try:
        apply_pending_migrations(conn, lambda: _begin_immediate(conn))
        cat = read_catalog(conn)
    finally:
        conn.close()
    cat.reference = True
    return cat
