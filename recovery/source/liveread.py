"""Looking at a live store without writing to it: the shared diagnosis of doctor and repair.

A read-only apsw connection never runs migrations, never checkpoints and
never deletes the `-wal` on close, so it is safe beside other processes.
Checks that SQLite implements as writes (FTS5's integrity-check is an
INSERT command) run on a private copy taken with the backup API from that
read-only connection, inside a 0700 scratch directory beside the store.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from sessiondb.recovery_api import (Cause, FTS_TABLE, INDEXES, LEGACY_TRIGRAM_TABLE, SearchHealth,
                                    StorageError,
                                    classify_text, connection_errno, corruption_is_index_only,
                                    from_apsw, health_on, other_holders, pending_migrations,
                                    unknown_migrations)

from ..base import RecoveryError
from ..schema import is_shadow_name
from . import snapshot

# Our scratch directories beside a store; doctor finds and removes stale ones.
SCRATCH_PREFIX = ".hermes-scratch-"
QUICK_CHECK_BUDGET_S = 20.0
BUSY_MS = 5000
CANONICAL = ("sessions", "messages")
# the search tables, and the trigram index of a file from before m015
_DERIVED = INDEXES + (LEGACY_TRIGRAM_TABLE,)


def open_readonly(db_path: Path) -> apsw.Connection:
    """A read-only connection to the live file (typed error if it cannot open)."""
    conn = None
    try:
        conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
        conn.set_busy_timeout(BUSY_MS)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
        return conn
    except apsw.Error as e:
        err = from_apsw(e, path=str(db_path), context=f"cannot read {db_path}",
                        system_errno=connection_errno(conn) if conn is not None else None)
        if conn is not None:
            conn.close()
        raise err from e


def bounded_check(conn: apsw.Connection, *, full: bool = False,
                  budget_s: float | None = None) -> list[str]:
    """``quick_check`` (``integrity_check`` when ``full``), interrupted after
    ``budget_s`` so a huge file cannot stall doctor; the answer then says so."""
    budget_s = QUICK_CHECK_BUDGET_S if budget_s is None else budget_s
    deadline = time.monotonic() + budget_s
    if deadline != float("inf"):  # a Python call every 1,000 steps costs when unneeded
        conn.set_progress_handler(lambda: time.monotonic() > deadline, 1000)
    pragma = "integrity_check" if full else "quick_check"
    try:
        # SQLite packs several problems into one row, separated by newlines.
        lines = [ln for r in conn.execute(f"PRAGMA {pragma}(20)") for ln in r[0].splitlines()]
        return lines[:20]
    except apsw.InterruptError:
        return [f"stopped after {budget_s:.0f} s (not finished)"]
    except apsw.Error as e:
        return [f"{type(e).__name__}: {e}"]
    finally:
        conn.set_progress_handler(None)


def structural(conn: apsw.Connection, check: list[str]) -> bool:
    """Damage beyond the search index: the check failed and the store's own
    judgement (`corruption_is_index_only`) does not put it all in the index."""
    if check == ["ok"] or (len(check) == 1 and check[0].startswith("stopped after")):
        return False
    if corruption_is_index_only(conn):
        return False
    # FTS5-level damage (valid b-tree pages, junk inside index records): the
    # check names the index (or FTS5 ran out of memory on a junk structure
    # record, which stops the check), and every canonical table checks clean.
    if not all(classify_text(line) == Cause.FTS_INDEX or line.startswith("NoMemError")
               or any(t in line for t in _DERIVED) for line in check):
        return True
    rows: list[tuple[Any, ...]] = conn.execute(
        "SELECT name, rootpage, sql FROM sqlite_master WHERE type = 'table'"
                        ).fetchall()
    virtual = {n for n, root, sql in rows if not root and str(sql or "").upper().startswith(
        "CREATE VIRTUAL")}
    # shadow tables of any virtual table are derived, ours or a foreign file's
    canonical = [n for n, root, _sql in rows if root and not n.startswith(_DERIVED)
                 and not is_shadow_name(n, virtual)]
    return not all(_table_ok(conn, name) for name in canonical)


def _table_ok(conn: apsw.Connection, name: str) -> bool:
    quoted = name.replace('"', '""')
    try:
        return conn.execute(f'PRAGMA quick_check("{quoted}")').fetchall() == [("ok",)]
    except apsw.Error:
        return False


def canonical_digest(conn: apsw.Connection) -> str:
    """Hash of every canonical row: repair must leave it exactly as it was."""
    digest = hashlib.sha256()
    for table in CANONICAL:
        for row in conn.execute(f"SELECT * FROM {table} ORDER BY rowid"):
            digest.update(repr(row).encode())
    return digest.hexdigest()


@dataclass
class Diagnosis:
    """What is wrong with a readable store, from a read-only look plus a private copy."""

    check: list[str]
    structural: bool
    pending: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    search: SearchHealth | None = None
    search_error: str | None = None

    @property
    def derived_problems(self) -> list[str]:
        out = [f"pending migration {m}" for m in self.pending]
        if self.search is not None:
            if self.search.stale is not None:
                out.append("search index marked stale (fts_stale)")
            if not self.search.triggers_attached:
                out.append("search sync triggers missing")
            out += [f"{i.name}: {i.integrity if i.integrity != 'ok' else i.probe}"
                    for i in self.search.indexes if i.integrity != "ok" or i.probe != "ok"]
        if self.check != ["ok"] and not self.structural and not self.check[0].startswith(
                "stopped after"):
            out.append("quick_check finds damage in the search index's tables")
        return out


def scratch_dir(parent: Path) -> Path:
    """A fresh 0700 scratch directory beside the store (mkdtemp makes it 0700)."""
    return Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent))


def copy_live(conn: apsw.Connection, dest: Path) -> None:
    """Backup-API copy of the live store into ``dest`` (a new 0600 file)."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    out = apsw.Connection(str(dest))
    try:
        with out.backup("main", conn, "main") as b:
            b.step(-1)
    finally:
        out.close()


