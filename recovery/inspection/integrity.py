"""``PRAGMA integrity_check`` of a finished file, its independent parts at once.

SQLite runs the pragma as one statement on one thread: the b-tree walk of
every table and index (every page used exactly once, the freelist), each
table's rows against its indexes and constraints, then each virtual
table's own check (xIntegrity; FTS5 reads its whole inverted index, about
two thirds of the pragma on a store with both search indexes). Those parts
share nothing, so `integrity_lines` runs them on separate read-only
connections in threads (SQLite works without the GIL), on both cores:

- the pragma itself on a connection that has no virtual-table modules
  (``drop_modules``): SQLite skips a virtual table whose module is not
  registered and that nothing has connected, and runs every other check
  exactly as before (the shadow tables are ordinary tables: their b-trees
  are walked there);
- ``PRAGMA integrity_check(<table>)`` for each virtual table of the schema:
  that table's xIntegrity alone (a virtual table has no b-tree of its own).

Together they are the checks of the one statement, no fewer. The answer is
every part's problem lines in that order (the statement's own: b-trees and
rows first, virtual tables last), at most ``limit``, or ``["ok"]``; an error
a part raises is raised (the first in that order), as the statement would
have raised it. Only the order of lines from several failing virtual
tables can differ from the statement's (it walks its schema hash).
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import apsw

from ..schema import quote

MAX_THREADS = 4  # more parts than this (a foreign file's many virtual tables) queue
BUSY_MS = 10_000


def virtual_tables(conn: apsw.Connection) -> list[str]:
    """The schema's virtual tables, in schema order."""
    return [n for (n,) in conn.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND sql LIKE "
        "'create virtual table%' ORDER BY rowid")]


def integrity_lines(path: Path, virtual: list[str], limit: int = 20,
                    vfs: str | None = None) -> list[str]:
    """The lines ``PRAGMA integrity_check(limit)`` gives for the file at
    ``path`` whose virtual tables are ``virtual`` (see the module doc)."""
    parts: list[str | None] = [None, *virtual]  # None: everything but virtual tables
    with ThreadPoolExecutor(max_workers=min(len(parts), MAX_THREADS)) as pool:
        futures = [pool.submit(_part, path, table, limit, vfs) for table in parts]
        outcomes = [_outcome(f) for f in futures]  # every part ends before any raise
    lines: list[str] = []
    for got in outcomes:
        if isinstance(got, BaseException):
            raise got
        lines += [line for line in got if line != "ok"]
    return lines[:limit] or ["ok"]


def _outcome(future: Future[list[str]]) -> list[str] | BaseException:
    try:
        return future.result()
    except BaseException as e:  # re-raised by the caller, in part order
        return e


def _part(path: Path, table: str | None, limit: int, vfs: str | None) -> list[str]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY, vfs=vfs)
    try:
        # parts opening at once on a WAL file nobody has open race to rebuild
        # its shared-memory index; the losers wait for it instead of failing
        conn.set_busy_timeout(BUSY_MS)
        if table is None:
            conn.drop_modules(None)  # before any statement: no virtual table connected
            return [r[0] for r in conn.execute(f"PRAGMA integrity_check({int(limit)})")]
        return [r[0] for r in conn.execute(f"PRAGMA integrity_check({quote(table)})")]
    finally:
        conn.close()

