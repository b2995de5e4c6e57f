"""`recover` of a sound copy: the snapshot copied page for page.

A file inspect finds sound needs no row-by-row copy: recover copies the
private snapshot (never the source) into the new file with SQLite's backup
API and checks that the new file is that snapshot, page for page. When the
snapshot's copy is on the output's filesystem and had no WAL to fold in,
the copy itself becomes the new file (a hard link, synced): no second
write, and its sha256 must be the one the snapshot took of the source.

What "sound" means here, exactly (`reason_not` and `unsound_indexes`):

- inspect's verdict is ``healthy`` without the whole-file quick_check: the
  header needs no repair, the WAL (if any) is valid, SQLite reads the
  schema (no garbled entry, no ``writable_schema``), every row of every
  table is read through SQLite with ``cell_size_check`` on, the search
  index is not marked stale and its sampled checks pass;
- every index of every data table is read whole and lists as many rows as
  its table (a partial index is left out);
- our store's schema is the current one (nothing pending, nothing unknown),
  and nothing in it is what the row-by-row path would rewrite
  (`needs_rewrite`): no JSON value it would quarantine, no row whose
  parent is missing (``foreign_key_check``), no session whose counters
  differ from its messages;
- ``PRAGMA quick_check`` runs on a thread beside the copy and its
  verification and is stopped when they end: damage it found by then sends
  recover to the lanes, as it does on the row-by-row path.

Not covered by these, and so carried into the new file as it is: damage in
the freelist or in pages no tree owns (quick_check's page accounting, when
it did not get that far) and a search index damaged beyond the sampled
checks' reach.

The new file is verified (`verify_copy`): the same size, every page equal
to the snapshot's (page 1's change counter, schema cookie
and version-valid-for number aside, which the backup sets), each
table's row count equal to what inspect read, our schema current, and a
MATCH probe of every FTS5 table.
"""
from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path
from typing import Any, Callable

import apsw

from sessiondb.recovery_api import (create_private_file, from_apsw, one, pending_migrations,
                                   unknown_migrations)

from ..base import Verdict
from ..inspection import InspectReport, match_probe
from ..output import JSON_COLUMNS, image_copy
from ..schema import Catalog, quote, reference_catalog
from .verify import Verification

STEP_PAGES = 4096  # pages a backup step copies between progress reports
CHUNK = 1 << 20
# page 1 bytes the backup sets in the new file: the change counter, the
# schema cookie (one more than the new file's own) and version-valid-for
REWRITTEN = ((24, 28), (40, 44), (92, 100))


def reason_not(cat: Catalog | None, insp: InspectReport, *, default_lanes: bool,
               include_freelist: bool) -> str | None:
    """Why the page copy does not apply to this copy (None: it does)."""
    if not default_lanes or include_freelist:
        return "lanes chosen by hand, or deleted rows asked for"
    if cat is None or cat.tolerant or cat.reference or cat.unreadable:
        return "the schema is not read whole"
    if cat.foreign:  # its output's virtual tables are rebuilt from their content
        return "not our store"
    if insp.data_verdict != Verdict.HEALTHY or insp.header_fixes or insp.schema_error:
        return f"verdict {insp.data_verdict.value}"
    mig = insp.migrations or {}
    if mig.get("pending") or mig.get("unknown") or "error" in mig or _other_schema(cat):
        return "the schema is not the current one"
    return None


def _other_schema(cat: Catalog) -> bool:
    """Whether the file's tables, indexes, views and triggers differ in any
    statement from the current schema's (a constraint taken out by hand, say)."""
    def kept(entries: list[tuple[str, str, str, str | None]]) -> set[tuple[str, str, str]]:
        return {(k, n, " ".join((sql or "").split())) for k, n, _t, sql in entries
                if not n.startswith("sqlite_")}
    return kept(cat.entries) != kept(reference_catalog().entries)


def checkpoint_copy(copy: Path) -> bool:
    """Fold the private copy's -wal into it (never the source's), so the new
    file can be compared with it page for page; whether there was one."""
    wal = Path(f"{copy}-wal")
    if not wal.exists() or wal.stat().st_size == 0:
        return False
    conn = apsw.Connection(str(copy), flags=apsw.SQLITE_OPEN_READWRITE)
    try:
        conn.set_busy_timeout(1000)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    return True


