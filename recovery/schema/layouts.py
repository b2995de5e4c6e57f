"""Physical record layouts of our tables, and how well a record fits one.

Owns the table `KNOWN_LAYOUTS`: for every table our migrations create, the
columns as SQLite stores them in a record (in order, with the storage
classes each may hold and a value-shape check), which column is the rowid
alias, and how many columns the oldest layout had (columns added later by
``ALTER TABLE ... ADD COLUMN`` are absent from older records). To teach the
carver a new table or column, add a `Layout` or `Column` here.

A fit is scored in [0, 1]: 0 when a storage class or the column count is
impossible for the table, otherwise 0.5 plus half the share of passed shape
checks; for messages, one check is that the stored fingerprint matches the
content (see sessiondb/rows/codec.py). Extra unknown trailing columns cost 10%.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from typing import AbstractSet, Any, Callable

import apsw

from sessiondb.recovery_api import (MISSING, MessageState, ROLES, ROLE_CODES, fingerprint_of,
                                    fingerprint_text, logical_meta, role_text)

Check = Callable[[Any], bool]

_SESSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@+=-]{0,127}$")  # sessiondb/base/paths.py
_HEX_RE = re.compile(r"^[0-9a-f]{8,64}$")
_TASK_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")  # sessiondb.rows.usage's task names
_MIGRATION_RE = re.compile(r"^m\d{3}_[A-Za-z0-9_]+$")
# 2001-09-09 .. 2128: epoch seconds a store could plausibly have written
_TS_MIN, _TS_MAX = 1.0e9, 5.0e9

TEXT_OR_BLOB = ("text", "blob")  # uid and fingerprint: text before m010, bytes since
TEXT, INT, REAL, ANY = ("text",), ("integer",), ("real", "integer"), ("null", "integer",
                                                                      "real", "text", "blob")


def session_id_shape(v: Any) -> bool:
    return isinstance(v, str) and bool(_SESSION_RE.match(v)) and ".." not in v


def timestamp_shape(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v) and _TS_MIN <= v <= _TS_MAX


def json_shape(v: Any) -> bool:
    if not isinstance(v, str):
        return False
    try:
        json.loads(v)
    except ValueError:
        return False
    return True


def json_object_shape(v: Any) -> bool:
    return json_shape(v) and v.lstrip().startswith("{")


def stored_meta_shape(v: Any) -> bool:
    """A JSON object, or '' (an empty meta in a coded row, m012)."""
    return v == "" or json_object_shape(v)


def text_value(v: Any) -> bool:
    """Any text, '' included (a row kind ``message`` in a coded row, m012)."""
    return isinstance(v, str)


def one_of(*values: object) -> Check:
    allowed = frozenset(values)
    return lambda v: v in allowed


def non_negative(v: Any) -> bool:
    return isinstance(v, int) and v >= 0


def non_empty(v: Any) -> bool:
    return isinstance(v, str) and v != ""


def term_shape(v: Any) -> bool:
    """A term of the word index as the term table keeps it: 3 or more
    letters and digits, folded to lower case (a record of an unknown
    two-column table rarely is one, so it still goes to lost-and-found)."""
    return (isinstance(v, str) and len(v) >= 3 and v == v.lower()
            and all(ch.isalnum() for ch in v))


def uid_shape(v: Any) -> bool:
    """Text (rows before m010, and uids that are not 32 hex digits) or the
    16 bytes of a hex uid (sessiondb.rows.codec.uid_key)."""
    return non_empty(v) or (isinstance(v, bytes) and len(v) == 16)


def fingerprint_shape(v: Any) -> bool:
    """Hex text (rows before m010) or the bytes of it."""
    if isinstance(v, bytes):
        return 4 <= len(v) <= 32
    return isinstance(v, str) and bool(_HEX_RE.match(v))


@dataclass(frozen=True)
class Column:
    """One stored column: the storage classes it may hold (``null`` allowed
    when ``nullable``), an optional shape check, and the default an older
    record without this column reads as."""

    name: str
    classes: tuple[str, ...]
    nullable: bool = False
    check: Check | None = None
    default: Any = None

    def fits(self, cls: str) -> bool:
        return cls in self.classes or (cls == "null" and self.nullable)


@dataclass(frozen=True)
class Layout:
    """A table's record layout. ``ignore`` marks derived data (FTS shadow
    tables): recognised so its records are not lost-and-found, never mapped."""

    table: str
    columns: tuple[Column, ...]
    rowid_column: str | None = None
    min_columns: int | None = None
    ignore: bool = False
    strict: bool = True  # False for layouts derived from unknown schema SQL
    # Trailing columns a later migration may have added that this table does
    # not know yet; only for wide tables whose shape checks are specific.
    max_extra: int = 0
    # Least score a record found outside its table's tree must reach. Narrow
    # tables demand every shape check: a few columns fit too many records.
    orphan_min: float = 0.75
    fmt: str = "hermes-state"  # the format (hstate_recovery.schema.formats kind) this layout belongs to

    @property
    def oldest(self) -> int:
        return self.min_columns if self.min_columns is not None else len(self.columns)

    def score(self, values: list[Any], classes: list[str]) -> float:
        """How well a record's values fit this layout (see module docstring)."""
        return self.rank(values, classes)[0]

    def rank(self, values: list[Any], classes: list[str]) -> tuple[float, int]:
        """(score, shape checks passed): of two layouts a record fits alike,
        the one that checked more of it (the more specific) ranks first."""
        if not self.oldest <= len(values) <= len(self.columns) + self.max_extra:
            return 0.0, 0
        if not self.strict:
            return self._loose_score(values, classes), 0
        passed = total = 0
        for col, value, cls in zip(self.columns, values, classes):
            if col.name == self.rowid_column:
                if cls != "null":
                    return 0.0, 0
                continue
            if value is MISSING:
                continue
            if not col.fits(cls):
                if self.strict:
                    return 0.0, 0
                continue
            if col.check is not None and value is not None:
                total += 1
                passed += bool(col.check(value))
        # unknown extra columns: a fit, but never as sure as an exact one
        unknown = 0.9 if len(values) > len(self.columns) else 1.0
        if self.table == "messages" and self.fmt == "hermes-state":  # our fingerprint
            # the stored fingerprint hashes role, content, tool calls and meta
            total += 1
            passed += _message_fingerprint_ok(self, values)
        return unknown * (0.5 + 0.5 * (passed / total if total else 1.0)), passed

    def self_check(self, values: list[Any]) -> bool | None:
        """Whether a record proves its own content (our messages carry a
        fingerprint of it); None for layouts that have no such check."""
        if self.table == "messages" and self.fmt == "hermes-state":
            return _message_fingerprint_ok(self, values)
        return None

    def _loose_score(self, values: list[Any], classes: list[str]) -> float:
        """Layouts parsed from unknown schema SQL only know declared types;
        they score at most 0.4 so a known layout that fits always wins."""
        fit = 0
        for col, cls in zip(self.columns, classes):
            if col.name == self.rowid_column:
                if cls != "null":
                    return 0.0
                fit += 1
            else:
                fit += col.fits(cls)
        exact = 1.0 if len(values) == len(self.columns) else 0.5
        return 0.4 * exact * fit / len(values) if values else 0.0

    def to_row(self, values: list[Any], rowid: int | None) -> dict[str, Any]:
        """The row as a dict by column name: rowid alias filled, REAL columns
        stored as integers turned back into floats, absent columns defaulted.
        Values of unknown extra columns are not part of the row (counted by
        the carver as ``unknown_columns``)."""
        row: dict[str, Any] = {}
        for i, col in enumerate(self.columns):
            value = values[i] if i < len(values) else col.default
            if col.name == self.rowid_column:
                value = rowid
            elif col.classes == REAL and isinstance(value, int):
                value = float(value)
            row[col.name] = value
        return row


