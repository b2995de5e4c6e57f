"""The foreign-file half of `recover`: write in the source's schema, verify.

`recover` hands over here when the catalog says the source is not our
store (`Catalog.foreign`): the rows the lanes found go into a new file in
the source's own schema (`foreign_write`), which is then checked against
that schema (`verify.verify_foreign`). What the source's header keeps
(page size, application_id, user_version, WAL mode), its AUTOINCREMENT
counters and the rows of FTS5 tables that keep their own content are read
from the private copy while the lanes' connection is still open.
"""
from __future__ import annotations

import re
from pathlib import Path
import apsw

from .catalog import READ_ERRORS, ROWID_KEY, Catalog, quote
from .foreign_write import ForeignWrite, HeaderValues, write_foreign
from .headers import read_db_header
from .verify import Verification, verify_foreign


def header_values(copy: Path) -> HeaderValues:
    head = read_db_header(copy).header
    if head is None or not head.magic.startswith(b"SQLite format 3"):
        return HeaderValues()
    return HeaderValues(page_size=head.page_size, application_id=head.application_id,
                        user_version=head.user_version, wal=head.read_version == 2)


def read_extras(conn: apsw.Connection | None, cat: Catalog) -> tuple[dict, dict]:
    """(rows of FTS5 tables keeping their own content, AUTOINCREMENT counters),
    as far as the source lets them be read."""
    fts: dict[str, list[dict]] = {}
    seq: dict[str, int] = {}
    if conn is None:
        return fts, seq
    for name in cat.fts5:
        sql = cat.tables[name].sql if name in cat.tables else ""
        if re.search(r"\bcontent\s*=", sql, re.I):
            continue  # external content or contentless: nothing of its own to copy
        try:
            cur = conn.execute(f"SELECT rowid, * FROM {quote(name)}")
            cols = [d[0] for d in cur.getdescription()][1:]
            fts[name] = [{ROWID_KEY: r[0], **dict(zip(cols, r[1:]))} for r in cur]
        except READ_ERRORS:
            continue
    try:
        seq = {n: s for n, s in conn.execute("SELECT name, seq FROM sqlite_sequence")
               if isinstance(n, str) and isinstance(s, int)}
    except READ_ERRORS:
        pass
    return fts, seq


def write_and_verify(tmp: Path, cat: Catalog, rows: dict[str, list[dict]], copy: Path,
                     lost: list[tuple[str, dict]], extras: tuple[dict, dict],
                     readable: dict[str, int]) -> tuple[ForeignWrite, Verification]:
    fts, seq = extras
    written = write_foreign(tmp, cat, rows, header_values(copy), lost_and_found=lost,
                            fts_rows=fts, sequence=seq)
    not_made = {n.split(":")[0].rsplit(" (", 1)[0] for n in written.notes}
    expected = {t: n for t, n in written.inserted.items()}
    verification = verify_foreign(tmp, cat.entries, expected, readable,
                                  allowed_missing=not_made)
    return written, verification


def loss_reasons(written: ForeignWrite) -> list[str]:
    out = [f"table {t}: {n} rows rejected by the source's schema (kept in the "
           "lost-and-found file)" for t, n in written.rejected.items() if n]
    out += [f"table {t}: {n} rows only partly recovered (from an index) kept in the "
            "lost-and-found file, not in the table" for t, n in written.partial.items() if n]
    out += [f"virtual table {n}: {how}" for n, how in written.virtual.items()
            if how.startswith(("contentless", "its own content", "could not"))]
    return out
