"""Doctor checks that stay fast on a multi-gigabyte store, and its size report.

The exhaustive store check (quick_check over every page, then FTS5's
integrity-check on a private copy of the whole file) costs time in
proportion to the file: seconds at 100 MB, minutes at several GB. So:

- a store up to `SMALL_STORE_BYTES` gets the exhaustive check by default
  (doctor.check_store), as it always did;
- a larger one gets the fast checks by default: page 1's header, journal
  mode, schema, a bounded random sample of rows of every canonical table
  and of the message index (each read walks the b-tree from the root to a
  leaf and its overflow pages), and a MATCH probe of both search indexes
  for sampled messages; the finding says it sampled and which command
  checks every page;
- ``doctor --full`` runs the exhaustive checks at any size, without the
  default time budget, telling ``Target.progress`` each phase and an
  estimate of the time from the file's size.

`check_size` is the size section: file, WAL and freelist bytes, bytes by
table and index from ``dbstat`` (bounded in time by default), the search
index's share, and growth advice with the command to run.
"""
from __future__ import annotations

import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import apsw

from sessiondb.recovery_api import (Cause, FTS_TABLE, INDEXES, StorageError, TEXT_VIEW,
                                    TERMS_TABLE, classify, one, pending_migrations, stale_marker,
                                    term_held, triggers_attached, unknown_migrations)

from ..base import Severity
from ..schema import is_without_rowid
from ..source import liveread, read_db_header
from . import doctor_health
from .doctor_damage import damage_record_findings
from .checks import (check_store, journal_finding, liveread_bundle, quick_check_finding,
                     schema_findings, search_findings)
from .model import Finding, Target

SMALL_STORE_BYTES = 128 << 20
SAMPLE_ROWS = 64           # random seeks per canonical table
SAMPLE_BUDGET_S = 2.0
SIZE_BUDGET_S = 3.0        # dbstat walks every page; by default it may stop early
FULL_RATE_BYTES_S = 20 << 20  # whole-file rate of --full: 16-26 MB/s in bench/scale.py
CANONICAL_TABLES = ("sessions", "messages", "compactions", "session_flags")
FREELIST_ADVICE = 0.20     # share of the file that is free pages
SEARCH_ADVICE = 0.50       # share of the used bytes that is the search index
BIG_STORE_ADVICE = 1 << 30
# What a sampled read failing with means damage; any other error is not a finding
# about the file (it says the sample could not run).
DAMAGE = (apsw.CorruptError, apsw.NotADBError, apsw.IOError)


def check_store_scaled(t: Target) -> list[Finding]:
    """The store check doctor runs: exhaustive when small or ``--full``, sampled otherwise."""
    size = liveread_bundle(t.db)
    if t.full:
        found = _full(t, size)
    elif size <= SMALL_STORE_BYTES:
        found = check_store(t)
    else:
        found = _fast(t, size)
    found = _rescue_first(t, found)
    return found + damage_record_findings(t, found)


def _rescue_first(t: Target, findings: list[Finding]) -> list[Finding]:
    """While a process holds the store's deleted -wal, a failed read of the
    main file (an I/O error at open, or damage quick_check sees in pages
    the -wal superseded) is that missing log, not the file's damage: each
    error's fix is to copy the log out of the holder first. Without this,
    inspect-only reports the live holder and sends the operator back here."""
    if not any(f.severity is Severity.ERROR for f in findings):
        return findings
    held = doctor_health.deleted_wal_holders(t.db)
    if not held:
        return findings
    fix = doctor_health.rescue_fix(t, held[0])
    return [replace(f, message=f"{f.message} (the -wal was deleted while process "
                    f"{held[0].pid} holds it: see deleted_wal)", fix=fix)
            if f.severity is Severity.ERROR and f.fix != fix else f for f in findings]


def _note(t: Target, text: str) -> None:
    progress = getattr(t, "progress", None)
    if progress is not None:
        progress(text)


# -- --full: every page, with progress ---------------------------------------------

