"""A batch of whole rows copied from the backup image in one statement.

The backup lane offers each batch of a sound copy as `ImageRows`; our
store's sink (`hstate_recovery.output.rebuild.StoreSink.copy_image`) takes it here with
one ``INSERT ... SELECT`` from the image attached read-only, instead of
one ``INSERT`` a row from Python, only when that is provably what the
per-row path would write and count:

- nothing of the table is held in part or rejected in the batch's range,
  and the table takes the rows' columns (the same column list the per-row
  plan would use);
- no value the per-row path cleans could be unclean: every JSON column is
  NULL or text SQLite's ``json_valid`` accepts (strict RFC 8259 JSON, which
  Python's parser accepts too), or m012's empty meta ``''``. This errs one way only: a value SQLite
  doubts (``NaN``, a blob) sends the batch down the per-row path, which
  decides as it always has;
- the statement inserts exactly the batch's rows: a key already taken (a
  duplicate), a constraint the schema enforces, any error, and the batch
  is rolled back and left to the per-row path, which classifies each row.

Text needs no check: inspect read every row of every data table of this
copy through SQLite (strict UTF-8) before calling it sound, and the image
is a page copy of it. An image whose text encoding differs from the
output's cannot be attached: the per-row path again.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Iterable

import apsw

from sessiondb.recovery_api import attach_readonly

from ..schema import quote

SCHEMA = "recovery_image"
# A JSON column's stored form that is not JSON text and that both paths keep
# as it is: m012's empty meta (``''`` for ``{}``, docs/row-format.md).
STORED_EMPTY = {"meta": ""}


def kept_as_is(column: str, value: object) -> bool:
    """Whether ``value`` of a JSON ``column`` is a stored form kept unparsed."""
    return column in STORED_EMPTY and value == STORED_EMPTY[column]


def _kept_sql(column: str) -> str:
    if column not in STORED_EMPTY:
        return "0"
    return f"{quote(column)} = '{STORED_EMPTY[column]}'"


def clean_sql(json_columns: Iterable[str], columns: list[str], table: str) -> str:
    """A condition true for a row none of whose JSON values the per-row
    path would replace: each is NULL or valid JSON text. ``content`` is JSON
    only where ``content_kind`` says so (the others are checked always)."""
    present = set(columns)
    parts = [f"({quote(c)} IS NULL OR (typeof({quote(c)}) = 'text' AND ({_kept_sql(c)}"
             f" OR json_valid({quote(c)}))))" for c in json_columns if c in present]
    if table == "messages" and {"content", "content_kind"} <= present:
        parts.append("(NOT (typeof(content_kind) = 'text' AND content_kind = 'json' COLLATE "
                     "BINARY) OR content IS NULL OR (typeof(content) = 'text' AND "
                     "json_valid(content)))")
    return " AND ".join(parts) or "1"


class ImageAttach:
    """The image attached to the output's connection, once, until `close`."""

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn
        self.path: Path | None = None
        self.failed: set[Path] = set()
        self._held: AbstractContextManager[str] | None = None

    def ready(self, image: Path) -> bool:
        """Whether ``image`` is attached (attaching it now, outside any transaction)."""
        if self.path == image:
            return True
        if image in self.failed or self.conn.in_transaction:
            return False
        self.close()
        held = attach_readonly(self.conn, image, SCHEMA)
        try:
            held.__enter__()
            same = (self.conn.execute("PRAGMA main.encoding").fetchone()
                    == self.conn.execute(f"PRAGMA {SCHEMA}.encoding").fetchone())
        except apsw.Error:
            self.failed.add(image)
            return False
        self._held, self.path = held, image
        if not same:
            self.close()
            self.failed.add(image)
            return False
        return True

    def close(self) -> None:
        """Detach the image. A DETACH that fails (the output's connection
        already failing, say) is let be: the connection is closed next, and
        the error that matters is the one being raised."""
        if self._held is not None:
            held, self._held, self.path = self._held, None, None
            try:
                held.__exit__(None, None, None)
            except apsw.Error:
                pass


class NotTheSame(Exception):
    """The statement did not insert exactly the batch's rows (rolled back)."""


def copy_rows(conn: apsw.Connection, table: str, fields: tuple[str, ...], clean: str,
              rowids: list[int]) -> bool:
    """The rows ``rowids[0]``..``rowids[-1]`` of the attached image into
    ``table`` in one transaction; False (nothing written) when any value
    needs cleaning or the insert is not exactly those rows."""
    lo, hi = rowids[0], rowids[-1]
    source = f"{SCHEMA}.{quote(table)}"
    names = ", ".join(quote(f) for f in fields)
    values = ", ".join("rowid" if f == "rowid" else quote(f) for f in fields)
    try:
        doubtful = conn.execute(f"SELECT count(*) FROM {source} WHERE rowid BETWEEN ? AND ? "
                                f"AND NOT ({clean})", (lo, hi)).fetchone()
        if doubtful is None or doubtful[0]:
            return False
        with conn:
            conn.execute(f"INSERT INTO main.{quote(table)}({names}) SELECT {values} FROM "
                         f"{source} WHERE rowid BETWEEN ? AND ? ORDER BY rowid "
                         "ON CONFLICT DO NOTHING", (lo, hi))
            if conn.changes() != len(rowids):
                raise NotTheSame()
    except (NotTheSame, apsw.Error):
        return False
    return True