def _message_fingerprint_ok(layout: Layout, values: list[Any]) -> bool:
    names = [c.name for c in layout.columns]
    try:
        got = dict(zip(names, values))
        # a compact row (m010) keeps finish_reason out of meta, a coded one
        # (m012) the role as its code and '{}' as '': hash what they stand for
        meta = logical_meta(got["meta"], got.get("finish_reason"))
        fp = fingerprint_of(role_text(got["role"]), got["content_kind"], got["content"],
                            got["tool_calls"], meta)
    except (KeyError, TypeError, AttributeError, UnicodeEncodeError):
        return False
    return fp == fingerprint_text(got.get("fingerprint"))


C = Column
SESSIONS = Layout("sessions", (
    C("id", TEXT, check=session_id_shape),
    C("parent_session_id", TEXT, True, session_id_shape),
    C("source", TEXT, check=non_empty),
    C("model", TEXT, True),
    C("title", TEXT, True),
    C("started_at", REAL, check=timestamp_shape),
    C("updated_at", REAL, check=timestamp_shape),
    C("ended_at", REAL, True, timestamp_shape),
    C("end_reason", TEXT, True),
    *(C(n, INT, check=non_negative, default=0) for n in (
        "message_count", "tool_call_count", "input_tokens", "output_tokens",
        "cache_read_tokens", "cache_write_tokens")),
), max_extra=8)

