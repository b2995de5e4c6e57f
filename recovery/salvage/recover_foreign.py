"""The foreign-file half of `recover`: write in the source's schema, verify.

`recover` hands over here when the catalog says the source is not our
store (`Catalog.foreign`): the rows the lanes found go into a new file in
the source's own schema (`foreign_write`), which is then checked against
that schema (`verify.verify_foreign`). Rows stream into it as the lanes
read them (`ForeignSink`). What the source's header keeps (page size,
application_id, user_version, WAL mode), its AUTOINCREMENT counters and
the rows of FTS5 tables that keep their own content are read from the
private copy while the lanes' connection is still open.
"""
from __future__ import annotations

import re
from pathlib import Path

import apsw

from ..lanes import Progress, TableState
from ..output import ForeignSink, ForeignWrite, HeaderValues
from ..schema import Catalog, READ_ERRORS
from ..source import read_db_header
from .verify import Verification, verify_foreign


def header_values(copy: Path) -> HeaderValues:
    head = read_db_header(copy).header
    if head is None or not head.magic.startswith(b"SQLite format 3"):
        return HeaderValues()
    return HeaderValues(page_size=head.page_size, application_id=head.application_id,
                        user_version=head.user_version, wal=head.read_version == 2)


def read_extras(conn: apsw.Connection | None, cat: Catalog) -> tuple[set[str], dict[str, int]]:
    """(FTS5 tables keeping their own content, whose rows the output copies
    from ``conn`` as it is built; AUTOINCREMENT counters), as far as the
    source lets them be read."""
    own: set[str] = set()
    seq: dict[str, int] = {}
    if conn is None:
        return own, seq
    for name in cat.fts5:
        sql = cat.tables[name].sql if name in cat.tables else ""
        if re.search(r"\bcontent\s*=", sql, re.I):
            continue  # external content or contentless: nothing of its own to copy
        own.add(name)
    try:
        seq = {n: s for n, s in conn.execute("SELECT name, seq FROM sqlite_sequence")
               if isinstance(n, str) and isinstance(s, int)}
    except READ_ERRORS:
        pass
    return own, seq


def open_sink(tmp: Path, cat: Catalog, copy: Path, states: dict[str, TableState],
              progress: Progress | None) -> ForeignSink:
    """The output in the source's own schema, with the header values it keeps."""
    return ForeignSink(tmp, cat, header_values(copy), states, progress)


def verify(tmp: Path, cat: Catalog, written: ForeignWrite,
           readable: dict[str, int]) -> Verification:
    not_made = {n.split(":")[0].rsplit(" (", 1)[0] for n in written.notes}
    expected = {t: n for t, n in written.inserted.items()}
    return verify_foreign(tmp, cat.entries, expected, readable, allowed_missing=not_made)


def loss_reasons(written: ForeignWrite) -> list[str]:
    out = [f"table {t}: {n} rows rejected by the source's schema (kept in the "
           "lost-and-found file)" for t, n in written.rejected.items() if n]
    out += [f"table {t}: {n} rows only partly recovered (from an index) kept in the "
            "lost-and-found file, not in the table" for t, n in written.partial.items() if n]
    out += [f"virtual table {n}: {how}" for n, how in written.virtual.items()
            if how.startswith(("contentless", "its own content", "could not"))]
    return out