def link_copy(copy: Path, tmp: Path) -> int | None:
    """The snapshot's copy itself as the new file, when it is on the same
    filesystem (a hard link, then synced: the copy is scratch, never synced):
    its bytes are then the source's as the snapshot hashed them, with no
    second write. The pages it holds, or None when it cannot be linked."""
    try:
        os.link(copy, tmp)
    except OSError:
        return None
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    with open(tmp, "rb") as f:
        head = f.read(100)
    size = int.from_bytes(head[16:18], "big")
    return tmp.stat().st_size // (65536 if size == 1 else size or 1)


def unsound_indexes(conn: apsw.Connection, cat: Catalog, rows: dict[str, int]) -> list[str]:
    """Every index of a data table read whole: a finding for each that
    cannot be read or lists another number of rows than its table."""
    found = []
    for index, table in sorted(cat.index_of.items()):
        spec = cat.tables.get(table)
        sql = next((e[3] for e in cat.entries if e[0] == "index" and e[1] == index), None)
        if spec is None or spec.kind == "derived" or (sql and re.search(r"\bwhere\b", sql,
                                                                        re.I)):
            continue
        try:
            n = one(conn.execute(f"SELECT count(*) FROM {spec.quoted()} INDEXED BY "
                                 f"{quote(index)}"))[0]
        except (apsw.Error, UnicodeDecodeError) as e:
            found.append(f"index {index}: {type(e).__name__}: {e}")
            continue
        if n != rows.get(table, 0):
            found.append(f"index {index}: {n} entries for {rows.get(table, 0)} rows")
    return found


RECOUNT = (
    "SELECT count(*) FROM sessions AS s LEFT JOIN (SELECT session_id, count(*) AS n, "
    "coalesce(sum(CASE WHEN json_valid(tool_calls) AND json_type(tool_calls) = 'array' "
    "THEN json_array_length(tool_calls) ELSE 0 END), 0) AS tc FROM messages "
    "GROUP BY session_id) AS m ON m.session_id = s.id WHERE s.message_count IS NOT "
    "coalesce(m.n, 0) OR s.tool_call_count IS NOT coalesce(m.tc, 0)")


def needs_rewrite(conn: apsw.Connection, cat: Catalog) -> list[str]:
    """What the row-by-row path would change in our store (a finding each):
    JSON values it quarantines, rows whose parent is missing, session
    counters it recounts. None: its output holds the same rows as a page copy."""
    found = []
    for table, columns in JSON_COLUMNS.items():
        spec = cat.tables.get(table)
        if spec is None:
            continue
        clean = image_copy.clean_sql(columns, spec.columns, table)
        n = one(conn.execute(f"SELECT count(*) FROM {spec.quoted()} WHERE NOT ({clean})"))[0]
        if n:
            found.append(f"table {table}: {n} rows with a value to quarantine")
    if conn.execute("PRAGMA foreign_key_check").fetchone() is not None:
        found.append("rows whose parent row is missing")
    if {"sessions", "messages"} <= set(cat.tables) and one(conn.execute(RECOUNT))[0]:
        found.append("sessions whose counters differ from their messages")
    return found