MESSAGES = Layout("messages", (
    C("id", INT, True),
    C("session_id", TEXT, check=session_id_shape),
    C("uid", TEXT_OR_BLOB, check=uid_shape),
    C("position", INT),
    C("role", TEXT, check=one_of(*ROLES, *ROLE_CODES.values())),  # name, or code (m012)
    C("content_kind", TEXT, check=one_of("text", "json", "null", "absent")),
    C("content", TEXT, True),
    C("tool_calls", TEXT, True, json_shape),
    C("tool_call_id", TEXT, True),
    C("tool_name", TEXT, True),
    C("finish_reason", TEXT, True),
    C("timestamp", REAL, check=timestamp_shape),
    C("token_count", INT, True),
    C("meta", TEXT, check=stored_meta_shape, default="{}"),
    C("fingerprint", TEXT_OR_BLOB, check=fingerprint_shape),
    C("state", TEXT, check=one_of(*MessageState), default=MessageState.ACTIVE.value),
    C("compaction_id", TEXT, True),
    C("kind", TEXT, check=text_value, default="message"),
), rowid_column="id", max_extra=8)

STATE_META = Layout("state_meta", (C("key", TEXT, check=non_empty), C("value", TEXT)),
                    orphan_min=1.0)

MIGRATIONS = Layout("migrations", (
    C("name", TEXT, check=lambda v: bool(_MIGRATION_RE.match(v))),
    C("applied_at", REAL, check=timestamp_shape),
), orphan_min=1.0)

LEASES = Layout("leases", (
    C("session_id", TEXT, check=session_id_shape),
    C("holder", TEXT, check=non_empty),
    C("expires_at", REAL, check=timestamp_shape),
    C("acquired_at", REAL, check=timestamp_shape),
), orphan_min=1.0)

COMPACTIONS = Layout("compactions", (  # m003_compactions
    C("id", TEXT, check=lambda v: isinstance(v, str) and bool(_HEX_RE.match(v))),
    C("session_id", TEXT, check=session_id_shape),
    C("summary_id", INT, check=non_negative),
    C("absorbed_count", INT, check=non_negative),
    C("created_at", REAL, check=timestamp_shape),
    C("restored_at", REAL, True, timestamp_shape),
))

USAGE_LEDGER = Layout("usage_ledger", (  # m007_usage_ledger (sessiondb/rows/usage.py)
    C("session_id", TEXT, check=session_id_shape),
    C("task", TEXT, check=lambda v: isinstance(v, str) and bool(_TASK_RE.match(v))),
    C("model", TEXT),
    C("provider", TEXT),
    C("input_tokens", INT, check=non_negative),
    C("output_tokens", INT, check=non_negative),
    C("cache_read_tokens", INT, check=non_negative),
    C("cache_write_tokens", INT, check=non_negative),
    C("reasoning_tokens", INT, check=non_negative),
    C("api_calls", INT, check=non_negative),
    C("cost_usd", REAL, True),
    C("first_at", REAL, check=timestamp_shape),
    C("last_at", REAL, check=timestamp_shape),
))

SESSION_FLAGS = Layout("session_flags", (  # m008_session_flags (sessiondb/maintenance/lifecycle.py)
    C("session_id", TEXT, check=session_id_shape),
    C("pinned", INT, check=lambda v: v in (0, 1), default=0),
    C("archived_at", REAL, True, timestamp_shape),
))