def _full(t: Target, size: int) -> list[Finding]:
    estimate = size / FULL_RATE_BYTES_S
    _note(t, f"doctor --full: checking {size / (1 << 20):.0f} MiB, about {estimate:.0f} s")
    started = time.monotonic()
    try:
        conn = liveread.open_readonly(t.db)
    except StorageError as e:
        return [_open_failed(t, e)]
    try:
        mode = conn.execute("PRAGMA journal_mode").fetchall()[0][0]
        _note(t, "integrity_check of every page (1/2)")
        check = liveread.bounded_check(conn, full=True, budget_s=float("inf"))
        diag = liveread.Diagnosis(check, liveread.structural(conn, check))
        if not diag.structural:
            diag.pending, diag.unknown = pending_migrations(conn), unknown_migrations(conn)
            if FTS_TABLE in _tables(conn):
                _note(t, f"search index check on a private copy (2/2), "
                         f"{time.monotonic() - started:.0f} s so far")
                diag.search, diag.search_error = liveread.search_check(conn, t.db)
    except apsw.Error as e:
        return [_open_failed(t, e)]
    finally:
        conn.close()
    _note(t, f"done in {time.monotonic() - started:.0f} s")
    out = [journal_finding(mode), quick_check_finding(t, diag)]
    return out if diag.structural else out + schema_findings(t, diag) + search_findings(t, diag)


def _open_failed(t: Target, e: BaseException) -> Finding:
    failure = t.failure(classify(e))
    return Finding("open", Severity.ERROR, f"cannot read the store: {e}. {failure.summary}",
                   "; then ".join(failure.actions) or None)