def copy_pages(copy: Path, tmp: Path, vfs: str | None,
               progress: Callable[[str, int, int], None] | None) -> int:
    """The copy into a new file at ``tmp`` with SQLite's backup API, in
    steps; the pages copied. A failing write is the store's typed error."""
    create_private_file(tmp)
    source = apsw.Connection(str(copy), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        dest = apsw.Connection(str(tmp), vfs=vfs) if vfs else apsw.Connection(str(tmp))
        try:
            with dest.backup("main", source, "main") as b:
                while not b.done:
                    b.step(STEP_PAGES)
                    if progress is not None:
                        progress("copying pages", b.page_count - b.remaining, b.page_count)
                pages = b.page_count
        finally:
            dest.close()
    except apsw.Error as e:
        raise from_apsw(e, path=str(tmp), context="cannot write the new file") from e
    finally:
        source.close()
    return pages


def verify_copy(copy: Path, tmp: Path, cat: Catalog, rows: dict[str, int],
                sha256: str | None = None,
                progress: Callable[[str, int, int], None] | None = None) -> Verification:
    """The new file is the copy, page for page, and reads as it (see the
    module docstring); a linked copy (``sha256``: the snapshot's hash of the
    source) is read whole and hashed instead."""
    v = Verification()
    tell = progress or (lambda _what, _done, _total: None)
    tell("verifying: pages", 0, 2)
    started = time.monotonic()
    v.checks["pages_equal"] = (_same_pages(copy, tmp, v) if sha256 is None
                               else _same_digest(tmp, sha256, v))
    v.seconds["pages"] = round(time.monotonic() - started, 3)
    tell("verifying: reads", 1, 2)
    started = time.monotonic()
    conn = apsw.Connection(str(tmp), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        _counts(conn, cat, rows, v)
        if not cat.foreign:
            pending, unknown = pending_migrations(conn), unknown_migrations(conn)
            v.checks["schema"] = {"pending": pending, "unknown": unknown}
            if pending or unknown:
                v.findings.append(f"schema is not current (pending {pending}, unknown "
                                  f"{unknown})")
        v.checks["fts"] = [_probe(conn, name) for name in cat.fts5]
    except (apsw.Error, UnicodeDecodeError) as e:
        v.findings.append(f"the new file cannot be read: {type(e).__name__}: {e}")
    finally:
        conn.close()
    v.seconds["reads"] = round(time.monotonic() - started, 3)
    tell("verifying", 2, 2)
    return v


def drop_sidecars(tmp: Path) -> None:
    """The -wal and -shm that read-only connections to the new file leave
    (the file is in WAL mode, as the source was): nothing was written to
    them, and the new file is put in place alone."""
    wal = Path(f"{tmp}-wal")
    if wal.exists() and wal.stat().st_size == 0:
        wal.unlink()
    if not wal.exists():
        Path(f"{tmp}-shm").unlink(missing_ok=True)


def _probe(conn: apsw.Connection, name: str) -> dict[str, Any]:
    health = match_probe(conn, name)
    return {"name": name, "probe_ok": health.probe_ok, "error": health.error}


def _counts(conn: apsw.Connection, cat: Catalog, rows: dict[str, int],
            v: Verification) -> None:
    counts: dict[str, int] = {}
    for spec in cat.data_tables():
        counts[spec.name] = one(conn.execute(f"SELECT count(*) FROM {spec.quoted()}"))[0]
        if counts[spec.name] != rows.get(spec.name, 0):
            v.findings.append(f"table {spec.name}: {counts[spec.name]} rows, inspect read "
                              f"{rows.get(spec.name, 0)}")
    v.checks["counts"] = {n: c for n, c in counts.items() if c}


def _same_pages(copy: Path, tmp: Path, v: Verification) -> bool:
    """Every byte of the two files equal, but for those SQLite rewrites on
    page 1 (read in 1 MiB chunks, compared as they come)."""
    if copy.stat().st_size != tmp.stat().st_size:
        v.findings.append(f"the new file has {tmp.stat().st_size} bytes, the copy "
                          f"{copy.stat().st_size}")
        return False
    with open(copy, "rb") as a, open(tmp, "rb") as b:
        first = True
        while True:
            x, y = a.read(CHUNK), b.read(CHUNK)
            if first:
                x, y = _masked(x), _masked(y)
                first = False
            if x != y:
                v.findings.append(f"the new file differs from the copy near byte "
                                  f"{a.tell() - len(x)}")
                return False
            if not x:
                return True


def _same_digest(tmp: Path, sha256: str, v: Verification) -> bool:
    digest = hashlib.sha256()
    with open(tmp, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != sha256:
        v.findings.append("the new file's sha256 is not the snapshot's")
        return False
    return True


def _masked(chunk: bytes) -> bytes:
    out = bytearray(chunk)
    for lo, hi in REWRITTEN:
        out[lo:hi] = bytes(hi - lo)
    return bytes(out)