def search_on_copy(copy: Path) -> SearchHealth:
    """FTS integrity and a MATCH probe on a private copy (rolled back after)."""
    conn = apsw.Connection(str(copy))
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            return health_on(conn)
        finally:
            if not conn.get_autocommit():  # FTS5 out of memory has rolled it back already
                conn.execute("ROLLBACK")
    finally:
        conn.close()


def diagnose(db_path: Path, *, full: bool = False) -> Diagnosis:
    """Read-only diagnosis of the live store; the FTS part runs on a copy."""
    conn = open_readonly(db_path)
    try:
        return _diagnose(conn, db_path, full)
    except apsw.Error as e:
        raise from_apsw(e, path=str(db_path), context=f"cannot check {db_path}") from e
    finally:
        conn.close()


def _diagnose(conn: apsw.Connection, db_path: Path, full: bool) -> Diagnosis:
    check = bounded_check(conn, full=full)
    diag = Diagnosis(check, structural(conn, check))
    if diag.structural:
        return diag
    diag.pending = pending_migrations(conn)
    diag.unknown = unknown_migrations(conn)
    if FTS_TABLE in _tables(conn):
        diag.search, diag.search_error = search_check(conn, db_path)
    return diag


def search_check(conn: apsw.Connection,
                  db_path: Path) -> tuple[SearchHealth | None, str | None]:
    """The FTS checks on a private copy; (None, why) when the copy cannot be made."""
    try:
        snapshot.check_space({db_path.parent: snapshot.source_bytes(db_path)},
                             snapshot.DEFAULT_HEADROOM)
    except RecoveryError as e:
        return None, str(e)
    work = scratch_dir(db_path.parent)
    try:
        copy_live(conn, work / "check.db")
        return search_on_copy(work / "check.db"), None
    except (apsw.Error, StorageError) as e:
        return None, f"{type(e).__name__}: {e}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _tables(conn: apsw.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def holder_names(db_path: Path) -> list[str] | None:
    """Other processes holding the store, as ``pid (command)``; None when unknown."""
    pids = other_holders(db_path)
    if pids is None:
        return None
    return [f"{pid} ({cmdline_of(pid)})" for pid in pids]


def cmdline_of(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(p.decode("utf-8", "replace") for p in raw.split(b"\0") if p)[:120] or "?"