# LangGraph's checkpoints, channel values and pending writes (m013_graph_checkpoints,
# sessiondb/rows/checkpoints.py). Values are the saver's serializer's bytes.
BLOB = ("blob",)
GRAPH_CHECKPOINTS = Layout("graph_checkpoints", (
    C("id", INT, True),
    C("session_id", TEXT, check=session_id_shape),
    C("thread_id", TEXT, True),
    C("checkpoint_ns", TEXT, check=text_value),
    C("checkpoint_id", TEXT, check=non_empty),
    C("parent_checkpoint_id", TEXT, True, non_empty),
    C("run_id", TEXT, True),
    C("created_at", REAL, check=timestamp_shape),
    C("type", TEXT, check=non_empty),
    C("checkpoint", BLOB),
    C("metadata_type", TEXT, check=non_empty),
    C("metadata", BLOB),
    C("channel_versions", TEXT, check=json_object_shape, default="{}"),
), rowid_column="id")

GRAPH_BLOBS = Layout("graph_blobs", (
    C("id", INT, True),
    C("session_id", TEXT, check=session_id_shape),
    C("checkpoint_ns", TEXT, check=text_value),
    C("channel", TEXT, check=non_empty),
    C("version", TEXT, check=non_empty),
    C("type", TEXT, check=non_empty),
    C("value", BLOB, True),
), rowid_column="id")

GRAPH_WRITES = Layout("graph_writes", (
    C("id", INT, True),
    C("session_id", TEXT, check=session_id_shape),
    C("checkpoint_ns", TEXT, check=text_value),
    C("checkpoint_id", TEXT, check=non_empty),
    C("task_id", TEXT, check=non_empty),
    C("task_path", TEXT, check=text_value),
    C("idx", INT),
    C("channel", TEXT, check=non_empty),
    C("type", TEXT, check=non_empty),
    C("value", BLOB, True),
), rowid_column="id")

# FTS5 `_data` and `_docsize` shadow tables: (id INTEGER PRIMARY KEY, block BLOB).
# Their other shadows are WITHOUT ROWID (index b-trees), never table leaves.
FTS_SHADOW = Layout("fts_shadow", (C("id", INT, True), C("block", ("blob",), True)),
                    rowid_column="id", ignore=True)

# The term table's ``_content`` (m015): (id INTEGER PRIMARY KEY, one term).
FTS_TERMS = Layout("fts_terms", (C("id", INT, True), C("term", TEXT, check=term_shape)),
                   rowid_column="id", ignore=True)

SQLITE_SCHEMA = Layout("sqlite_schema", (
    C("type", TEXT, check=one_of("table", "index", "view", "trigger")),
    C("name", TEXT), C("tbl_name", TEXT), C("rootpage", INT, True), C("sql", TEXT, True),
), ignore=True)

KNOWN_LAYOUTS: tuple[Layout, ...] = (SESSIONS, MESSAGES, STATE_META, MIGRATIONS, LEASES,
                                     COMPACTIONS, USAGE_LEDGER, SESSION_FLAGS, GRAPH_CHECKPOINTS,
                                     GRAPH_BLOBS, GRAPH_WRITES, FTS_SHADOW, FTS_TERMS,
                                     SQLITE_SCHEMA)
# Tables derived from canonical rows: pages found, records never mapped.
# (messages_trigram: the trigram index of files before m015)
DERIVED_PREFIXES = ("messages_fts", "messages_terms", "messages_trigram", "search_changes")


# The shadow tables each virtual table module keeps (fts5, fts3/4, rtree).
SHADOW_SUFFIXES = ("data", "idx", "content", "docsize", "config", "segments", "segdir",
                   "stat", "node", "rowid", "parent")


def is_shadow_name(table: str, virtual_tables: AbstractSet[str]) -> bool:
    return any(table.startswith(v + "_") and table[len(v) + 1:] in SHADOW_SUFFIXES
               for v in virtual_tables)


def is_derived(table: str, virtual_tables: AbstractSet[str] = frozenset(),
               ours: bool = True) -> bool:
    """FTS shadow tables (ours by name, any virtual table's by module suffix)."""
    if ours and table.startswith(DERIVED_PREFIXES):
        return True
    return is_shadow_name(table, virtual_tables)


