"""The store's SQL on a psycopg connection.

The feature modules (sessions.py, leases.py, usage.py, messages.py, the
transcript writer, export and import) speak to a connection the way apsw
offers one: ``execute(sql, params)`` with ``?`` placeholders returning a
cursor, ``executemany``, ``changes()`` and ``last_insert_rowid()``.
`PgConn` offers the same few calls on a psycopg connection, so that SQL
runs on both backends unchanged: ``?`` becomes ``%s``, SQLite's numbered
``?1`` is expanded into positional arguments, and a literal ``%`` is
escaped. Translations are cached (the statements are a fixed set).

PostgreSQL's ``sum()`` over ``bigint`` is ``numeric``; the loader below
gives integral numerics back as ``int`` (floats otherwise), as SQLite does.

PostgreSQL text cannot hold NUL characters, SQLite's can, and messages do
carry them (tool output, pasted binary). Text going in has NUL written as
``U+E000 '0'`` (and U+E000 itself as ``U+E000 '1'``, so the mapping is
reversible and a stored value never looks like an escape it is not); text
coming out is mapped back. Only values holding either character change.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Iterable, Sequence

_NUMBERED = re.compile(r"\?(\d+)")


#: An INSERT of a message row returns its id in the same round trip, for
#: `last_insert_rowid` (SQLite knows it without asking; a server must be asked).
_RETURNS_ID = "INSERT INTO messages("


@functools.lru_cache(maxsize=512)
def translate(sql: str) -> tuple[str, tuple[int, ...] | None]:
    """(psycopg SQL, the argument order for numbered placeholders or None)."""
    text = sql.replace("%", "%%")
    if text.startswith(_RETURNS_ID) and "RETURNING" not in text:
        text += " RETURNING id"
    order: list[int] = []
    if _NUMBERED.search(text):
        def number(m: re.Match[str]) -> str:
            order.append(int(m.group(1)) - 1)
            return "%s"
        return _NUMBERED.sub(number, text), tuple(order)
    return text.replace("?", "%s"), None


def _args(order: tuple[int, ...] | None, params: Sequence[Any]) -> Sequence[Any]:
    if order is None:
        return params
    return [params[i] for i in order]


class PgConn:
    """An apsw-shaped face of one psycopg connection (see the module doc)."""

    __slots__ = ("raw", "_rowcount", "_last_id")
    #: leases.check reads the lease row with this suffix (see leases.py).
    LEASE_LOCK = " FOR SHARE"
    #: messages.insert_fresh: ids from a sequence other hosts share are not
    #: consecutive within a transaction, so a batch's ids are read back.
    CONSECUTIVE_ROWIDS = False
    #: messages.py: rows keep uid, fingerprint and meta as text (the
    #: PostgreSQL schema's types), not SQLite's compact forms (m010).
    COMPACT_ROWS = False

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self._rowcount = 0
        self._last_id: int | None = None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        if not params:  # psycopg interpolates nothing then: no escaping either
            text = sql
            cur = self.raw.execute(sql)
        else:
            text, order = translate(sql)
            cur = self.raw.execute(text, _args(order, tuple(params)))
        self._rowcount = max(cur.rowcount, 0)
        if sql.startswith(_RETURNS_ID) and self._rowcount and text.endswith(" RETURNING id"):
            self._last_id = cur.fetchone()[0]
        return cur

    def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> None:
        text, order = translate(sql)
        with self.raw.cursor() as cur:
            cur.executemany(text, [_args(order, tuple(p)) for p in seq])
            self._rowcount = max(cur.rowcount, 0)

    def changes(self) -> int:
        """Rows the last statement inserted, updated or deleted."""
        return self._rowcount

    def last_insert_rowid(self) -> int:
        """The row id the last INSERT of this session generated."""
        if self._last_id is not None:
            found, self._last_id = self._last_id, None
            return found
        return int(self.raw.execute("SELECT lastval()").fetchone()[0])


ESC = "\ue000"


def escape_text(value: str) -> str:
    if "\x00" in value or ESC in value:
        return value.replace(ESC, ESC + "1").replace("\x00", ESC + "0")
    return value


def unescape_text(value: str) -> str:
    if ESC in value:
        # Every U+E000 starts an escape, so ESC '0' is always an escaped NUL.
        return value.replace(ESC + "0", "\x00").replace(ESC + "1", ESC)
    return value


def register_text_codec(conn: Any) -> None:
    """NUL-safe text both ways (see the module doc)."""
    from psycopg.types.string import StrBinaryDumper, StrDumperUnknown, TextLoader

    class Dumper(StrDumperUnknown):  # type: ignore[misc]
        def dump(self, obj: str) -> Any:
            return super().dump(escape_text(obj))

    class BinaryDumper(StrBinaryDumper):  # type: ignore[misc]
        def dump(self, obj: str) -> Any:
            return super().dump(escape_text(obj))

    class Loader(TextLoader):  # type: ignore[misc]
        def load(self, data: Any) -> Any:
            text = super().load(data)
            return unescape_text(text) if isinstance(text, str) else text

    conn.adapters.register_dumper(str, Dumper)
    conn.adapters.register_dumper(str, BinaryDumper)
    for name in ("text", "varchar"):
        conn.adapters.register_loader(name, Loader)


def register_numeric_loader(conn: Any) -> None:
    """Integral ``numeric`` values (sums of bigint) load as ``int``."""
    from psycopg.adapt import Loader

    class IntegralNumeric(Loader):
        def load(self, data: Any) -> Any:
            text = bytes(data).decode()
            if "." in text or "e" in text.lower() or text.lower().endswith("nan"):
                return float(text)
            return int(text)

    conn.adapters.register_loader("numeric", IntegralNumeric)