def _tables(conn: apsw.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


# -- the fast checks ------------------------------------------------------------------

def _fast(t: Target, size: int) -> list[Finding]:
    head = read_db_header(t.db)
    if head.problems or not head.magic_ok:
        failure = t.failure(Cause.CORRUPT)
        return [Finding("header", Severity.ERROR, f"page 1's header is damaged: "
                        f"{'; '.join(head.problems) or 'no SQLite magic'}. {failure.summary}",
                        "; then ".join(failure.actions))]
    try:
        conn = liveread.open_readonly(t.db)
    except StorageError as e:
        return [_open_failed(t, e)]
    try:
        conn.execute("BEGIN")  # one snapshot for every sample
        mode = conn.execute("PRAGMA journal_mode").fetchall()[0][0]
        sampled, damage = sample_structure(conn)
        if damage:
            failure = t.failure(Cause.CORRUPT)
            return [journal_finding(mode), Finding(
                "structure_sample", Severity.ERROR, f"{failure.summary} A sampled read failed: "
                f"{damage}", "; then ".join(failure.actions))]
        diag = liveread.Diagnosis(["ok"], False, pending_migrations(conn),
                                  unknown_migrations(conn))
        out = [journal_finding(mode), Finding(
            "structure_sample", Severity.OK, f"{sampled} sampled rows of a "
            f"{size / (1 << 20):.0f} MiB store read cleanly (every page: "
            f"{t.command('doctor', '--full')})")]
        return out + schema_findings(t, diag) + sample_search(t, conn)
    except apsw.Error as e:
        return [_open_failed(t, e)]
    finally:
        conn.close()


def _rowid_bounds(conn: apsw.Connection, table: str) -> tuple[int, int] | None:
    quoted = f'"{table}"'
    lo, hi = one(conn.execute(f"SELECT min(rowid), max(rowid) FROM {quoted}"))
    return None if lo is None else (lo, hi)


def sample_structure(conn: apsw.Connection, *, rows: int = SAMPLE_ROWS,
                     budget_s: float = SAMPLE_BUDGET_S,
                     rng: random.Random | None = None) -> tuple[int, str | None]:
    """Read ``rows`` random rows of each canonical table (whole rows: overflow
    pages too) and the message-order index around them; (rows read, the first
    failure or None). Stops at the time budget."""
    rng = rng or random.Random()
    deadline = time.monotonic() + budget_s
    read = 0
    schema = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
    try:
        for table in (t for t in CANONICAL_TABLES if t in schema):
            if is_without_rowid(schema[table]):  # no rowid to seek by: a short scan
                read += len(conn.execute(f'SELECT * FROM "{table}" LIMIT {rows}').fetchall())
                continue
            bounds = _rowid_bounds(conn, table)
            for _ in range(rows if bounds else 0):
                if time.monotonic() > deadline:
                    return read, None
                got = conn.execute(f'SELECT * FROM "{table}" WHERE rowid >= ? LIMIT 2',
                                   (rng.randint(*bounds),)  # type: ignore[misc]  # bounds set
                                   ).fetchall()
                read += len(got)
                if table == "messages" and got:
                    conn.execute("SELECT count(*) FROM (SELECT 1 FROM messages INDEXED BY "
                                 "messages_in_order WHERE session_id = ? AND position >= ?"
                                 " LIMIT 8)", (got[0][1], got[0][3])).fetchall()
    except DAMAGE as e:
        return read, f"{type(e).__name__}: {e}"
    return read, None


def _probe_word(text: str) -> str | None:
    words = "".join(c if c.isalnum() else " " for c in text[:2000]).split()
    return next((w for w in words if len(w) >= 3), None)


def sample_search(t: Target, conn: apsw.Connection, *, probes: int = 16,
                  rng: random.Random | None = None) -> list[Finding]:
    """The stale marker, the sync triggers, and MATCH probes of the word
    index and the term table for ``probes`` random messages (read-only: no integrity-check, which is a
    write in FTS5)."""
    tables = _tables(conn)
    if FTS_TABLE not in tables:
        return [Finding("search_index", Severity.INFO, "no search index yet (pending migration)")]
    stale = stale_marker(conn)
    out = [Finding("fts_stale", Severity.WARN, f"the search index is marked stale "
                   f"({stale.get('reason', '?')}); search scans rows instead",
                   t.fix_text(Cause.FTS_INDEX), True) if stale else
           Finding("fts_stale", Severity.OK, "the search index is not marked stale")]
    if stale:
        return out
    bad = [] if triggers_attached(conn) else ["sync triggers missing"]
    rng = rng or random.Random()
    bounds = _rowid_bounds(conn, "messages")
    checked = 0
    try:
        for _ in range(probes if bounds else 0):
            row = conn.execute(f"SELECT id, text FROM {TEXT_VIEW} WHERE id >= ?"
                               " LIMIT 1",
                               (rng.randint(*bounds),)  # type: ignore[misc]  # bounds set
                               ).fetchone()
            word = _probe_word(row[1] or "") if row else None
            if row is None or word is None:
                continue
            checked += 1
            if conn.execute(f"SELECT 1 FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ? AND rowid = ?",
                            ('"' + word.replace('"', '""') + '"', row[0])).fetchone() is None:
                bad.append(f"{FTS_TABLE}: message {row[0]} is missing")
            elif TERMS_TABLE in tables and word.isascii() and not term_held(conn, word.lower()):
                bad.append(f"{TERMS_TABLE}: the term {word.lower()!r} is missing")
    except apsw.Error as e:
        bad.append(f"{type(e).__name__}: {e}")
    if bad:
        return out + [Finding("search_index", Severity.WARN, t.failure(Cause.FTS_INDEX).summary
                              + " " + "; ".join(bad[:3]), t.fix_text(Cause.FTS_INDEX), True)]
    return out + [Finding("search_index", Severity.OK, f"{checked} sampled messages found in both "
                          "indexes (FTS5 integrity-check: doctor --full)")]


# -- the size section ---------------------------------------------------------------

def _dbstat(conn: apsw.Connection, budget_s: float) -> tuple[dict[str, int] | None, str]:
    over = f"over the {budget_s:.0f} s budget (doctor --full measures it)"
    if budget_s <= 0:
        return None, over
    deadline = time.monotonic() + budget_s
    conn.set_progress_handler(lambda: time.monotonic() > deadline, 100)
    try:
        if budget_s == float("inf"):  # one walk per b-tree inside dbstat: fastest
            rows = conn.execute("SELECT name, pgsize FROM dbstat WHERE aggregate = 1")
            return {name: int(size) for name, size in rows}, "dbstat"
        # A row per page: slower, but the progress handler gets control between
        # pages (an aggregate row is one uninterruptible walk of the whole b-tree).
        rows = conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name")
        return {name: int(size) for name, size in rows}, "dbstat"
    except apsw.InterruptError:
        return None, over
    except apsw.SQLError:
        return None, "unavailable (this SQLite has no dbstat)"
    finally:
        conn.set_progress_handler(None)


def size_report(db_path: Path, *, full: bool = False) -> dict[str, Any]:
    """Sizes of the store's files and (dbstat) of each table and index."""
    wal = Path(f"{db_path}-wal")
    conn = liveread.open_readonly(db_path)
    try:
        page_size = int(one(conn.execute("PRAGMA page_size"))[0])
        pages = int(one(conn.execute("PRAGMA page_count"))[0])
        free = int(one(conn.execute("PRAGMA freelist_count"))[0])
        by_name, method = _dbstat(conn, float("inf") if full else SIZE_BUDGET_S)
    finally:
        conn.close()
    used = (pages - free) * page_size
    search = (sum(v for k, v in by_name.items() if k.startswith(INDEXES))
              if by_name is not None else None)
    return {"file_bytes": db_path.stat().st_size, "wal_bytes": wal.stat().st_size
            if wal.exists() else 0, "page_size": page_size, "page_count": pages,
            "freelist_bytes": free * page_size,
            "freelist_share": round(free / pages, 4) if pages else 0.0,
            "by_name": dict(sorted((by_name or {}).items(), key=lambda kv: -kv[1])) or None,
            "search_index_bytes": search,
            "search_index_share": round(search / used, 4) if search is not None and used else None,
            "method": method}


def growth_advice(t: Target, size: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    if size["freelist_share"] >= FREELIST_ADVICE:
        out.append({"why": f"{size['freelist_bytes'] >> 20} MiB of the file are free pages",
                    "command": t.command("sessions", "optimize")})
    share = size["search_index_share"]
    if share is not None and share >= SEARCH_ADVICE:
        out.append({"why": f"the search index is {share:.0%} of the used bytes; pruning old "
                    "sessions shrinks it, optimize merges it",
                    "command": t.command("sessions", "prune", "--older-than", "180d",
                                         "--dry-run")})
    if size["file_bytes"] >= BIG_STORE_ADVICE and not out:
        out.append({"why": f"the store is {size['file_bytes'] >> 30} GiB",
                    "command": t.command("sessions", "prune", "--older-than", "180d",
                                         "--dry-run")})
    return out


def check_size(t: Target) -> list[Finding]:
    """The size section, as one finding carrying the report in ``data``."""
    try:
        size = size_report(t.db, full=t.full)
    except (StorageError, apsw.Error, OSError) as e:
        return [Finding("size", Severity.INFO, f"sizes not measured: {e}")]
    size["advice"] = growth_advice(t, size)
    top = ", ".join(f"{k} {v >> 20} MiB" for k, v in list((size["by_name"] or {}).items())[:3])
    share = size["search_index_share"]
    text = (f"file {size['file_bytes'] >> 20} MiB, WAL {size['wal_bytes'] >> 20} MiB, free "
            f"{size['freelist_bytes'] >> 20} MiB ({size['freelist_share']:.0%})"
            + (f", search index {share:.0%}" if share is not None else "")
            + (f"; largest: {top}" if top else f"; by table: {size['method']}"))
    if size["advice"]:
        return [Finding("size", Severity.INFO, text + "; " + size["advice"][0]["why"],
                        size["advice"][0]["command"], data=size)]
    return [Finding("size", Severity.OK, text, data=size)]


__all__ = ["check_store_scaled", "check_size", "size_report", "sample_structure",
           "sample_search", "SMALL_STORE_BYTES"]