_WITHOUT_ROWID_RE = re.compile(r"\)\s*WITHOUT\s+ROWID\b", re.IGNORECASE)


def is_without_rowid(sql: str | None) -> bool:
    """Whether a CREATE TABLE statement makes a WITHOUT ROWID table: its
    b-tree is an index b-tree (records as keys, no rowids), never table
    pages (FTS5's ``_idx`` and ``_config`` shadows are such tables)."""
    return isinstance(sql, str) and bool(_WITHOUT_ROWID_RE.search(sql))


def best_fit(values: list[Any], classes: list[str],
             layouts: tuple[Layout, ...]) -> tuple[Layout | None, float]:
    """The best-scoring layout (None on a tie between two tables or no fit)."""
    scored = sorted(((lay.rank(values, classes), i) for i, lay in enumerate(layouts)),
                    reverse=True)
    if not scored or scored[0][0][0] == 0.0:
        return None, 0.0
    if len(scored) > 1 and scored[1][0] == scored[0][0]:
        return None, 0.0
    return layouts[scored[0][1]], scored[0][0][0]


_AFFINITY = (("INT", INT), ("CHAR", TEXT), ("CLOB", TEXT), ("TEXT", TEXT),
             ("REAL", REAL), ("FLOA", REAL), ("DOUB", REAL))


def _classes_for(decltype: str) -> tuple[str, ...]:
    upper = (decltype or "").upper()
    for needle, classes in _AFFINITY:
        if needle in upper:
            return classes
    return ANY


def default_literal(sql: str | None) -> Any:
    """The value of a column's DEFAULT clause when it is a plain literal
    (what rows written before ``ALTER TABLE ... ADD COLUMN`` read as)."""
    if sql is None or sql.upper() == "NULL":
        return None
    if len(sql) >= 2 and sql[0] == sql[-1] == "'":
        return sql[1:-1].replace("''", "'")
    for number in (int, float):
        try:
            return number(sql)
        except ValueError:
            continue
    return None


def _deny_attach(op: int, *_: Any) -> int:
    return apsw.SQLITE_DENY if op == apsw.SQLITE_ATTACH else apsw.SQLITE_OK


def layout_from_sql(table: str, sql: str | None) -> Layout | None:
    """A layout from a CREATE TABLE statement found in sqlite_schema.

    The statement is run in a private in-memory database so SQLite itself
    parses it; None when it is not a plain rowid table we can parse.
    """
    if not isinstance(sql, str) or not sql.lstrip().upper().startswith("CREATE TABLE"):
        return None
    if is_without_rowid(sql) or ";" in sql:
        return None  # one statement only: the text comes from a damaged file
    try:
        conn = apsw.Connection(":memory:")
        conn.authorizer = _deny_attach
        try:
            conn.execute(sql)
            cols = list(conn.execute("SELECT name, type, pk, dflt_value "
                                     "FROM pragma_table_xinfo(?)", (table,)))
        finally:
            conn.close()
    except (apsw.Error, UnicodeDecodeError):
        return None
    if not cols:
        return None
    pks = [c for c in cols if c[2]]
    alias = pks[0][0] if len(pks) == 1 and pks[0][1].upper() == "INTEGER" else None
    columns = tuple(Column(name, _classes_for(decl) if name != alias else INT, True,
                           default=default_literal(dflt))
                    for name, decl, _, dflt in cols)
    return Layout(table, columns, rowid_column=alias, min_columns=1, strict=False,
                  orphan_min=0.1, fmt="sqlite")


def layout_for_schema(table: str, sql: str | None) -> Layout | None:
    """Our known layout for ``table``, widened by columns the schema has added;
    a layout parsed from ``sql`` for tables we do not know."""
    known = next((lay for lay in KNOWN_LAYOUTS if lay.table == table and not lay.ignore), None)
    parsed = layout_from_sql(table, sql) if sql else None
    if known is None:
        return parsed
    if parsed is None:
        return known
    names = [c.name for c in known.columns]
    got = [c.name for c in parsed.columns]
    if got[:len(names)] != names:
        return parsed  # a layout we do not know: trust the file's own schema
    extra = parsed.columns[len(names):]
    return replace(known, columns=known.columns + extra,
                   min_columns=known.oldest)
