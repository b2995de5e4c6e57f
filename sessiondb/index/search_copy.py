"""Copying a store's search index from another store file, as rows.

Both FTS5 tables live in ordinary shadow tables (``<index>_data`` with
the segments, ``_idx``, ``_docsize``, ``_config``, and the term table's
``_content``); an index is a
function of the text it was built from, so a store whose messages are
exactly another's (same ids, same text) can take the other's index by
copying those rows, page for page, instead of tokenizing every message
again (which, for the word index, costs more than writing the messages). The bookkeeping that says what the
index covers travels with it: the watermark and the change log. Whether
the messages really are the same is the caller's to know (recovery knows
which rows it wrote and how it read them); this module checks that the two
files index the same way (tokenizers, options, text rules), and copies.

`attach_readonly` opens the other file read-only (a URI with
``mode=ro``: nothing can write to it through this connection), so the
primitive can be pointed at a file we did not make. The connection it
attaches to must have been opened with ``SQLITE_OPEN_URI``.

FTS5 keeps each index's structure record cached per connection and drops
it only when another connection commits or the schema changes: a
connection that read or wrote an index after its last schema change and
then copies that index's shadow tables still sees the old index (and a
write through it corrupts the copy). So the copy runs on a connection that
has not touched the indexes since its last DDL (recovery's finish attaches
its triggers right before), or on a fresh one.
"""
from __future__ import annotations

import os
import urllib.parse
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import apsw

from ..base import one
from .search_index import (CHANGES, CURRENT_TOOL_RULE, INDEXES, LEGACY_TOOL_RULE, STALE_KEY,
                           TEXT_VIEW, WATERMARK_KEY)

# the shadow tables an index may have (an external-content index has no
# _content; the term table keeps its terms in one)
SHADOWS = ("data", "idx", "docsize", "config", "content")


@dataclass
class CopiedIndex:
    """What was copied: rows per shadow table, and the bookkeeping taken over."""

    rows: dict[str, int] = field(default_factory=dict)
    watermark: int = 0
    changes: int = 0


class IndexNotCopyable(Exception):
    """The other file's index cannot stand for this one's (``reason`` says why)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@contextmanager
def attach_readonly(conn: apsw.Connection, path: str | os.PathLike[str],
                    schema: str = "copy_source") -> Iterator[str]:
    """``path`` attached to ``conn`` as ``schema``, read-only, for the block."""
    uri = "file:" + urllib.parse.quote(os.path.abspath(os.fspath(path))) + "?mode=ro"
    conn.execute(f"ATTACH ? AS {_quote_ident(schema)}", (uri,))
    try:
        yield schema
    finally:
        conn.execute(f"DETACH {_quote_ident(schema)}")


def _shape(conn: apsw.Connection, schema: str) -> dict[str, str]:
    """The SQL of both indexes and of their text view, whitespace folded."""
    names = INDEXES + (TEXT_VIEW,)
    marks = ",".join("?" * len(names))
    rows = conn.execute(f"SELECT name, sql FROM {_quote_ident(schema)}.sqlite_master"
                        f" WHERE name IN ({marks})", names)
    # a view before m012 names the tool role only; for rows of either form it
    # gives the text today's view gives, so its index is the same index
    return {n: " ".join(str(s).split()).replace(LEGACY_TOOL_RULE, CURRENT_TOOL_RULE)
            for n, s in rows}


def check_copyable(conn: apsw.Connection, schema: str) -> None:
    """Raise `IndexNotCopyable` unless ``schema``'s index can be copied into
    ``main``: the same index definitions and text rules, and an index its
    own store does not mark stale."""
    mine, theirs = _shape(conn, "main"), _shape(conn, schema)
    if len(mine) != len(INDEXES) + 1 or mine != theirs:
        raise IndexNotCopyable("the two files do not index the same way (schema differs)")
    q = _quote_ident(schema)
    meta = dict(conn.execute(f"SELECT key, value FROM {q}.state_meta WHERE key IN (?, ?)",
                             (WATERMARK_KEY, STALE_KEY)))
    if STALE_KEY in meta:
        raise IndexNotCopyable("the other file's index is marked stale")
    if WATERMARK_KEY not in meta:
        raise IndexNotCopyable("the other file has no index watermark")


def index_shadows(conn: apsw.Connection, index: str) -> tuple[str, ...]:
    """The shadow tables ``main``'s ``index`` has (an index made with
    ``columnsize=0``, the term table, has no ``_docsize``)."""
    names = {n for (n,) in conn.execute(
        "SELECT name FROM main.sqlite_master WHERE type = 'table'")}
    return tuple(s for s in SHADOWS if f"{index}_{s}" in names)


def copy_index_tables(conn: apsw.Connection, schema: str, index: str,
                      shadows: tuple[str, ...] = SHADOWS) -> dict[str, int]:
    """Replace ``main``'s shadow tables of one index by ``schema``'s (rows
    copied per table), in the caller's transaction. Only the rows: the
    caller knows both sides define ``index`` alike (`check_copyable`, or it
    made the other side with the same DDL) and what the rows stand for.
    ``shadows`` without ``config`` keeps ``main``'s settings (an index built
    with loading settings, fts_build.py)."""
    q, rows = _quote_ident(schema), {}
    present = index_shadows(conn, index)  # the term table has no _docsize
    for shadow in [name for name in shadows if name in present]:
        table = _quote_ident(f"{index}_{shadow}")
        conn.execute(f"DELETE FROM main.{table}")
        conn.execute(f"INSERT INTO main.{table} SELECT * FROM {q}.{table}")
        rows[f"{index}_{shadow}"] = conn.changes()
    return rows


def copy_search_index(conn: apsw.Connection, schema: str) -> CopiedIndex:
    """Replace ``main``'s search index by ``schema``'s, with its watermark and
    change log, in the caller's transaction (`check_copyable` first)."""
    check_copyable(conn, schema)
    q = _quote_ident(schema)
    out = CopiedIndex()
    for index in INDEXES:
        out.rows.update(copy_index_tables(conn, schema, index))
    (out.watermark,) = one(conn.execute(
        f"SELECT CAST(value AS INTEGER) FROM {q}.state_meta WHERE key = ?", (WATERMARK_KEY,)))
    conn.execute("INSERT INTO main.state_meta(key, value) VALUES (?, ?) ON CONFLICT(key)"
                 " DO UPDATE SET value = excluded.value", (WATERMARK_KEY, str(out.watermark)))
    conn.execute(f"DELETE FROM main.{CHANGES}")
    conn.execute(f"INSERT INTO main.{CHANGES}(id, message_id, indexed, old_text)"
                 f" SELECT id, message_id, indexed, old_text FROM {q}.{CHANGES}")
    out.changes = conn.changes()
    return out


__all__ = ["CopiedIndex", "IndexNotCopyable", "SHADOWS", "attach_readonly", "check_copyable",
           "copy_index_tables", "copy_search_index", "index_shadows"]
